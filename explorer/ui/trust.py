"""The Trust tab: which model to trust over a whole labelled set (confusion matrices whose cells show their
images, per-class accuracy with intervals, the images only one model gets right, calibration), under
corruptions, and which map to trust (deletion/insertion, randomisation); with a download of what is shown."""

from __future__ import annotations

import tempfile

import gradio as gr
import numpy as np
import pandas as pd

from explorer.analysis import corruptions, faithfulness, render_trust, trust
from explorer.core.formatting import pct
from explorer.data.datasets import DatasetError
from explorer.ui.context import AppState, Page, in_place

TAB = "Trust"
TEST, ZIP = "the CIFAR test set", "my labelled zip"
SHOWN = 60  # images per gallery
TEXT = (f"Both models over a **whole labelled set**: the CIFAR test set (the first N images; the bundled "
        f"1,000 without a data folder) or a zip of class folders named after the models' classes. Click a "
        f"cell of a confusion table to see its images with both answers. Calibration: {trust.BINS} equal-width "
        f"confidence bins; the temperature is fitted on a stratified half of the set and the before/after "
        f"numbers are measured on the other half. Corruptions: the 15 CIFAR-10-C corruption types at 5 "
        f"severities (`{corruptions.LIBRARY}=={corruptions.LIBRARY_VERSION}`, ImageNet-C's parameters), "
        f"corruption error relative to model A. Faithfulness: deletion/insertion areas (lower/higher is more "
        f"faithful) and the randomisation check. docs/trust.md explains each measure and its caveats.")
TRUE = "true class"
CLASS_COLUMNS = ["class", "A", "A interval", "B", "B interval", "images"]
CAL_COLUMNS = ["model", "top-1", "temperature", "ECE before", "ECE after", "NLL before", "NLL after"]
FAITH_COLUMNS = ["model", "map", "deletion AUC (lower is better)", "insertion AUC (higher is better)",
                 "rank corr. after head re-init", "rank corr. after all re-init"]


