"""The Attention tab: maps from a query patch (the chosen layer and head, and every layer × head), the
attention rollout, and locality (mean attention distance and entropy per layer); the what-if switches
sit below (explorer.ui.what_if).

A click on the picker sends one picture: the query's outline is drawn by the page itself (OUTLINE_JS,
from the small `cell` value) and both kinds of maps from the query come as one picture.
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from explorer.analysis import plots, render, reports
from explorer.app.workbench import HEAD_ALL, HEAD_MEAN, PARTS, analyze_pair, query_patch, side_by_side_pictures, square
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
    const r = img.getBoundingClientRect(), p = holder.getBoundingClientRect();
    const side = Math.min(r.width, r.height);  // the square picture, fitted (contain) into the img box
    const step = side / c.grid;
    box.style.display = 'block';
    box.style.left = (r.left - p.left + (r.width - side) / 2 + c.col * step) + 'px';
    box.style.top = (r.top - p.top + (r.height - side) / 2 + c.row * step) + 'px';
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

    def _pictures(self, file, ref_a, ref_b, layer, head, qy, qx, parts, request=None):
        image, preview = self.app.image(file)
        a, b = self.app.pair(ref_a, ref_b, request)
        try:
            views = analyze_pair([a, b], self.app.cache, image, preview, int(layer or 0), head or HEAD_ALL,
                                 (float(qy or 0), float(qx or 0)), parts=parts)
        except ValueError as e:
            raise gr.Error(str(e)) from None
        va, vb = views[0]["view"], views[1]["view"]
        caption = (f"Query patch row {vb.query[0]}, col {vb.query[1]} of B's {b.config.grid_size}×"
                   f"{b.config.grid_size} grid (cyan). Layer {va.layer} for A, {vb.layer} for B; A on the left, "
                   f"B on the right; colours run from 0 to each map's maximum. LSA models never attend to the "
                   f"query patch itself.")
        pictures = side_by_side_pictures(views, parts)
        # The chosen layer above every layer x head: everything that depends on the query, in one file.
        return render.stacked([pictures["focus"], pictures["sheet"]]), pictures.get("rollout"), caption

    def choices(self, ref_a: str, ref_b: str, layer, head: str, request: gr.Request = None):
        """The layer and head dropdowns for the models now in the slots (the paper's ViT has 9 layers of 12
        heads, the shipped ones 6 of 4): their choices, and the choice kept where it still exists."""
        try:
            models = self.app.pair(ref_a, ref_b, request)
        except gr.Error:
            return gr.update(), gr.update()
        layers = max(model.config.num_layers for model in models)
        heads = [HEAD_ALL, HEAD_MEAN] + [f"head {i}" for i in range(max(model.config.num_heads for model in models))]
        layer = int(layer) if layer is not None and 0 <= int(layer) < layers else layers - 1
        return (gr.update(choices=list(range(layers)), value=layer),
                gr.update(choices=heads, value=head if head in heads else HEAD_ALL))

    def attention(self, file, ref_a: str, ref_b: str, layer: float, head: str, qy: float, qx: float,
                  request: gr.Request = None):
        """Where each model attends from one query patch: per head, in one layer and in every layer, model A
        beside model B, and the attention rollout through all layers.

        Args:
            file: the image: an http(s) URL or a data URL (any format or size; squared and resized as each model needs)
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            layer: the transformer layer, from 0 (the last layer is shown when it is out of range)
            head: "all heads", "mean of heads", or "head N" (N from 0)
            qy: the query patch: its row as a pixel y on the 32-pixel input (0 to 31)
            qx: the query patch: its column as a pixel x on the 32-pixel input (0 to 31)

        Returns:
            the maps from the query (image), the rollout (image), a caption (Markdown), the query cell
        """
        maps, rollout, caption = self._pictures(file, ref_a, ref_b, layer, head, qy, qx, PARTS, request)
        return maps, rollout, caption, self._cell(ref_b, qy, qx, request)

    def attention_query(self, file, ref_a: str, ref_b: str, layer: float, head: str, qy: float, qx: float,
                        request: gr.Request = None):
        """A new query patch (or layer, or head): the maps from the query, caption and query cell; the
        rollout does not depend on them and is not sent again."""
        maps, _, caption = self._pictures(file, ref_a, ref_b, layer, head, qy, qx, ("focus", "sheet"), request)
        return maps, caption, self._cell(ref_b, qy, qx, request)

    def pick_query(self, evt: gr.SelectData, file, ref_a: str, ref_b: str, layer: float, head: str,
                   request: gr.Request = None):
        """A click on the picker, in one request: the new query and what depends on it."""
        x, y = evt.index
        size = self.app.model(ref_b, request).config.image_size
        qy, qx = float(y) * size / QUERY_PICKER, float(x) * size / QUERY_PICKER
        return (qy, qx, *self.attention_query(file, ref_a, ref_b, layer, head, qy, qx, request))

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
            batch = self.app.test_images(ref_b, 64, request, progress).x_test[:64]
        result = reports.locality([(f"A: {a.label}", a), (f"B: {b.label}", b)], batch, self.app.cache)
        return (plots.plot_attention_distance(result.distance), plots.plot_entropy(result.entropy),
                pd.DataFrame(result.rows(), columns=list(result.COLUMNS)))


def _shape(app: AppState, refs) -> tuple[int, int]:
    """The most layers and heads of the slots' models: the choices the dropdowns offer."""
    layers, heads = 1, 1
    for ref in refs:
        try:
            model = app.store.get(ref) if ref else None
        except (CheckpointError, ValueError, OSError):
            model = None
        if model is not None:
            layers, heads = max(layers, model.config.num_layers), max(heads, model.config.num_heads)
    return layers, heads


