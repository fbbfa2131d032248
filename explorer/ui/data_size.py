"""The Small data tab: the study's curve (test top-1 against training-set size, a band per variant over
seeds), its tables, and a training-set size whose pair one click puts in the slots."""

from __future__ import annotations

import gradio as gr

from explorer.checkpoints.catalog import PAPER, STUDY
from explorer.study import mechanisms as study_mechanisms
from explorer.study import report as study_report
from explorer.study.report import read_results
from explorer.ui.context import UNLISTED, AppState, Page, repo_link

INTRO = """\
The paper's claim is about **small** datasets. The same two models (and at 1,000 and 2,500 images SPT
alone and LSA alone) were trained with one light recipe (crop and flip) on nested, class-balanced subsets of
CIFAR-10, with several seeds each, and tested on all 10,000 test images ({study_md} has the design).
At 1,000 and 2,500 images the ViT, LSA alone and SPT + LSA (and SPT alone at 1,000) were also trained under the
paper's own heavy recipe (CutMix and mixup, RandAugment, erasing, repeated augmentation, stochastic depth), and a
ViT with CutMix alone at 1,000; the tables below set the recipes side by side. The paper-scale pair (2.7 M
parameters, the paper's recipe on 45,000 images) is drawn as diamonds. Pick a training-set size to put that
size's pair in the slots: every tab then works on them."""


class DataSizeTab:
    def __init__(self, app: AppState):
        self.app = app

    def sizes(self, request=None) -> list[tuple[str, int]]:
        """(label, training images) of every size with a ViT and an SPT + LSA model in the app."""
        return [(f"{n:,}", n) for n in self.app.study_pairs(request)]

    def pair(self, size, request: gr.Request = None) -> tuple[str, str]:
        """The ViT and the SPT + LSA model trained on `size` images, for slots A and B."""
        pairs = self.app.study_pairs(request)
        try:
            return pairs[int(size)]
        except (KeyError, TypeError, ValueError):
            sizes = ", ".join(f"{n:,}" for n in pairs) or "none"
            raise gr.Error(f"no pair was trained on {size} images here; sizes with a pair: {sizes}") from None

    def selected(self, ref_a: str | None, ref_b: str | None, request: gr.Request = None) -> int | None:
        """The size whose pair the slots hold (A: its ViT, B: its SPT + LSA), or None."""
        return next((n for n, pair in self.app.study_pairs(request).items() if pair == (ref_a, ref_b)), None)

    def results(self) -> list[dict]:
        """The study's rows the app ships (checkpoints/study/results.csv); none without that file."""
        try:
            return read_results(self.app.root / STUDY / "results.csv")
        except (OSError, ValueError):
            return []

    def question(self) -> str:
        """The heading over what LSA does to attention: what the study's paired gaps measured."""
        return study_report.lsa_question(self.results())

    def curve(self, request: gr.Request = None):
        """The study's figures (the curve, the paired gap) and tables, from the results the app ships
        (checkpoints/study/results.csv)."""
        rows = self.results()
        shipped = study_report.shipped_points(self.app.root)
        paper_scale = study_report.shipped_points(self.app.root / PAPER)
        text = study_report.markdown(rows) if rows else (
            "No trial of the study has finished yet: the figure shows the shipped models only.")
        return (study_report.curve_figure(rows, shipped, gap_panel=False, paper_scale=paper_scale),
                study_report.gap_figure(rows, shipped, paper_scale), text)


    def answer(self) -> str:
        """The measured answer, first: what SPT + LSA does at three settings (0.2 M under the light recipe and
        under the paper's, 2.7 M at the paper's scale), from the numbers the app ships; "" without them."""
        try:
            rows = study_mechanisms.read_csv(self.app.root / STUDY / "mechanisms.csv")
        except (OSError, ValueError, KeyError):
            return ""
        return study_mechanisms.three_settings(rows, self.results()) if rows else ""

    def mechanisms(self) -> str:
        """What LSA does to attention in the study's kept models, in words and a table, from the numbers
        the app ships (checkpoints/study/mechanisms.csv; `python -m explorer.study mechanisms`); "" without."""
        try:
            rows = study_mechanisms.read_csv(self.app.root / STUDY / "mechanisms.csv")
        except (OSError, ValueError, KeyError):
            return ""
        if not rows:
            return ""
        layers = study_mechanisms.layer_table(rows)
        per_layer = ("\n\nLayer by layer where the paper's recipe ran: the most local head's / the mean attention "
                     f"distance, over the image's side (about 0.5: spread over the image; 0: a query attends to its "
                     f"own position):\n\n{layers}") if layers else ""
        return f"{study_mechanisms.answer(rows)}\n\n{study_mechanisms.markdown(rows)}{per_layer}"


    def models(self, request=None) -> list[tuple[str, str]]:
        """(label, reference) of each model the table above reports (per-head ones included), as the slots
        list them: one pick puts it in slot B."""
        try:
            names = {row["model"] for row in study_mechanisms.read_csv(self.app.root / STUDY / "mechanisms.csv")}
        except (OSError, ValueError, KeyError):
            return []
        # a study model is named without its folder; a paper-scale one by its reference (paper/cifar10-vanilla);
        # the shipped ones, in every slot's list already, are not offered again
        return [(label, ref) for label, ref in self.app.slot_choices(request)
                if (ref.startswith(f"{STUDY}/") and ref.split("/", 1)[1] in names)
                or (ref.startswith(f"{PAPER}/") and ref in names)]


    def reported(self, ref_b: str | None, request: gr.Request = None) -> str | None:
        """Slot B's model when it is one of those the table reports, else None (no choice shown)."""
        return ref_b if ref_b in {ref for _, ref in self.models(request)} else None