def _thumb(image: np.ndarray, size: int = 96) -> np.ndarray:
    k = max(1, size // image.shape[0])
    return np.kron(image, np.ones((k, k, 1), np.uint8))


def _interval(c: trust.ClassAccuracy) -> str:
    low, high = c.interval
    return f"{100 * low:.0f}–{100 * high:.0f} %" if c.total else "–"


class TrustTab:
    def __init__(self, app: AppState):
        self.app = app
        self.service = app.trust

    def _set(self, source: str, zip_file, count, ref_b: str, names: list[str], request, progress):
        if source == ZIP:
            if not zip_file:
                raise gr.Error("choose a zip of class folders first")
            try:
                return trust.labelled_zip(getattr(zip_file, "name", zip_file), names)
            except (DatasetError, ValueError) as e:
                raise gr.Error(str(e)) from None
        ds = self.app.test_images(ref_b, int(count or 1000), request, progress)
        return trust.test_set(ds, int(count or 1000))

    def trust_report(self, ref_a: str, ref_b: str, source: str, zip_file, count: float, request: gr.Request = None,
               progress=gr.Progress()):
        """Both models over a whole labelled set: confusion matrices, per-class accuracy with 95 % Wilson
        intervals, the images only one model gets right, reliability diagrams and temperature scaling.

        Args:
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            source: "the CIFAR test set" or "my labelled zip"
            zip_file: a zip of class folders (only with "my labelled zip")
            count: how many test images, from the first (100 to 10,000; more than 1,000 needs the data folder)

        Returns:
            summary (Markdown), confusion matrices (image), confusion tables A and B, per-class table,
            reliability diagrams (image), calibration table, galleries of the images only A and only B get
            right, the files to download, the report's key
        """
        a, b = self.app.pair(ref_a, ref_b, request)
        if a.class_names != b.class_names:
            raise gr.Error("the two models predict different classes; compare models of one dataset")
        data = self._set(source, zip_file, count, ref_b, b.class_names, request, progress)
        report, cached = self.service.report([a, b], data, lambda f, m: progress(f, desc=m))
        return self._show(report, cached, ((a.identity, b.identity), data.key), _cards(a, b))

    def _show(self, report: trust.TrustReport, cached: bool, key, cards: dict[str, dict]):
        names, (ma, mb) = report.data.class_names, report.models
        titles = [f"{tag}: {m.name} · top-1 {pct(m.accuracy)}" for tag, m in zip("AB", report.models, strict=True)]
        confusion = render_trust.picture(render_trust.confusion_figure([ma.confusion, mb.confusion], names, titles))
        reliability = render_trust.picture(render_trust.reliability_figure(
            [m.calibration.whole for m in report.models], titles, report.bins))
        short = trust.short_names(names)
        tables = [pd.DataFrame(m.confusion, columns=short).assign(**{TRUE: names})[[TRUE, *short]]
                  for m in report.models]
        classes = pd.DataFrame([[ca.name, pct(ca.accuracy), _interval(ca), pct(cb.accuracy), _interval(cb), ca.total]
                                for ca, cb in zip(ma.classes, mb.classes, strict=True)], columns=CLASS_COLUMNS)
        cal = pd.DataFrame([[tag, pct(m.accuracy), f"{m.calibration.temperature:.2f}",
                             pct(m.calibration.before.ece), pct(m.calibration.after.ece),
                             f"{m.calibration.before.nll:.3f}", f"{m.calibration.after.nll:.3f}"]
                            for tag, m in zip("AB", report.models, strict=True)], columns=CAL_COLUMNS)
        galleries = [self._gallery(report, report.only_right(i)) for i in range(2)]
        c = ma.calibration
        summary = (f"**{report.data.name}**, {report.data.count:,} images{' (from the cache)' if cached else ''}: "
                   f"A right on {pct(ma.accuracy)} ({_range(ma.interval)}), B on {pct(mb.accuracy)} "
                   f"({_range(mb.interval)}); only A right on **{len(report.only_right(0))}** images, only B on "
                   f"**{len(report.only_right(1))}**. Temperature fitted on {c.fit_count:,} images, measured on "
                   f"the other {c.held_count:,}.")
        folder = tempfile.mkdtemp(prefix="trust-", dir=self.app.downloads_dir)
        files = render_trust.write_files(folder, report.summary(), {"confusion": confusion,
                                                                    "reliability": reliability},
                                         cards=cards)
        return (summary, confusion, tables[0], tables[1], classes, reliability, cal, galleries[0], galleries[1],
                files, key)

    def _gallery(self, report: trust.TrustReport, positions: np.ndarray) -> list:
        return [(_thumb(report.data.images[p]), report.caption(int(p))) for p in positions[:SHOWN]]

    def cell(self, key, which: int, row: int, column: int):
        """The images of one cell of a confusion matrix, with both models' answers: those of true class `row`
        that model `which` (0: A, 1: B) answers `column`."""
        report = self.service.reports.get(tuple(key) if key else None)
        if report is None:
            raise gr.Error("evaluate the models first (or again: the report is no longer kept)")
        names = report.data.class_names
        column -= 1  # the table's first column names the true class
        if not (0 <= row < len(names) and 0 <= column < len(names)):
            return [], ""
        found = report.cell(which, row, column)
        return (self._gallery(report, found),
                f"**{len(found)}** {names[row]} images that {'AB'[which]} answers **{names[column]}**"
                + (f" (the first {SHOWN} shown)" if len(found) > SHOWN else ""))

    def cell_a(self, key, evt: gr.SelectData):
        return self.cell(key, 0, *evt.index)

    def cell_b(self, key, evt: gr.SelectData):
        return self.cell(key, 1, *evt.index)

    def trust_corruptions(self, ref_a: str, ref_b: str, count: float, request: gr.Request = None,
                          progress=gr.Progress()):
        """Both models on the 15 common corruptions (CIFAR-10-C's types, imagecorruptions 1.1.2) at 5 severities
        of the first N CIFAR test images: accuracy per corruption and severity, the mean, and the corruption
        error relative to model A (Hendrycks & Dietterich's CE, A as the baseline). The shipped pair's table on
        the bundled 1,000 images is shipped; any other pair or count is computed (minutes) and kept.

        Args:
            ref_a: model A (the baseline): a reference listed by the models tool, or a Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hub id owner/name[@revision]
            count: how many test images, from the first (100 to 10,000)

        Returns:
            summary (Markdown), accuracy against severity (image), the table, the files to download
        """
        a, b = self.app.pair(ref_a, ref_b, request)
        ds = self.app.test_images(ref_b, int(count or 1000), request, progress)
        data = trust.test_set(ds, int(count or 1000))
        try:
            table, where = self.service.corruption_table([a, b], data.images, data.labels, data.name,
                                                         lambda f, m: progress(f, desc=m))
        except corruptions.CorruptionError as e:
            raise gr.Error(str(e)) from None
        # A row per corruption and model (A's above B's): eight columns fit an 800 px window, thirteen do not.
        header = ["corruption", "model", *[f"s{s}" for s in table.severities], "mean"]
        step = len(table.severities) + 1
        rows = [[r[0], tag, *[pct(v) for v in r[1 + k * step:1 + (k + 1) * step]]] for r in table.rows()
                for k, tag in enumerate("AB")]
        summary = (f"{table.dataset}, {table.count:,} images ({where}; `{table.library}`, seed {table.seed}): "
                   f"clean A {pct(table.clean[0])}, B {pct(table.clean[1])}; mean over 15 corruptions x 5 "
                   f"severities A **{pct(table.mean_accuracy[0])}**, B **{pct(table.mean_accuracy[1])}**; "
                   f"B's mCE relative to A **{100 * table.mce(1):.1f} %** (A = 100 %), relative mCE "
                   f"{100 * table.relative_mce(1):.1f} %.")
        figure = render_trust.picture(render_trust.corruption_figure(table))
        folder = tempfile.mkdtemp(prefix="corruptions-", dir=self.app.downloads_dir)
        files = render_trust.write_files(folder, None, {"corruptions": figure}, cards=_cards(a, b),
                                         corruption_rows=table.rows(),
                                         corruption_header=["corruption"] + [f"{t} s{s}" for t in "AB" for s in
                                                                             [*table.severities, "mean"]]
                                         + ["A CE", "B CE"])
        return summary, figure, pd.DataFrame(rows, columns=header), files

    def trust_faithfulness(self, ref_a: str, ref_b: str, request: gr.Request = None, progress=gr.Progress()):
        """Which map to trust: deletion and insertion areas of attention rollout, last-layer attention,
        occlusion and a random ranking on the first test images, for both models; and the randomisation check
        (layers re-initialised top down; Spearman correlation of each map with the trained model's).

        Args:
            ref_a: model A: a reference listed by the models tool, or a Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hub id owner/name[@revision]

        Returns:
            summary (Markdown), the curves (image), the table, the files to download
        """
        a, b = self.app.pair(ref_a, ref_b, request)
        ds = self.app.test_images(ref_b, faithfulness.IMAGES, request, progress)
        report, where = self.service.faithfulness([a, b], ds.x_test, ds.name, progress=lambda f, m: progress(
            f, desc=m))
        rows = report.rows()
        shown = [[r[0], r[1], f"{r[2]:.3f}", f"{r[3]:.3f}", "–" if r[4] is None else f"{r[4]:.2f}",
                  "–" if r[5] is None else f"{r[5]:.2f}"] for r in rows]
        summary = (f"{report.dataset}: {report.count} images, {report.step} patches per step ({where}); the "
                   f"randomisation check on the first {report.randomisation_count}.")
        figure = render_trust.picture(render_trust.faithfulness_figure(report, faithfulness.KINDS))
        folder = tempfile.mkdtemp(prefix="faithfulness-", dir=self.app.downloads_dir)
        files = render_trust.write_files(folder, None, {"faithfulness": figure}, faithfulness_rows=rows,
                                         faithfulness_header=FAITH_COLUMNS, cards=_cards(a, b))
        return summary, figure, pd.DataFrame(shown, columns=FAITH_COLUMNS), files


MEASURE_HERE = "the Trust tab's **Which map to trust** measures both slots' models"


def map_note(app: AppState, kinds: tuple[str, ...]):
    """A handler writing how faithful each of `kinds` of map measured for the slots' models (the shipped
    pair's numbers ship with the app; other models' once the Trust tab has measured them)."""
    def note(ref_a: str, ref_b: str, request: gr.Request = None) -> str:
        try:
            models = app.pair(ref_a, ref_b, request)
        except gr.Error:
            return ""
        return faithfulness.note([(tag, m.label, app.trust.measured(m)) for tag, m in zip("AB", models, strict=True)],
                                 kinds, MEASURE_HERE)
    return note


def _cards(a, b) -> dict[str, dict]:
    """Both slots' cards, as their checkpoints hold them (with the label the page shows)."""
    return {tag: {"label": m.label, **m.card.to_json()} for tag, m in zip("AB", (a, b), strict=True)}


def _range(interval) -> str:
    return f"95 % interval {100 * interval[0]:.1f}–{100 * interval[1]:.1f} %"


def build(app: AppState, page: Page) -> TrustTab:
    tab = TrustTab(app)
    with gr.Tab(TAB, id="trust"):
        gr.Markdown(TEXT, elem_id="trust-text")
        with gr.Row():
            source = gr.Radio([TEST, ZIP], value=TEST, label="evaluate on")
            zip_file = gr.File(label="labelled zip (class folders)", file_types=[".zip"])
            count = gr.Slider(100, 10000, value=1000, step=100, label="test images (the first N)")
        run_btn = gr.Button("Evaluate both models", variant="primary", elem_id="trust-btn")
        summary = gr.Markdown(elem_id="trust-summary")
        confusion = gr.Image(label="confusion matrices · A | B", interactive=False, elem_id="trust-confusion",
                             elem_classes="pic")
        # One above the other: ten classes' columns take the tabs' whole width in an 800 px window.
        table_a, table_b = (gr.Dataframe(label=f"{tag}'s answers (columns: the first letters of each class) · "
                                               f"click a cell to see its images", interactive=False,
                                         elem_id=f"trust-c{tag.lower()}", elem_classes="trust-table")
                            for tag in "AB")
        cell_text = gr.Markdown(elem_id="trust-cell-text")
        cell = gr.Gallery(label="the cell's images: true class · A's answer · B's answer", columns=8,
                          elem_id="trust-cell")
        classes = gr.Dataframe(label="per-class accuracy, with 95 % Wilson intervals", interactive=False,
                               headers=CLASS_COLUMNS, wrap=True, elem_id="trust-classes", elem_classes="trust-table")
        reliability = gr.Image(label="reliability diagrams", interactive=False, elem_id="trust-reliability",
                               elem_classes="pic")
        calibration = gr.Dataframe(label="temperature scaling (models A and B as in the slots)", interactive=False,
                                   headers=CAL_COLUMNS, elem_id="trust-calibration", elem_classes="trust-table")
        with gr.Row():
            only_a = gr.Gallery(label="only A right", columns=6, elem_id="trust-only-a")
            only_b = gr.Gallery(label="only B right", columns=6, elem_id="trust-only-b")
        files = gr.File(label="download what is shown (JSON, CSV, PNG)", file_count="multiple")
        key = gr.State(None)
        corr_btn = gr.Button("Corruptions (15 x 5 severities)", elem_id="trust-corruptions-btn")
        corr_text = gr.Markdown(elem_id="trust-corruptions-summary")
        corr_plot = gr.Image(label="accuracy against severity", interactive=False, elem_id="trust-corruptions-plot",
                             elem_classes="pic")
        corr_table = gr.Dataframe(label="top-1 accuracy at severities s1 (mildest) to s5", interactive=False,
                                  max_height=1200, elem_id="trust-corruptions-table",
                                  elem_classes="trust-table")
        corr_files = gr.File(label="download the corruption table", file_count="multiple")
        faith_btn = gr.Button("Which map to trust", elem_id="trust-faithfulness-btn")
        faith_text = gr.Markdown(elem_id="trust-faithfulness-summary")
        faith_plot = gr.Image(label="deletion and insertion curves", interactive=False,
                              elem_id="trust-faithfulness-plot", elem_classes="pic")
        faith_table = gr.Dataframe(interactive=False, headers=FAITH_COLUMNS, wrap=True,
                                   elem_id="trust-faithfulness-table", elem_classes="trust-table")
        faith_files = gr.File(label="download the faithfulness numbers", file_count="multiple")

    report_outputs = [summary, confusion, table_a, table_b, classes, reliability, calibration, only_a, only_b, files,
                      key]
    run_btn.click(in_place(tab.trust_report, report_outputs, summary, "not evaluated"),
                  [page.slot_a, page.slot_b, source, zip_file, count], report_outputs, api_name="trust_report",
                  concurrency_limit=2)
    table_a.select(in_place(tab.cell_a, [cell, cell_text], cell_text, "not shown"), [key], [cell, cell_text],
                   api_name="trust_cell_a")
    table_b.select(in_place(tab.cell_b, [cell, cell_text], cell_text, "not shown"), [key], [cell, cell_text],
                   api_name="trust_cell_b")
    corr_outputs = [corr_text, corr_plot, corr_table, corr_files]
    corr_btn.click(in_place(tab.trust_corruptions, corr_outputs, corr_text, "not measured"),
                   [page.slot_a, page.slot_b, count], corr_outputs, api_name="trust_corruptions", concurrency_limit=1)
    faith_outputs = [faith_text, faith_plot, faith_table, faith_files]
    measured = faith_btn.click(in_place(tab.trust_faithfulness, faith_outputs, faith_text, "not measured"),
                               [page.slot_a, page.slot_b], faith_outputs, api_name="trust_faithfulness",
                               concurrency_limit=1)
    for shown, write in page.from_tabs.map_notes:  # the Attention and Evidence tabs' notes now have numbers
        measured.success(write, [page.slot_a, page.slot_b], [shown], api_name=False)
    return tab
