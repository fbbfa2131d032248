"""The Trust tab: which model to trust over a whole labelled set (confusion matrices whose cells show their
images, per-class accuracy with intervals, the images only one model gets right, calibration), under
corruptions, and which map to trust (deletion/insertion, randomisation); with a download of what is shown."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import gradio as gr
import numpy as np
import pandas as pd

from explorer.analysis import corruptions, faithfulness, render_trust, trust
from explorer.app.state import LABELLED_ZIP, NotApplicable, one_class_set
from explorer.core.formatting import pct
from explorer.data.datasets import DatasetError
from explorer.ui import trust_text
from explorer.ui.context import IN_PLACE, AppState, Page, expected, in_place, initial, repo_link

TAB = "Trust"
TEST, ZIP = "the CIFAR test set", LABELLED_ZIP
SHOWN = 60  # images per gallery
TEXT = (f"Both models over a **whole labelled set**: the CIFAR test set (the first N images; the bundled "
        f"1,000 without a data folder; for models fine-tuned on classes of their own, the images their fine-tune "
        f"held out) or a zip of class folders named after the models' classes. Click a "
        f"cell of a confusion table to see its images with both answers. Calibration: {trust.BINS} equal-width "
        f"confidence bins; the temperature is fitted on a stratified half of the set and the before/after "
        f"numbers are measured on the other half. Corruptions: the 15 CIFAR-10-C corruption types at 5 "
        f"severities (`{corruptions.LIBRARY}=={corruptions.LIBRARY_VERSION}`, ImageNet-C's parameters), "
        f"corruption error relative to model A. Faithfulness: deletion/insertion areas (lower/higher is more "
        f"faithful) and the randomisation check (ρ: each map's rank correlation with the trained model's once "
        f"its head, or every layer, is re-initialised). {{trust_md}} explains each measure and its caveats.")
# What the page calls TEST: for models of classes of their own, it is the images their fine-tune held out.
TEST_SHOWN = "the test set (a fine-tune of its own classes: its held-out images)"
TRUE = "true class"
CLASS_COLUMNS = ["class", "A", "A interval", "B", "B interval", "images"]
CAL_COLUMNS = ["model", "top-1", "temperature", "ECE before", "ECE after", "NLL before", "NLL after"]
# The page's headers for the same columns: short words that wrap between words in an 800 px window (ρ: the rank
# correlation, as the tab's text says).
FAITH_SHOWN = ["model", "map", "deletion ↓", "insertion ↑", "ρ head reset", "ρ all reset"]


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
            return self._zip(zip_file, names)
        ds = self.app.test_images(ref_b, int(count or 1000), request, progress)
        return trust.test_set(ds, int(count or 1000))

    def _zip(self, zip_file, names: list[str]) -> trust.LabelledSet:
        """The zip's images labelled in the models' classes `names`, or a gr.Error that names those classes."""
        if not zip_file:
            raise gr.Error(f"choose a zip of class folders first, a folder per class ({', '.join(names)})")
        try:
            data = trust.read_labelled_zip(getattr(zip_file, "name", zip_file), names)
            missing = trust.classes_without_images(data)
            if missing:  # a confusion table, per-class accuracy and calibration need every class's images
                raise ValueError(f"{data.name} has no images of {', '.join(missing)}: a zip for Trust holds a "
                                 f"folder of images for each of the models' {len(names)} classes "
                                 f"({', '.join(names)})")
            return data
        except (DatasetError, ValueError) as e:
            reason = str(e)
            if ", ".join(names) not in reason:
                reason += f"; the models' classes are {', '.join(names)}"
            raise gr.Error(reason) from None

    def zip_note(self, source: str, zip_file, ref_a: str, ref_b: str, request: gr.Request = None) -> str:
        """The line under the zip: what the chosen zip holds for the models in the slots, or why it cannot judge
        them (a gr.Error naming their classes: a zip of other, more or fewer classes, an empty or a broken one);
        empty for the test set."""
        if source != ZIP or not zip_file:
            return ""
        _, b = self.app.pair(ref_a, ref_b, request)
        data = self._zip(zip_file, b.class_names)
        return (f"**{data.name}**: {data.count:,} images of the models' {len(b.class_names)} classes: **Evaluate "
                f"both models** judges them on it")

    def zip_gate(self, source: str, zip_file, ref_a: str, ref_b: str, request: gr.Request = None):
        """Before a report on a zip: the note under it, and a refusal there (the report shown stays) when the
        zip cannot judge the models in the slots; the report is asked for only after it."""
        try:
            if source == ZIP and not zip_file:
                self._zip(None, self.app.pair(ref_a, ref_b, request)[1].class_names)
            yield self.zip_note(source, zip_file, ref_a, ref_b, request)
        except gr.Error as e:
            yield f"**⚠ not evaluated:** {e.message}. The report shown is still the one before."
            raise expected(e.message, "trust zip refused", toast=False) from None

    def trust_report(self, ref_a: str, ref_b: str, source: str, zip_file, count: float, request: gr.Request = None,
               progress=gr.Progress()):
        """Both models over a whole labelled set: confusion matrices, per-class accuracy with 95 % Wilson
        intervals, the images only one model gets right, reliability diagrams and temperature scaling.

        Args:
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            source: "the CIFAR test set" (for models of classes of their own: the images their fine-tune held
                out) or "my labelled zip"
            zip_file: a zip of class folders (only with "my labelled zip")
            count: how many test images, from the first (100 to 10,000; more than 1,000 needs the data folder)

        Returns:
            summary (Markdown), confusion matrices (image), confusion tables A and B, per-class table,
            reliability diagrams (image), calibration table, galleries of the images only A and only B get
            right, the files to download, the report's key
        """
        a, b = self.app.pair(ref_a, ref_b, request)
        try:
            one_class_set(a.class_names, b.class_names)
            data = self._set(source, zip_file, count, ref_b, b.class_names, request, progress)
        except NotApplicable as e:  # nothing to judge these models by: said in place, as an answer
            return (f"_{e}_", *[None] * (REPORT_OUTPUTS - 1))
        report, cached = self.service.report([a, b], data, trust_text.timed(progress, 2 * len(data.labels),
                                                                            "images"))
        return self._show(report, cached, ((a.identity, b.identity), data.key), _cards(a, b))

    def _show(self, report: trust.TrustReport, cached: bool, key, cards: dict[str, dict]):
        names, (ma, mb) = report.data.class_names, report.models
        titles = [f"{tag}: {m.name} · top-1 {pct(m.accuracy)}" for tag, m in zip("AB", report.models, strict=True)]
        confusion = render_trust.picture(render_trust.confusion_figure([ma.confusion, mb.confusion], names, titles))
        reliability = render_trust.picture(render_trust.reliability_figure(
            [m.calibration.whole for m in report.models], titles, report.bins))
        short = trust.short_names(names)  # upright in the page (page.css): never broken
        rows = [_breakable(c) for c in names]
        tables = [pd.DataFrame(m.confusion, columns=short).assign(**{TRUE: rows})[[TRUE, *short]]
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
        files = self.service.report_files(report, {"confusion": confusion, "reliability": reliability}, cards)
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
        try:
            one_class_set(a.class_names, b.class_names)
            ds = self.app.test_images(ref_b, int(count or 1000), request, progress)
        except NotApplicable as e:
            return f"_{e}_", None, None, None
        data = trust.test_set(ds, int(count or 1000))
        settings = len(corruptions.CORRUPTIONS) * len(corruptions.SEVERITIES)
        try:
            table, where = self.service.corruption_table([a, b], data.images, data.labels, data.name,
                                                         trust_text.timed(progress, settings, "settings"))
        except corruptions.CorruptionError as e:
            raise gr.Error(str(e)) from None
        return self._corruptions(table, where, a, b)

    def _corruptions(self, table: corruptions.CorruptionTable, where: str, a, b):
        # A row per corruption and model (A's above B's): eight columns fit an 800 px window, thirteen do not.
        header = ["corruption", "model", *[f"s{s}" for s in table.severities], "mean"]
        step = len(table.severities) + 1
        rows = [[r[0], tag, *[pct(v) for v in r[1 + k * step:1 + (k + 1) * step]]] for r in table.rows()
                for k, tag in enumerate("AB")]
        summary = (f"**Corruptions**: {table.dataset}, {table.count:,} images ({where}; `{table.library}`, seed "
                   f"{table.seed}): clean A {pct(table.clean[0])}, B {pct(table.clean[1])}; mean over 15 "
                   f"corruptions x 5 severities A **{pct(table.mean_accuracy[0])}**, B "
                   f"**{pct(table.mean_accuracy[1])}**; B's mCE relative to A **{100 * table.mce(1):.1f} %** "
                   f"(A = 100 %), relative mCE {100 * table.relative_mce(1):.1f} %.")
        figure = render_trust.picture(render_trust.corruption_figure(table))
        files = self.service.corruption_files(table, figure, _cards(a, b))
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
        try:
            ds = self.app.test_images(ref_b, faithfulness.IMAGES, request, progress)
        except NotApplicable as e:
            return f"_{e}_", None, None, None
        steps = 2 * (len(faithfulness.KINDS) + 1)  # each model's curves per kind of map, then its randomisation
        report, where = self.service.faithfulness([a, b], ds.x_test, ds.name,
                                                  progress=trust_text.timed(progress, steps, "steps"))
        return self._faithfulness(report, where, a, b)

    def _faithfulness(self, report: faithfulness.FaithfulnessReport, where: str, a, b):
        rows = report.rows()
        shown = [[r[0], r[1], f"{r[2]:.3f}", f"{r[3]:.3f}", "–" if r[4] is None else f"{r[4]:.2f}",
                  "–" if r[5] is None else f"{r[5]:.2f}"] for r in rows]
        over = report.dataset if str(report.count) in report.dataset else f"{report.dataset}, {report.count} images"
        summary = (f"**Which map to trust**: {over}, {report.step} patches per step ({where}); the "
                   f"randomisation check on the first {report.randomisation_count}.")
        figure = render_trust.picture(render_trust.faithfulness_figure(report, faithfulness.KINDS))
        files = self.service.faithfulness_files(report, figure, _cards(a, b))
        return summary, figure, pd.DataFrame(shown, columns=FAITH_SHOWN), files

    def arrive(self, ref_a: str, ref_b: str, count: float = 1000, request: gr.Request = None) -> Arrival:
        """What the tab shows for a pair before any button: the verdict and the corruption and faithfulness
        results shipped for it (read at once), or for each measure what its button computes and costs."""
        a, b = self.app.pair(ref_a, ref_b, request)
        pair = [a, b]
        table, report = self.service.shipped(pair)
        corr_count = table.count if table is not None else self.service.corruption_count(pair)
        return Arrival(
            verdict=trust_text.verdict(table, report),
            faith=self._faithfulness(report, "shipped", a, b) if report is not None else None,
            faith_text=trust_text.faithfulness_words(self.service.faithfulness_cost(pair)),
            corr=self._corruptions(table, "shipped", a, b) if table is not None else None,
            corr_text=trust_text.corruption_words(self.service.corruption_cost(pair, corr_count), corr_count),
            corr_count=corr_count,
            report_text=trust_text.report_words(self.service.report_cost(pair, int(count or 1000)),
                                                int(count or 1000)))

    def arrived(self, ref_a: str, ref_b: str, count: float, request: gr.Request = None) -> tuple:
        """arrive() as the page's outputs (ARRIVAL_OUTPUTS' order), for another pair in the slots; the
        previous pair's whole-set report is put away."""
        try:
            shown = self.arrive(ref_a, ref_b, count, request)
        except gr.Error:
            return tuple(gr.skip() for _ in range(ARRIVAL_OUTPUTS))
        return shown.updates()

    def opened(self, tab_label: str, ref_a: str, ref_b: str, key, count: float, request: gr.Request = None,
               progress=gr.Progress()):
        """The whole-set report on the CIFAR test set, once the Trust tab is open with a pair it has not shown
        (the tab is opened, or other models are loaded while it is open); nothing otherwise."""
        skip = tuple(gr.skip() for _ in range(REPORT_OUTPUTS))
        if tab_label != TAB:
            return skip
        a, b = self.app.pair(ref_a, ref_b, request)
        if key and tuple(key[0]) == (a.identity, b.identity):
            return skip
        return self.trust_report(ref_a, ref_b, TEST, None, count, request, progress)


