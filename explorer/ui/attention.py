"""The Attention tab: maps from a query patch (a layer of each model, head by head, each head's distance and
self-attention written on its tile and the most local and most self-attending heads framed; every layer × head
for models of up to 4 heads), the attention rollout, and locality (mean attention distance and entropy per
layer); the what-if switches sit below (explorer.ui.what_if).

A click on the picker sends one picture: the query's outline is drawn by the page itself (OUTLINE_JS,
from the small `cell` value) and both kinds of maps from the query come as one picture.
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from explorer.analysis import plots, render, reports
from explorer.analysis.render import square
from explorer.app.attention import (
    HEAD_ALL,
    HEAD_MEAN,
    PARTS,
    SAME_DEPTH,
    SHEET_HEADS,
    analyze_pair,
    check_layer,
    layer_words,
    pair_layers,
    side_by_side_pictures,
)
from explorer.app.results import query_patch
from explorer.app.state import NotApplicable
from explorer.checkpoints.store import CheckpointError
from explorer.ui import what_if
from explorer.ui.context import UNLISTED, AppState, Page, in_place, initial, quiet
from explorer.ui.pictures import PLOT_MIN, as_pictures, drawn, picture
from explorer.ui.trust import map_note

QUERY_PICKER = 224
SCOPES = ["this image", "64 test images"]

# Draws the query patch's outline over the picker image from {"row", "col", "grid"}, where the image is
# actually shown (it is fitted into its box), and again whenever the picture or the page changes size.
OUTLINE_JS = """
function outline(cell, tries = 0) {
  const root = document.querySelector('#picker');
  const img = root && root.querySelector('img');
  if (!img) {  // not rendered yet (the page is loading, or the tab was never shown): try again shortly
    if (tries < 50) setTimeout(() => outline(cell, tries + 1), 200);
    return;
  }
  const holder = img.parentElement;
  let box = holder.querySelector('.query-outline');
  if (!box) {
    box = document.createElement('div');
    box.className = 'query-outline';
    holder.style.position = 'relative';
    holder.appendChild(box);
  }
  root._cell = cell;
  const place = () => {
    const c = root._cell;
    if (!c || !c.grid || !img.naturalWidth) { box.style.display = 'none'; return; }
    // Where the picture itself is drawn inside its img box: within the padding and border, scaled as its
    // object-fit says (Gradio's "scale-down" never enlarges it: a 224 px picture stays 224 px in a 240 px box),
    // centred (object-position's default).
    const r = img.getBoundingClientRect(), p = holder.getBoundingClientRect(), s = getComputedStyle(img);
    const px = (v) => parseFloat(v) || 0;
    const left = px(s.borderLeftWidth) + px(s.paddingLeft), top = px(s.borderTopWidth) + px(s.paddingTop);
    const w = r.width - left - px(s.borderRightWidth) - px(s.paddingRight);
    const h = r.height - top - px(s.borderBottomWidth) - px(s.paddingBottom);
    let scale = Math.min(w / img.naturalWidth, h / img.naturalHeight);
    if (s.objectFit === 'none') scale = 1;
    else if (s.objectFit === 'scale-down') scale = Math.min(scale, 1);
    else if (s.objectFit === 'cover') scale = Math.max(w / img.naturalWidth, h / img.naturalHeight);
    const side = Math.min(img.naturalWidth, img.naturalHeight) * scale, step = side / c.grid;
    box.style.display = 'block';
    box.style.left = (r.left - p.left + left + (w - side) / 2 + c.col * step) + 'px';
    box.style.top = (r.top - p.top + top + (h - side) / 2 + c.row * step) + 'px';
    box.style.width = box.style.height = step + 'px';
  };
  if (!img._outlined) {
    img._outlined = true;
    img.addEventListener('load', place);
    new ResizeObserver(place).observe(img);
  }
  place();
}
"""


# The button that shows the paper-scale ViT's self-attending head: both first layers, every head, the middle patch.
SELF_HEAD_LABEL = "The ViT's self-attending head (paper scale)"
SELF_HEAD_QUERY = (16.0, 16.0)


def _marks_words(tag: str, loaded, view) -> str:
    """What one model's marked heads are, in words (the frames' key)."""
    marks = view.marks
    local = (f"most local head **{marks.most_local}** (green: attends {marks.distance[marks.most_local]:.2f} of the "
             f"image's side from the query)")
    if marks.most_self is None:
        own = ("no head attends to the query's own patch (LSA masks it)" if loaded.probe.diagonal_mask else
               "no head gives the query's own patch more than even attention")
    else:
        share = 100 * marks.self_share[marks.most_self]
        own = f"most self-attending head **{marks.most_self}** (blue: {share:.1f} % to its own patch)"
    return f"{tag}: {local}; {own}."


class AttentionTab:
    def __init__(self, app: AppState):
        self.app = app

    def query_picker(self, file):
        """The image to click a query patch on (its outline is the page's)."""
        try:
            _, preview = self.app.image(file)
        except gr.Error:
            return None
        return square(preview, QUERY_PICKER)

    def _cell(self, ref_b: str, qy, qx, request=None) -> dict:
        config = self.app.model(ref_b, request).config
        row, col = query_patch((float(qy or 0), float(qx or 0)), config)
        return {"row": row, "col": col, "grid": config.grid_size}

    def _pictures(self, file, ref_a, ref_b, layer, head, qy, qx, parts, layer_b=SAME_DEPTH, request=None,
                  clip=False):
        image, preview = self.app.image(file)
        a, b = self.app.pair(ref_a, ref_b, request)
        try:
            if clip:  # the page's own redraw after a slot change may still hold the previous models' layers
                layer = min(max(int(float(layer or 0)), 0), a.config.num_layers - 1)
                if layer_b not in (None, "", SAME_DEPTH):
                    layer_b = min(max(int(float(layer_b)), 0), b.config.num_layers - 1)
            layers = pair_layers([a, b], layer, layer_b)
            views = analyze_pair([a, b], self.app.cache, image, preview, layers, head or HEAD_ALL,
                                 (float(qy or 0), float(qx or 0)), parts=parts)
        except ValueError as e:
            raise gr.Error(str(e)) from None
        va, vb = views[0].view, views[1].view
        grid = b.config.grid_size
        said = f"{layer_words(va.layer, a.config.num_layers)} for A, {layer_words(vb.layer, b.config.num_layers)} for B"
        caption = (f"Query patch row {vb.query[0]}, col {vb.query[1]} of B's {grid}×{grid} grid (cyan). "
                   f"{said[0].upper() + said[1:]} (layers from 0); A on the left, B on the right; colours run from 0 "
                   f"to each map's maximum.")
        head = head or HEAD_ALL
        if head == HEAD_MEAN:
            caption += (f"\n\nShown: the **mean of the heads** of each layer (A's {a.config.num_heads}, B's "
                        f"{b.config.num_heads}).")
        elif head != HEAD_ALL:
            index = int(str(head).split()[-1])
            caption += (f"\n\nShown: **head {index}** of each layer. "
                        + " ".join(f"{t}'s attends {v.marks.distance[index]:.2f} of the image's side from the query "
                                   f"and keeps {100 * v.marks.self_share[index]:.1f} % for its own patch."
                                   for t, v in (("A", va), ("B", vb))))
        if head == HEAD_ALL:
            caption += (f"\n\nEach head: **dist**, how far from the query patch it attends (the attention-weighted "
                        f"distance, a fraction of the image's side); **self**, the share of its attention the query "
                        f"keeps for its own patch (even attention: {100 / grid ** 2:.2f} %; LSA masks it to 0). "
                        + " ".join(_marks_words(t, m, v) for t, m, v in (("A", a, va), ("B", b, vb))))
        if "sheet" in parts and (va.sheet is None or vb.sheet is None):
            caption += (f"\n\nEvery layer × head is drawn for models of up to {SHEET_HEADS} heads; here step through "
                        f"the layers with A's and B's layer.")
        pictures = side_by_side_pictures(views, parts)
        # The chosen layer above every layer x head (small models): everything that depends on the query, in one file.
        shown = [pictures[p] for p in ("focus", "sheet") if p in pictures]
        return render.stacked(shown), pictures.get("rollout"), caption

    def choices(self, ref_a: str, ref_b: str, layer, layer_b, head: str, request: gr.Request = None):
        """The layer and head dropdowns for the models now in the slots (the paper's ViT has 9 layers of 12
        heads, the shipped ones 6 of 4): A's layers, B's (at A's relative depth), the heads; A's layer and the
        head kept where they still exist."""
        try:
            a, b = self.app.pair(ref_a, ref_b, request)
        except gr.Error:
            return gr.update(), gr.update(), gr.update()
        count = a.config.num_layers
        heads = [HEAD_ALL, HEAD_MEAN] + [f"head {i}" for i in range(max(a.config.num_heads, b.config.num_heads))]
        try:
            layer = check_layer(a, layer)
        except ValueError:
            layer = count - 1
        return (gr.update(choices=list(range(count)), value=layer),
                gr.update(choices=[SAME_DEPTH, *range(b.config.num_layers)], value=SAME_DEPTH),
                gr.update(choices=heads, value=head if head in heads else HEAD_ALL))

    def attention(self, file, ref_a: str, ref_b: str, layer: float, head: str, qy: float, qx: float,
                  layer_b: str = SAME_DEPTH, request: gr.Request = None):
        """Where each model attends from one query patch: per head, in one layer of each model, model A
        beside model B, and the attention rollout through all layers.

        Args:
            file: the image: an http(s) or data URL (JPEG, PNG, WebP...; up to 25 MB, 40 MP; squared, resized)
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            layer: model A's transformer layer, from 0 to its depth - 1 (9 layers: 0 to 8)
            head: "all heads", "mean of heads", or "head N" (N from 0)
            qy: the query patch: its row as a pixel y on the 32-pixel input (0 to 31)
            qx: the query patch: its column as a pixel x on the 32-pixel input (0 to 31)
            layer_b: model B's layer, from 0; "same depth as A" (the default): the layer at A's relative depth

        Returns:
            the maps from the query (image), the rollout (image), a caption (Markdown), the query cell
        """
        maps, rollout, caption = self._pictures(file, ref_a, ref_b, layer, head, qy, qx, PARTS, layer_b, request)
        return maps, rollout, caption, self._cell(ref_b, qy, qx, request)

    def redraw(self, file, ref_a: str, ref_b: str, layer, head: str, qy, qx, layer_b=SAME_DEPTH,
               request: gr.Request = None):
        """The page's own redraw for a new image or models: as `attention`, with layers out of the new models'
        range clipped (the dropdowns follow a moment later)."""
        maps, rollout, caption = self._pictures(file, ref_a, ref_b, layer, head, qy, qx, PARTS, layer_b, request,
                                                clip=True)
        return maps, rollout, caption, self._cell(ref_b, qy, qx, request)

    def attention_query(self, file, ref_a: str, ref_b: str, layer: float, head: str, qy: float, qx: float,
                        layer_b: str = SAME_DEPTH, request: gr.Request = None):
        """A new query patch (or layer, or head): the maps from the query, caption and query cell; the
        rollout does not depend on them and is not sent again."""
        maps, _, caption = self._pictures(file, ref_a, ref_b, layer, head, qy, qx, ("focus", "sheet"), layer_b,
                                          request)
        return maps, caption, self._cell(ref_b, qy, qx, request)

    def pick_query(self, evt: gr.SelectData, file, ref_a: str, ref_b: str, layer: float, head: str,
                   layer_b: str = SAME_DEPTH, request: gr.Request = None):
        """A click on the picker, in one request: the new query and what depends on it."""
        x, y = evt.index
        size = self.app.model(ref_b, request).config.image_size
        # the pixel clicked, in whole pixels of the model's input (its patch is the same)
        qy, qx = (float(min(int(v * size / QUERY_PICKER), size - 1)) for v in (y, x))
        return (qy, qx, *self.attention_query(file, ref_a, ref_b, layer, head, qy, qx, layer_b, request))

    def locality(self, file, ref_a: str, ref_b: str, scope: str, request: gr.Request = None, progress=gr.Progress()):
        """How local each model's attention is, layer by layer: the mean attention distance (pixels) and
        the attention entropy, for this image or averaged over 64 test images (LSA's locality shows here).

        Args:
            file: the image: an http(s) URL or a data URL (not used for "64 test images")
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            scope: "this image" or "64 test images"

        Returns:
            the distance per layer (image), the entropy per layer (image), the table of both
        """
        a, b = self.app.pair(ref_a, ref_b, request)
        if scope == SCOPES[0]:
            batch = self.app.image(file)[0][None]
        else:
            try:
                batch = self.app.test_images(ref_b, 64, request, progress).x_test[:64]
            except NotApplicable:  # models of classes of their own, none held out: locality needs no labels
                batch = self.app.tests.dataset(self.app.dataset_of(ref_b, request), need=64).x_test[:64]
        result = reports.locality([(f"A: {a.label}", a), (f"B: {b.label}", b)], batch, self.app.cache)
        return (plots.plot_attention_distance(result.distance), plots.plot_entropy(result.entropy),
                pd.DataFrame(result.rows(), columns=list(result.COLUMNS)))


def _shapes(app: AppState, refs) -> list[tuple[int, int]]:
    """(layers, heads) of each slot's model as the page is built ((1, 1) where none loads): the dropdowns' first
    choices, which a change of models replaces (the API takes any layer and head, checked by the handler)."""
    out = []
    for ref in refs:
        try:
            model = app.store.get(ref) if ref else None
        except (CheckpointError, ValueError, OSError):
            model = None
        out.append((model.config.num_layers, model.config.num_heads) if model is not None else (1, 1))
    return out


def build(app: AppState, page: Page) -> AttentionTab:
    tab = AttentionTab(app)
    (layers, heads_a), (layers_b, heads_b) = _shapes(app, page.refs)
    heads = max(heads_a, heads_b)
    first = (page.first, *page.refs, layers - 1, HEAD_ALL, 16.0, 16.0)
    maps0, rollout0, caption0, cell0 = initial(tab.attention, *first, default=(None, None, "", None))
    locality0 = initial(tab.locality, page.first, *page.refs, SCOPES[0], default=(None, None, None))
    note = map_note(app, ("rollout", "last-layer attention"))
    paper = app.paper_pair()
    with gr.Tab("Attention", id="attention") as attention_tab:
        with gr.Row():
            with gr.Column(scale=1, min_width=240):
                # The hint sits above the picture: a floating label would hide its top patches.
                gr.Markdown("**Click a patch** to choose the query", elem_id="picker-hint")
                picker = picture("query patch", captioned=False, show_label=False, buttons=[],
                                 height=QUERY_PICKER + 40, elem_id="picker",
                                 value=initial(tab.query_picker, page.first))
                cell = gr.JSON(cell0, visible=False)
                # Any value reaches the handler, which checks it against the models then in the slots.
                layer = gr.Dropdown(list(range(layers)), value=layers - 1, label="A's layer",
                                    allow_custom_value=True, elem_id="layer-a")
                layer_b = gr.Dropdown([SAME_DEPTH, *range(layers_b)], value=SAME_DEPTH, label="B's layer",
                                      allow_custom_value=True, elem_id="layer-b")
                head = gr.Dropdown([HEAD_ALL, HEAD_MEAN] + [f"head {i}" for i in range(heads)], value=HEAD_ALL,
                                   label="head", allow_custom_value=True)
                with gr.Row():
                    qy = gr.Number(16, label="query y (px of 32)", precision=0, elem_id="query-y")
                    qx = gr.Number(16, label="query x (px of 32)", precision=0, elem_id="query-x")
                attn_btn = gr.Button("Show attention", variant="primary", elem_id="attn-btn")
                self_btn = (gr.Button(SELF_HEAD_LABEL, size="sm", elem_id="self-head-btn") if paper else None)
            with gr.Column(scale=3):
                caption = gr.Markdown(caption0, elem_id="attn-caption")
                rollout = picture("attention rollout: A | B", elem_id="rollout", value=rollout0)
                faithful = gr.Markdown(initial(note, *page.refs, default=""), elem_id="attn-faithfulness")
        maps = picture("from the query: each model's layer, head by head · A | B", elem_id="maps", value=maps0)
        with gr.Accordion("Locality: mean attention distance and entropy", open=True):
            scope = gr.Radio(SCOPES, value=SCOPES[0], label="over")
            loc_btn = gr.Button("Measure locality")
            with gr.Row(elem_id="locality-plots"):  # side by side, or one per row in a narrow window
                dist_plot = picture("mean attention distance", show_label=False, value=drawn(locality0[0]),
                                    min_width=PLOT_MIN)
                ent_plot = picture("attention entropy", show_label=False, value=drawn(locality0[1]),
                                   min_width=PLOT_MIN)
            loc_table = gr.Dataframe(locality0[2], interactive=False, wrap=True, elem_id="locality-table")
        what_if.build(app, page, layer, qy, qx, layer_b)
        # The page's own events read B's layer from a State that follows its dropdown: an API caller of the
        # unlisted endpoints then passes the seven values it always did (a State is no parameter), B at A's
        # depth. Inside the tab: a component among gr.Tabs' children but in no tab shifts the page's tabs (the
        # Trust tab, opened, showed twice, in the Tau tab's place).
        held_b = gr.State(SAME_DEPTH)

    inputs = [page.upload, page.slot_a, page.slot_b, layer, head, qy, qx, layer_b]
    own = [*inputs[:-1], held_b]
    query_outputs = [maps, caption, cell]
    attn = dict(concurrency_limit=4, concurrency_id="attention")
    # A new image or the button draws everything; a query click (one request), a layer or a head change
    # only what depends on them.
    attn_btn.click(in_place(tab.attention, [maps, rollout, caption, cell], caption, "not shown"), inputs,
                   [maps, rollout, caption, cell], api_name="attention", **attn)
    gr.on(page.new_input(), quiet(tab.redraw, (None, None, "", None), why=2), page.held(own),
          [maps, rollout, caption, cell], api_name=False, **attn)
    layer_b.change(lambda value: value, layer_b, held_b, api_name=False, queue=False).then(
        tab.attention_query, own, query_outputs, api_name=False, **attn)
    gr.on([layer.change, head.change], tab.attention_query, own, query_outputs, api_name="attention_layer", **attn,
          **UNLISTED)
    gr.on([qy.submit, qx.submit], tab.attention_query, own, query_outputs, api_name="attention_query", **attn,
          **UNLISTED)
    gr.on(page.new_models(), tab.choices, [*page.loaded, layer, layer_b, head], [layer, layer_b, head],
          api_name=False)
    gr.on(page.new_models(), note, list(page.loaded), [faithful], api_name=False)
    if self_btn is not None:
        # The paper's pair in the slots (their loads redraw the tab), both first layers, every head, the middle patch.
        self_btn.click(lambda: (*paper, 0, SAME_DEPTH, HEAD_ALL, *SELF_HEAD_QUERY), None,
                       [page.slot_a, page.slot_b, layer, layer_b, head, qy, qx], api_name=False, queue=False)
    page.from_tabs.map_notes.append((faithful, note))
    page.upload.change(tab.query_picker, [page.upload], [picker], api_name=False)
    picker.select(tab.pick_query, [*inputs[:5], held_b], [qy, qx, *query_outputs], api_name=False, **attn)
    cell.change(None, [cell], None, js=OUTLINE_JS)
    gr.on([picker.change, attention_tab.select], None, [cell], None, js=OUTLINE_JS)
    page.from_tabs.query_cell, page.from_tabs.outline_js = cell, OUTLINE_JS  # drawn once the page has loaded
    loc_inputs, loc_outputs = [page.upload, page.slot_a, page.slot_b, scope], [dist_plot, ent_plot, loc_table]
    loc_btn.click(as_pictures(tab.locality), loc_inputs, loc_outputs, api_name="locality", concurrency_limit=2)
    gr.on(page.new_input(), quiet(as_pictures(tab.locality), (None, None, None)), page.held(loc_inputs), loc_outputs,
          api_name=False, concurrency_limit=2)
    return tab
