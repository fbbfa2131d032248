"""The Compare tab: both models' top-5 on the image, and where they disagree over the test set."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from explorer.analysis import reports
from explorer.analysis.render import square
from explorer.app.results import top_k
from explorer.app.state import NotApplicable, one_class_set
from explorer.data.inputs import original_size, resize_note
from explorer.ui.context import AppState, Page, in_place, initial, quiet

OTHER_MODELS = "_Another model in a slot: press **Find disagreements** for this pair._"


def verdict(pred_a: str, pred_b: str, truth: tuple[str, int, str] | None, classes_a: list[str],
            classes_b: list[str]) -> str:
    """Whether the two top-1 answers agree (a sign for agreeing, none for being right), and beside them each
    one checked against the true label of a test image (`truth`: TestImages.identify's) by its own classes:
    a model that does not know the label gets no verdict (a pair of different class sets: each side judged by
    its own), and an image of a class neither knows gets none, the line saying why."""
    said = (f"= both say **{pred_a}**" if pred_a == pred_b
            else f"≠ they disagree: **{pred_a}** (A) vs **{pred_b}** (B)")
    if truth is None:
        return said
    source, index, label = truth
    if label not in classes_a and label not in classes_b:
        return (f"{said}\n\nTrue label **{label}** ({source} test image #{index}): not a class of these models, "
                f"so no verdict (Sample draws images of their classes)")
    marks = [("✔" if pred == label else "✘") if label in classes else "– (not one of its classes)"
             for pred, classes in ((pred_a, classes_a), (pred_b, classes_b))]
    return f"{said}\n\nTrue label **{label}** · A {marks[0]} · B {marks[1]}"


class CompareTab:
    def __init__(self, app: AppState):
        self.app = app

    def compare(self, file, ref_a: str, ref_b: str, request: gr.Request = None):
        """Compares two models on one image: each model's five most probable classes with their probabilities,
        and a verdict (whether they agree; the true label when the image is a known test image).

        Args:
            file: the image: an http(s) or data URL (JPEG, PNG, WebP...; up to 25 MB, 40 MP; squared, resized)
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]

        Returns:
            model A's top-5 ({label, confidences}), model B's top-5, the verdict (Markdown)
        """
        image, _ = self.app.image(file)
        a, b = self.app.pair(ref_a, ref_b, request)
        results = []
        for model in (a, b):
            result, seconds, _ = self.app.cache.get(model, image)
            results.append((top_k(model, result), seconds))
        (top_a, t_a), (top_b, t_b) = results
        pred_a, pred_b = next(iter(top_a)), next(iter(top_b))
        lines = [verdict(pred_a, pred_b, self.app.tests.identify(file), a.class_names, b.class_names)]

        resized = resize_note(original_size(file), [a.config.image_size, b.config.image_size])
        if resized:
            lines.append(resized)
        # An image's analysis is one call per model, shared by every tab: whichever asked first ran it.
        lines.append(f"Time: A {1000 * t_a:.0f} ms · B {1000 * t_b:.0f} ms (each model's one call for this "
                     "image: logits and all attention maps, shared by every tab)")
        return top_a, top_b, "\n\n".join(lines)

    def headings(self, ref_a: str | None, ref_b: str | None, request: gr.Request = None) -> tuple[str, str]:
        """Each top-k's heading for the models in the slots: top-5, or top-3 for a model of three classes."""
        return tuple(f"Model {tag} top-{self.app.top_count(ref, request)}" for tag, ref in (("A", ref_a), ("B", ref_b)))

    def answer(self, file, ref_a: str, ref_b: str, request: gr.Request = None):
        """The page's own compare (a new image, other models, a reopened link): each top-k under its heading
        for the models that gave it, in one update, so that a heading never stands over the previous
        models' bars (a fine-tune's 3-class models replacing 10-class ones)."""
        headings = self.headings(ref_a, ref_b, request)
        top_a, top_b, verdict = quiet(self.compare, (None, None, ""), why=2)(file, ref_a, ref_b, request)
        return (gr.update(value=top_a, label=headings[0]), gr.update(value=top_b, label=headings[1]), verdict)

    def disagreements(self, ref_a: str, ref_b: str, count: float, request: gr.Request = None,
                      progress=gr.Progress()):
        """Runs both models over the first N test images of model B's dataset: their accuracies, top-1 per
        class, and the images where they disagree.

        Args:
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            count: how many test images, from the first (1 to 10,000)

        Returns:
            a summary (Markdown), the per-class table, the disagreeing images with (true · A · B) captions
        """
        if int(count or 0) < 1:
            raise gr.Error("choose at least one test image")
        a, b = self.app.pair(ref_a, ref_b, request)
        try:
            one_class_set(a.class_names, b.class_names)
            ds = self.app.test_images(ref_b, int(count), request, progress)
        except NotApplicable as e:
            return str(e), None, None
        try:
            report = reports.disagreements(a, b, ds, int(count))
        except ValueError as e:
            raise gr.Error(str(e)) from None
        table = pd.DataFrame(report.per_class(), columns=list(report.COLUMNS))
        gallery = [(square(ds.x_test[i], 96), caption) for i, caption in report.captions()]
        return report.summary(), table, gallery