def quiet_note(note):
    """`note` for a zip just chosen: its refusal as the line itself, never as an error."""
    @functools.wraps(note)
    def shown(*args, **kwargs):
        try:
            return note(*args, **kwargs)
        except gr.Error as e:
            return f"**⚠ this zip cannot judge these models:** {e.message}"
    return shown


REPORT_OUTPUTS = 11  # trust_report's
ARRIVAL_OUTPUTS = 17  # Arrival.updates()'s


@dataclass
class Arrival:
    """What the tab shows for a pair before any button (TrustTab.arrive); `faith` and `corr` are their
    handlers' outputs (summary, figure, table, files) when shipped, else None and the words say the cost."""

    verdict: str
    faith: tuple | None
    faith_text: str
    corr: tuple | None
    corr_text: str
    corr_count: int
    report_text: str

    def updates(self) -> tuple:
        """The page's outputs: verdict; faithfulness summary, figure, table, files and its two boxes'
        visibility; the same for corruptions with the image count; the report's summary, box and key."""
        faith = self.faith or (self.faith_text, None, None, None)
        corr = self.corr or (self.corr_text, None, None, None)
        return (self.verdict, *faith, gr.Column(visible=self.faith is not None),
                gr.Column(visible=self.faith is not None), *corr, gr.Column(visible=self.corr is not None),
                gr.Column(visible=self.corr is not None), gr.Slider(value=self.corr_count, visible=self.corr is None),
                self.report_text,
                gr.Column(visible=False), None)


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