def build(app: AppState, page: Page) -> DataSizeTab:
    tab = DataSizeTab(app)
    figure, gaps, text = tab.curve()
    sizes = tab.sizes()
    with gr.Tab("Small data", id="small-data"):
        answer = tab.answer()
        if answer:  # the outcome first, the design below it
            gr.Markdown(answer, elem_id="data-size-answer")
        gr.Markdown(INTRO.format(study_md=repo_link("study/README.md", app.settings.space_id)))
        # A first visit selects the size whose pair the slots open with (the shipped pair: 45,000 images).
        size = gr.Radio(sizes, value=tab.selected(*page.refs), elem_id="data-size",
                        label="training images: put that size's pair in the slots (A: ViT, B: SPT + LSA)")
        # The shipped results, drawn once when the app starts.
        with gr.Row():  # side by side, or one above the other in a narrow window
            gr.Plot(figure, label="test top-1 against training-set size", show_label=False, min_width=380,
                    scale=10, elem_id="data-size-curve")
            gr.Plot(gaps, label="the paired gap against training-set size", show_label=False, min_width=340,
                    scale=9, elem_id="data-size-gap")
        gr.Markdown(text, elem_id="data-size-tables")
        why = tab.mechanisms()
        if why:
            with gr.Accordion(tab.question(), open=False, elem_id="data-size-why"):
                gr.Markdown(why)
                reported = gr.Dropdown(tab.models(), value=None, label="put one of these models in slot B",
                                       elem_id="data-size-model")
            reported.input(lambda ref: ref, [reported], [page.slot_b], api_name=False, queue=False)
    size.input(tab.pair, [size], [page.slot_a, page.slot_b], api_name="study_pair", **UNLISTED)
    # The size follows the slots: selected while they hold its pair, none otherwise.
    gr.on(page.new_models(), tab.selected, list(page.loaded), [size], api_name=False, queue=False)
    if why:  # the reported model follows slot B: chosen while B holds it, empty otherwise
        page.loaded[1].change(tab.reported, [page.loaded[1]], [reported], api_name=False, queue=False,
                              trigger_mode="always_last")
    return tab