def build(app: AppState, page: Page) -> AttentionTab:
    tab = AttentionTab(app)
    layers, heads = _shape(app, page.refs)
    first = (page.first, *page.refs, layers - 1, HEAD_ALL, 16.0, 16.0)
    maps0, rollout0, caption0, cell0 = initial(tab.attention, *first, default=(None, None, "", None))
    locality0 = initial(tab.locality, page.first, *page.refs, SCOPES[0], default=(None, None, None))
    note = map_note(app, ("rollout", "last-layer attention"))
    with gr.Tab("Attention", id="attention") as attention_tab:
        with gr.Row():
            with gr.Column(scale=1, min_width=240):
                # The hint sits above the picture: a floating label would hide its top patches.
                gr.Markdown("**Click a patch** to choose the query", elem_id="picker-hint")
                picker = picture("query patch", captioned=False, show_label=False, buttons=[],
                                 height=QUERY_PICKER + 40, elem_id="picker",
                                 value=initial(tab.query_picker, page.first))
                cell = gr.JSON(cell0, visible=False)
                layer = gr.Dropdown(list(range(layers)), value=layers - 1, label="layer")
                head = gr.Dropdown([HEAD_ALL, HEAD_MEAN] + [f"head {i}" for i in range(heads)], value=HEAD_ALL,
                                   label="head")
                with gr.Row():
                    qy = gr.Number(16, label="query y (px of 32)", precision=1)
                    qx = gr.Number(16, label="query x (px of 32)", precision=1)
                attn_btn = gr.Button("Show attention", variant="primary", elem_id="attn-btn")
            with gr.Column(scale=3):
                caption = gr.Markdown(caption0, elem_id="attn-caption")
                rollout = picture("attention rollout: A | B", elem_id="rollout", value=rollout0)
                faithful = gr.Markdown(initial(note, *page.refs, default=""), elem_id="attn-faithfulness")
        maps = picture("from the query: the chosen layer, then every layer × head · A | B", elem_id="maps",
                       value=maps0)
        with gr.Accordion("Locality: mean attention distance and entropy", open=True):
            scope = gr.Radio(SCOPES, value=SCOPES[0], label="over")
            loc_btn = gr.Button("Measure locality")
            with gr.Row(elem_id="locality-plots"):  # side by side, or one per row in a narrow window
                dist_plot = picture("mean attention distance", show_label=False, value=drawn(locality0[0]),
                                    min_width=PLOT_MIN)
                ent_plot = picture("attention entropy", show_label=False, value=drawn(locality0[1]),
                                   min_width=PLOT_MIN)
            loc_table = gr.Dataframe(locality0[2], interactive=False, wrap=True, elem_id="locality-table")
        what_if.build(app, page, layer, qy, qx)

    inputs = [page.upload, page.slot_a, page.slot_b, layer, head, qy, qx]
    query_outputs = [maps, caption, cell]
    attn = dict(concurrency_limit=4, concurrency_id="attention")
    # A new image or the button draws everything; a query click (one request), a layer or a head change
    # only what depends on them.
    attn_btn.click(in_place(tab.attention, [maps, rollout, caption, cell], caption, "not shown"), inputs,
                   [maps, rollout, caption, cell], api_name="attention", **attn)
    gr.on(page.new_input(), quiet(tab.attention, (None, None, "", None), why=2), page.held(inputs),
          [maps, rollout, caption, cell], api_name=False, **attn)
    gr.on([layer.change, head.change], tab.attention_query, inputs, query_outputs, api_name="attention_layer",
          **attn, **UNLISTED)
    gr.on([qy.submit, qx.submit], tab.attention_query, inputs, query_outputs, api_name="attention_query", **attn,
          **UNLISTED)
    gr.on(page.new_models(), tab.choices, [*page.loaded, layer, head], [layer, head], api_name=False)
    gr.on(page.new_models(), note, list(page.loaded), [faithful], api_name=False)
    page.from_tabs.map_notes.append((faithful, note))
    page.upload.change(tab.query_picker, [page.upload], [picker], api_name=False)
    picker.select(tab.pick_query, inputs[:5], [qy, qx, *query_outputs], api_name=False, **attn)
    cell.change(None, [cell], None, js=OUTLINE_JS)
    gr.on([picker.change, attention_tab.select], None, [cell], None, js=OUTLINE_JS)
    page.from_tabs.query_cell, page.from_tabs.outline_js = cell, OUTLINE_JS  # drawn once the page has loaded
    loc_inputs, loc_outputs = [page.upload, page.slot_a, page.slot_b, scope], [dist_plot, ent_plot, loc_table]
    loc_btn.click(as_pictures(tab.locality), loc_inputs, loc_outputs, api_name="locality", concurrency_limit=2)
    gr.on(page.new_input(), quiet(as_pictures(tab.locality), (None, None, None)), page.held(loc_inputs), loc_outputs,
          api_name=False, concurrency_limit=2)
    return tab
