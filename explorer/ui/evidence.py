"""The Evidence tab: which patches each model's answer rests on (occlusion, A beside B on one colour scale),
and how each model's answers hold up when the image moves by a few pixels or is mirrored (over test
images, and a strip of this image's shifted copies)."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from explorer.analysis import evidence, robustness
from explorer.analysis.render_evidence import plot_shift_robustness
from explorer.app.attention import picture_title
from explorer.app.state import NotApplicable, one_class_set
from explorer.core.formatting import pct
from explorer.ui.context import AppState, Page, in_place, initial, quiet, shares
from explorer.ui.pictures import as_pictures, picture
from explorer.ui.trust import map_note

TOP1, LABEL = "each model's top-1", "the true label"
FILLS = {"the image's mean colour": "mean", "a blur of the image": "blur"}
TEXT = ("**Occlusion** hides one patch (or a window of patches) at a time and measures how far each model's "
        "probability for the class falls: bright patches are the ones its answer rests on, on one colour scale "
        "for A and B; with SPT/LSA's locality bias, the evidence should sit on the object and be more "
        "concentrated. **Shifts** move the test images by 1 to S pixels in each direction (and mirror them): "
        "a model that uses local structure the way a CNN does keeps its answers as the image moves.")
TAB = "Evidence"
STRIP_ROW = 5  # copies per row of the shift strip: at 800 px its labels are shown at their own size
STALE = "_A new image or model: open this tab or press **Show evidence**._"
OTHER_MODELS = "_Another model in a slot: press **Measure shift robustness** for this pair._"
COLUMNS = ["model", "top-1", "top-1 at S px", "unchanged at 1 px", "unchanged at S px", "flipped: top-1",
           "flipped: unchanged"]



class EvidenceTab:
    def __init__(self, app: AppState):
        self.app = app

    def evidence(self, file, ref_a: str, ref_b: str, target: str, fill: str, window: float,
                 request: gr.Request = None):
        """Occlusion evidence: which patches each model's answer rests on. Each patch (or window of patches)
        is hidden in turn and the drop in the class's probability mapped, A beside B on one colour scale.

        Args:
            file: the image: an http(s) or data URL (JPEG, PNG, WebP...; up to 25 MB, 40 MP; squared, resized)
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            target: the class measured: "each model's top-1", "the true label" (test images only) or a class name
            fill: what hides a patch: "the image's mean colour" or "a blur of the image"
            window: the occluder's side in patches (1 to 3)

        Returns:
            the two occlusion maps (image), how concentrated each is (Markdown)
        """
        image, _ = self.app.image(file)
        a, b = self.app.pair(ref_a, ref_b, request)
        if fill not in FILLS:
            raise gr.Error(f"the occluder is one of {list(FILLS)}")
        label = None
        if target == LABEL:
            truth = self.app.tests.true_label(file)
            if truth is None:
                raise gr.Error("the true label is known only for test samples and examples: choose "
                               f"{TOP1!r} or a class")
            if truth not in b.class_names:
                raise gr.Error(f"this image's true label, {truth}, is not a class of these models: choose "
                               f"{TOP1!r} or a class")
            rule, label = "label", b.class_names.index(truth)
        elif target in (None, "", TOP1):
            rule = "top1"
        elif target in b.class_names and a.class_names == b.class_names:
            rule = b.class_names.index(target)
        else:
            raise gr.Error(f"{target!r} is not a class both models predict")
        try:
            pair = evidence.occlusion_pair([a, b], image, rule, label, int(window or 1), FILLS[fill])
        except ValueError as e:
            raise gr.Error(str(e)) from None
        titles = [picture_title(t, model) for t, model in zip("AB", (a, b), strict=True)]
        shown = evidence.occlusion_picture(pair, image, titles)
        lines = [f"**{tag}** · {evidence.occlusion_caption(r)}" for tag, r in zip("AB", pair.results, strict=True)]
        lines.append(f"Both maps run from 0 to the larger drop ({pair.vmax:.3f}); occluder: "
                     f"{int(window or 1)}×{int(window or 1)} patches filled with {fill}; "
                     f"{pair.results[0].windows.size} occluded copies per model, in one call each.")
        return shown, "\n\n".join(lines)

    def upload(self, open_tab: str, file, ref_a: str, ref_b: str, target: str, fill: str, window: float,
               max_shift: float, padding: str, request: gr.Request = None):
        """A new image or model: analysed at once when this tab is open, otherwise left until the tab is
        opened."""
        if open_tab != TAB or file is None:
            return None, STALE, None
        shown, text = self.evidence(file, ref_a, ref_b, target, fill, window, request)
        return shown, text, self.shift_strip(file, ref_a, ref_b, max_shift, padding, request)

    def shift_strip(self, file, ref_a: str, ref_b: str, max_shift: float, padding: str, request: gr.Request = None):
        """The image moved by -S..S pixels (and mirrored), with model A's and model B's answer under each
        copy: whether a small shift changes their minds.

        Args:
            file: the image: an http(s) or data URL (JPEG, PNG, WebP...; up to 25 MB, 40 MP; squared, resized)
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            max_shift: the largest shift S in pixels (1 to 8)
            padding: what fills where the image moved away: "zero" or "edge"

        Returns:
            the strip of shifted copies with both answers (image)
        """
        image, _ = self.app.image(file)
        a, b = self.app.pair(ref_a, ref_b, request)
        try:
            strip = robustness.shift_strip([a, b], image, int(max_shift or 0), padding)
        except ValueError as e:
            raise gr.Error(str(e)) from None
        return robustness.strip_picture(strip, per_row=STRIP_ROW)

    def robustness(self, ref_a: str, ref_b: str, count: float, max_shift: float, padding: str,
                   request: gr.Request = None, progress=gr.Progress()):
        """Shift robustness over the test set: both models on the first N test images moved by 0..S pixels
        (and mirrored): accuracy and the share of answers unchanged, against the shift.

        Args:
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            count: how many test images, from the first (50 to 1,000)
            max_shift: the largest shift S in pixels (1 to 8)
            padding: what fills where the image moved away: "zero" or "edge"

        Returns:
            the curves (image), the table, a summary (Markdown)
        """
        a, b = self.app.pair(ref_a, ref_b, request)
        count, max_shift = int(count or 0), int(max_shift or 0)
        if count < 1 or max_shift < 1:
            raise gr.Error("choose at least one test image and a shift of at least 1 pixel")
        try:
            one_class_set(a.class_names, b.class_names)
            ds = self.app.test_images(ref_b, count, request, progress)
        except NotApplicable as e:
            return None, None, str(e)
        count = min(count, len(ds.x_test))
        try:
            results = self.app.shift_curves.get([a, b], ds.name, ds.x_test[:count], ds.y_test[:count], max_shift,
                                                padding)
        except ValueError as e:
            raise gr.Error(str(e)) from None
        names = [f"{tag}: {model.label}" for tag, model in zip("AB", (a, b), strict=True)]
        rows = [[name, pct(r.accuracy[0] if r.accuracy is not None else None),
                 pct(r.accuracy[-1] if r.accuracy is not None else None), pct(r.unchanged[1]),
                 pct(r.unchanged[-1]), pct(r.flip_accuracy), pct(r.flip_unchanged)]
                for name, r in zip(names, results, strict=True)]
        ra, rb = results
        summary = (f"On the first **{count}** {ds.name} test images, moved by 1 to {max_shift} px ({padding} "
                   f"padding, the mean of left, right, up and down): at {max_shift} px A keeps **"
                   f"{pct(ra.unchanged[-1])}** of its answers and B **{pct(rb.unchanged[-1])}**; mirrored, A "
                   f"keeps {pct(ra.flip_unchanged)} and B {pct(rb.flip_unchanged)}. The bands span the four "
                   f"directions; the stars are the mirrored images.")
        figure = plot_shift_robustness(dict(zip(names, results, strict=True)))
        return figure, pd.DataFrame(rows, columns=COLUMNS), summary


def build(app: AppState, page: Page) -> EvidenceTab:
    tab = EvidenceTab(app)
    classes = []
    if page.refs[1]:
        try:
            classes = app.store.get(page.refs[1]).class_names
        except Exception:  # noqa: BLE001  (the slot's card says why)
            classes = []
    fill0 = next(iter(FILLS))
    occ0, occ_text0 = initial(tab.evidence, page.first, *page.refs, TOP1, fill0, 1, default=(None, ""))
    strip0 = initial(tab.shift_strip, page.first, *page.refs, 4, "zero")
    note = map_note(app, ("occlusion",))
    with gr.Tab(TAB, id="evidence") as evidence_tab:
        gr.Markdown(TEXT, elem_id="evidence-text")
        with gr.Row():
            target = gr.Dropdown([TOP1, LABEL] + classes, value=TOP1, label="class whose probability is measured")
            fill = gr.Radio(list(FILLS), value=fill0, label="occluded patches are filled with")
            window = gr.Slider(1, 3, value=1, step=1, label="occluder (patches per side)")
        occ_btn = gr.Button("Show evidence", variant="primary", elem_id="evidence-btn")
        occ_text = gr.Markdown(occ_text0, elem_id="evidence-summary")
        occ_map = picture("occlusion: the drop in probability per patch · A | B", elem_id="occlusion", value=occ0)
        faithful = gr.Markdown(initial(note, *page.refs, default=""), elem_id="evidence-faithfulness")
        with gr.Row():
            count = gr.Slider(50, 1000, value=200, step=50, label="test images (the first N)")
            max_shift = gr.Slider(1, 8, value=4, step=1, label="largest shift S (pixels)")
            padding = gr.Radio(list(robustness.PADDINGS), value="zero", label="padding where the image moved away")
        rob_btn = gr.Button("Measure shift robustness", elem_id="robustness-btn")
        rob_text = gr.Markdown(elem_id="robustness-summary")
        rob_plot = picture("accuracy and unchanged answers against the shift", show_label=False,
                           elem_id="robustness-plot", elem_classes="until-filled")
        # Shown once measured (page.css hides the picture until then; a table draws no rows while hidden)
        rob_table = gr.Dataframe(interactive=False, wrap=True, elem_id="robustness-table", headers=COLUMNS,
                                 visible=False,
                                 column_widths=shares(len(COLUMNS), 16))
        strip = picture("this image moved by -S..S pixels, and mirrored: each model's answer",
                        elem_id="shift-strip", value=strip0)

    occ_inputs = [page.upload, page.slot_a, page.slot_b, target, fill, window]
    occ_btn.click(in_place(tab.evidence, [occ_map, occ_text], occ_text, "not shown"), occ_inputs, [occ_map, occ_text],
                  api_name="evidence", concurrency_limit=4)
    strip_inputs = [page.upload, page.slot_a, page.slot_b, max_shift, padding]
    # A new image (or model) is analysed here only while the tab is open, or when it is opened: an upload
    # made on another tab costs no occlusion pass.
    gr.on(page.new_input(), quiet(tab.upload, (None, "", None), why=1),
          page.held([page.tab] + occ_inputs + [max_shift, padding]),
          [occ_map, occ_text, strip],
          api_name=False, concurrency_limit=4)
    # Opening the tab draws what the image column has; an image it cannot use clears the tab quietly.
    evidence_tab.select(quiet(tab.evidence, (None, ""), why=1), occ_inputs, [occ_map, occ_text], api_name=False,
                        concurrency_limit=4)
    evidence_tab.select(quiet(tab.shift_strip, None), strip_inputs, [strip], api_name=False, concurrency_limit=4)
    gr.on([max_shift.release, padding.change], tab.shift_strip, strip_inputs, [strip], api_name="shift_strip",
          concurrency_limit=4)
    rob_outputs = [rob_plot, rob_table, rob_text]
    rob_btn.click(in_place(as_pictures(tab.robustness), rob_outputs, rob_text, "not measured"),
                  [page.slot_a, page.slot_b, count, max_shift, padding], rob_outputs, api_name="robustness",
                  concurrency_limit=2).success(lambda: gr.update(visible=True), None, [rob_table], api_name=False,
                                               queue=False)
    gr.on(page.new_models(), lambda: (None, gr.update(value=None, visible=False), OTHER_MODELS), None,
          [rob_plot, rob_table, rob_text], api_name=False, queue=False)
    gr.on(page.new_models(), note, list(page.loaded), [faithful], api_name=False)
    page.from_tabs.map_notes.append((faithful, note))
    return tab