def build(app: AppState, page: Page) -> CompareTab:
    tab = CompareTab(app)
    top_a, top_b, verdict_text = initial(tab.compare, page.first, *page.refs, default=(None, None, ""))
    with gr.Tab("Compare", id="compare"):
        # The answer first (an 800 px window shows it on its first screen), then both top-5, then the button
        # that asks again (the page answers by itself for a new image or other models).
        verdict = gr.Markdown(verdict_text, elem_id="verdict")
        # One line while the visitor's fine-tune waits or runs: its models come into the slots when it ends.
        page.from_tabs.compare_running = gr.Markdown("", elem_id="compare-running")
        with gr.Row():
            label_a, label_b = (gr.Label(top, num_top_classes=5, label=f"Model {tag} top-{app.top_count(ref)}",
                                         elem_id=f"label-{tag.lower()}")
                                for tag, top, ref in (("A", top_a, page.refs[0]), ("B", top_b, page.refs[1])))
        compare_btn = gr.Button("Compare", variant="primary", elem_id="compare-btn")
        with gr.Accordion("Find disagreements on the test set", open=False):
            n_test = gr.Slider(50, 10000, value=1000, step=50, label="test images (the first N; 10,000 = all of them)",
                               info=None if app.tests.has_full() else "beyond the bundled 1,000, the full test set is "
                                                                     "downloaded once")
            dis_btn = gr.Button("Find disagreements", elem_id="dis-btn")
            dis_summary = gr.Markdown(elem_id="dis-summary")
            # One above the other: side by side, the table's last column and the captions were cut.
            dis_table = gr.Dataframe(label="per-class top-1", interactive=False, wrap=True, elem_id="dis-table",
                                     headers=list(reports.Disagreements.COLUMNS))
            dis_gallery = gr.Gallery(format="png", label="where they disagree (true · A · B)", columns=6,
                                     height="auto", elem_id="dis-gallery", object_fit="scale-down")

    inputs, outputs = [page.upload, page.slot_a, page.slot_b], [label_a, label_b, verdict]
    compare_btn.click(in_place(tab.compare, outputs, verdict, "not compared"), inputs, outputs, api_name="compare",
                      concurrency_limit=4)
    gr.on(page.new_input(), tab.answer, page.held(inputs), outputs, api_name=False, concurrency_limit=4)
    dis_outputs = [dis_summary, dis_table, dis_gallery]
    dis_btn.click(in_place(tab.disagreements, dis_outputs, dis_summary, "not run"), [page.slot_a, page.slot_b, n_test],
                  dis_outputs, api_name="disagreements")
    gr.on(page.new_models(), lambda: (OTHER_MODELS, None, None), None, [dis_summary, dis_table, dis_gallery],
          api_name=False, queue=False)
    return tab