def _breakable(name: str) -> str:
    """A class name that breaks after an underscore or hyphen ("large_" over "omnivores_") before inside a word:
    a confusion table's first column, in an 800 px window."""
    return name.replace("_", "_\u200b").replace("-", "-\u200b")


def _range(interval) -> str:
    return f"95 % interval {100 * interval[0]:.1f}–{100 * interval[1]:.1f} %"


# A clicked confusion cell's images are below both tables: brought into the window once they are shown.
SCROLL_TO_CELL = ("() => { const e = document.querySelector('#trust-cell-text'); "
                  "if (e) e.scrollIntoView({block: 'start'}); }")


def build(app: AppState, page: Page) -> TrustTab:
    tab = TrustTab(app)
    first = initial(tab.arrive, *page.refs, default=None)
    shipped_faith, shipped_corr = (first.faith, first.corr) if first else (None, None)
    faith0 = shipped_faith or ((first.faith_text if first else ""), None, None, None)
    corr0 = shipped_corr or ((first.corr_text if first else ""), None, None, None)
    with gr.Tab(TAB, id="trust") as trust_tab:
        # Inside the tab: a component made among gr.Tabs' children but in no tab is taken for one by the page
        # (its value, "Trust", became the next tab's label).
        opened_tab = gr.State(TAB)
        with gr.Accordion("What the Trust tab measures (docs/trust.md)", open=False):
            gr.Markdown(TEXT.format(trust_md=repo_link("docs/trust.md", app.settings.space_id)),
                        elem_id="trust-text")
        # The verdict first, then the results shipped for the pair (read at once), then what is computed and
        # its confusion matrices; the shipped results' pictures last.
        verdict = gr.Markdown(first.verdict if first else "", elem_id="trust-verdict")
        with gr.Row(equal_height=True):
            faith_text = gr.Markdown(faith0[0], elem_id="trust-faithfulness-summary")
            faith_btn = gr.Button("Which map to trust", elem_id="trust-faithfulness-btn", scale=0, min_width=200)
        with gr.Column(visible=shipped_faith is not None) as faith_box:
            # Each column as wide as its header's longest word and its cells need at 800 px ("deletion ↓" broke in a
            # word), every row on one line.
            faith_table = gr.Dataframe(faith0[2], interactive=False, headers=FAITH_SHOWN, wrap=True,
                                       column_widths=["21%", "27%", "15%", "16%", "10.5%", "10.5%"],
                                       elem_id="trust-faithfulness-table", elem_classes="trust-table")
        with gr.Row(equal_height=True):
            corr_text = gr.Markdown(corr0[0], elem_id="trust-corruptions-summary")
            corr_count = gr.Slider(100, 10000, value=first.corr_count if first else 1000, step=100,
                                   label="corrupted test images (the first N)", elem_id="trust-corruptions-count",
                                   visible=shipped_corr is None,
                                   scale=0, min_width=220)
            corr_btn = gr.Button("Corruptions (15 x 5 severities)", elem_id="trust-corruptions-btn", scale=0,
                                 min_width=200)
        with gr.Column(visible=shipped_corr is not None) as corr_box:
            # 30 rows scroll in a box of about eight: the evaluation's confusion matrices follow, not 1,200 px later.
            corr_table = gr.Dataframe(corr0[2], label="top-1 accuracy at severities s1 (mildest) to s5",
                                      interactive=False, max_height=330, elem_id="trust-corruptions-table",
                                      elem_classes="trust-table")
        with gr.Row():
            source = gr.Radio([(TEST_SHOWN, TEST), (ZIP, ZIP)], value=TEST, label="evaluate on")
            zip_file = gr.File(label="labelled zip (class folders)", file_types=[".zip"], elem_id="trust-zip")
            count = gr.Slider(100, 10000, value=1000, step=100, label="test images (the first N)")
        # What the chosen zip holds for these models, or why it cannot judge them (the report shown stays).
        zip_note = gr.Markdown("", elem_id="trust-zip-note", elem_classes=IN_PLACE)
        with gr.Row(equal_height=True):
            summary = gr.Markdown(first.report_text if first else "", elem_id="trust-summary")
            run_btn = gr.Button("Evaluate both models", variant="primary", elem_id="trust-btn", scale=0,
                                min_width=200)
        with gr.Column(visible=False) as report_box:
            confusion = gr.Image(label="confusion matrices · A | B", interactive=False, elem_id="trust-confusion",
                                 elem_classes="pic")
            # One above the other: ten classes' columns take the tabs' whole width in an 800 px window.
            table_a, table_b = (gr.Dataframe(label=f"{tag}'s answers (columns: the first letters of each class) · "
                                                   f"click a cell to see its images", interactive=False, wrap=True,
                                             elem_id=f"trust-c{tag.lower()}", elem_classes="trust-table")
                                for tag in "AB")
            with gr.Column(visible=False) as cell_box:
                cell_text = gr.Markdown(elem_id="trust-cell-text")
                cell = gr.Gallery(label="the cell's images: true class · A's answer · B's answer", columns=8,
                                  elem_id="trust-cell")
            classes = gr.Dataframe(label="per-class accuracy, with 95 % Wilson intervals", interactive=False,
                                   headers=CLASS_COLUMNS, wrap=True, elem_id="trust-classes",
                                   elem_classes="trust-table")
            reliability = gr.Image(label="reliability diagrams", interactive=False, elem_id="trust-reliability",
                                   elem_classes="pic")
            calibration = gr.Dataframe(label="temperature scaling (models A and B as in the slots)",
                                       interactive=False, headers=CAL_COLUMNS, elem_id="trust-calibration",
                                       elem_classes="trust-table")
            with gr.Row():
                only_a = gr.Gallery(label="only A right", columns=6, elem_id="trust-only-a")
                only_b = gr.Gallery(label="only B right", columns=6, elem_id="trust-only-b")
            files = gr.File(label="download what is shown (JSON, CSV, PNG)", file_count="multiple")
        # The pictures of the two measures above, below what is evaluated here.
        with gr.Column(visible=shipped_faith is not None) as faith_pics:
            faith_plot = gr.Image(faith0[1], label="deletion and insertion curves", interactive=False,
                                  elem_id="trust-faithfulness-plot", elem_classes="pic")
            faith_files = gr.File(faith0[3], label="download the faithfulness numbers", file_count="multiple")
        with gr.Column(visible=shipped_corr is not None) as corr_pics:
            corr_plot = gr.Image(corr0[1], label="accuracy against severity", interactive=False,
                                 elem_id="trust-corruptions-plot", elem_classes="pic")
            corr_files = gr.File(corr0[3], label="download the corruption table", file_count="multiple")

        key = gr.State(None)

    def show(*boxes):
        """Shows `boxes` once their event has an answer to show in them (its first input: what it drew)."""
        def shown(drawn=True):
            update = gr.Column(visible=drawn is not None)
            return tuple(update for _ in boxes) if len(boxes) > 1 else update
        return shown

    report_outputs = [summary, confusion, table_a, table_b, classes, reliability, calibration, only_a, only_b, files,
                      key]
    zip_inputs = [source, zip_file, page.slot_a, page.slot_b]
    gr.on([zip_file.change, source.change], quiet_note(tab.zip_note), zip_inputs, [zip_note], api_name=False,
          concurrency_limit=2, concurrency_id="trust_zip")
    run_btn.click(tab.zip_gate, zip_inputs, [zip_note], api_name=False, concurrency_limit=2,
                  concurrency_id="trust_zip").success(
        in_place(tab.trust_report, report_outputs, summary, "not evaluated"),
        [page.slot_a, page.slot_b, source, zip_file, count], report_outputs, api_name="trust_report",
        concurrency_limit=2).success(show(report_box), [key], [report_box], api_name=False, queue=False)
    # The whole-set report computes itself when the tab opens (or the slots change while it is open).
    opened = in_place(tab.opened, report_outputs, summary, "not evaluated")

    def show_if_open(tab_label, drawn):
        return gr.Column(visible=drawn is not None) if tab_label == TAB else gr.skip()

    def open_report(event, tab_label):
        return event.then(opened, [tab_label, *page.loaded, key, count], report_outputs, api_name=False,
                          concurrency_limit=2, concurrency_id="trust_report").success(
            show_if_open, [tab_label, key], [report_box], api_name=False, queue=False)
    # Another pair: its shipped results (or what each button would cost), the previous report put away.
    arrival_outputs = [verdict, faith_text, faith_plot, faith_table, faith_files, faith_box, faith_pics,
                       corr_text, corr_plot, corr_table, corr_files, corr_box, corr_pics, corr_count, summary,
                       report_box, key]
    open_report(trust_tab.select(lambda: None, None, None, api_name=False, queue=False), opened_tab)
    open_report(gr.on(page.new_models(), tab.arrived, [*page.loaded, count], arrival_outputs, api_name=False),
                page.tab)
    for table, handler, name in ((table_a, tab.cell_a, "trust_cell_a"), (table_b, tab.cell_b, "trust_cell_b")):
        table.select(in_place(handler, [cell, cell_text], cell_text, "not shown"), [key], [cell, cell_text],
                     api_name=name).success(show(cell_box), None, [cell_box], api_name=False, queue=False).then(
            None, None, None, js=SCROLL_TO_CELL)
    corr_outputs = [corr_text, corr_plot, corr_table, corr_files]
    corr_btn.click(in_place(tab.trust_corruptions, corr_outputs, corr_text, "not measured"),
                   [page.slot_a, page.slot_b, corr_count], corr_outputs, api_name="trust_corruptions",
                   concurrency_limit=1).success(show(corr_box, corr_pics), [corr_plot], [corr_box, corr_pics],
                                                api_name=False, queue=False)
    faith_outputs = [faith_text, faith_plot, faith_table, faith_files]
    measured = faith_btn.click(in_place(tab.trust_faithfulness, faith_outputs, faith_text, "not measured"),
                               [page.slot_a, page.slot_b], faith_outputs, api_name="trust_faithfulness",
                               concurrency_limit=1)
    measured.success(show(faith_box, faith_pics), [faith_plot], [faith_box, faith_pics], api_name=False, queue=False)
    for shown, write in page.from_tabs.map_notes:  # the Attention and Evidence tabs' notes now have numbers
        measured.success(write, [page.slot_a, page.slot_b], [shown], api_name=False)
    return tab
