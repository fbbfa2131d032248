"""A fine-tune's run as the Fine-tune tab shows it: the components a Start updates, each update of a Start
followed (explorer.finetune.follow) as theirs, and its report once it is done."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import pandas as pd

from explorer.analysis import plots
from explorer.app.workbench import square
from explorer.checkpoints.store import CheckpointError
from explorer.finetune import follow
from explorer.finetune.plan import lsa_labels
from explorer.finetune.report import run_report
from explorer.finetune.state import CancelAnswer, RunStatus
from explorer.ui.cards import card_markdown
from explorer.ui.context import AppState, shares
from explorer.ui.finetune_text import (
    CANCEL_ANSWERS,
    LOADING_SLOTS,
    QUEUE_DROPPED,
    plain,
    progress_bar,
    queue_status,
    run_bar,
    run_status,
    wait_bar,
)

SCRATCH = "(a new model from scratch)"
PAIR = "A and B (the two slots)"
REPORTS_KEPT = 256


def base_choices(slot_choices: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """What the fine-tune dropdown offers: both slots, a new model, or one checkpoint (as the slots list it)."""
    return [(PAIR, PAIR), (SCRATCH, SCRATCH)] + list(slot_choices)


@dataclass
class RunOutputs:
    """What a Start changes: the tab's status line, plots and report, the fine-tune dropdown, and the page's
    slots, the States that say which models they hold and the slots' cards."""

    status: gr.Markdown
    curves: gr.Plot
    tau: gr.Plot
    results: gr.Dataframe
    per_class: gr.Dataframe
    gallery: gr.Gallery
    base: gr.Dropdown
    slots: tuple[gr.Dropdown, gr.Dropdown]
    loaded: tuple[gr.State, gr.State]
    cards: tuple[gr.Markdown, gr.Markdown]
    bar: gr.HTML  # the run's progress bar, above the status line

    def components(self) -> list:
        """The /finetune endpoint's outputs, in the order an API caller receives them (the bar last: its
        percentage is the status line's)."""
        return [self.status, self.curves, self.tau, self.results, self.per_class, self.gallery, *self.slots,
                self.base, *self.loaded, *self.cards, self.bar]


class RunView:
    """The Fine-tune tab's outputs of a Start, on `outputs` (set when the tab is built)."""

    def __init__(self, app: AppState):
        self.app = app
        self.outputs: RunOutputs | None = None
        # Each page's last done run (by Gradio's session: two pages may follow one run): how many test images
        # its models disagree on and its tables' numbers of columns (its tables show once it has ended, its
        # gallery when there is one); the page's components hold the report itself.
        self._reports: dict[str | None, tuple[int, int, int]] = {}

    def waiting(self, update: follow.InQueue | follow.LeftQueue, description: str) -> dict:
        """A Start waiting for its turn: its place in the queue, and in the run's box how far its wait has come;
        or that the visitor left it (or it was dropped), and no bar."""
        out = self.outputs
        if isinstance(update, follow.LeftQueue):
            return {out.status: QUEUE_DROPPED if update.dropped else CANCEL_ANSWERS[CancelAnswer.LEFT], out.bar: ""}
        return {out.status: queue_status(update.place, description), out.bar: wait_bar(update.place)}

    def following(self, update: follow.Tick | follow.Loading | follow.Ended, plan, a, b, request=None) -> dict:
        """A followed run's update: while it runs, the status line and the bar from the same moment (and the
        curves, when due); while a done run's models load into the slots, the status line's counter and a
        full bar; once it has ended, its outputs (`update.outputs`, run_outputs') and no bar."""
        out = self.outputs
        if isinstance(update, follow.Ended):
            return update.outputs | {out.bar: ""}
        if isinstance(update, follow.Loading):
            return {out.status: run_status(update.state, self.app.root, loading=update.seconds),
                    out.bar: progress_bar(1.0, plain(LOADING_SLOTS))}
        bar = {out.bar: run_bar(update.state, update.fraction)}
        if update.curves_due:
            return self.run_outputs(update.state, plan, a, b, request=request, now=update.now) | bar
        return {out.status: run_status(update.state, self.app.root, now=update.now)} | bar

    def run_outputs(self, state, plan, a, b, final: bool = False, request=None, now: float | None = None) -> dict:
        """Status, curves, tau; when the run is done also its report, and the slots, their cards and the
        page's loaded models holding its checkpoints, all in one update."""
        out = self.outputs
        histories = {m.label: [e.to_json() for e in m.history] for m in state.members}
        lsa = lsa_labels(plan)
        waiting = (f"τ of {' and '.join(lsa)} shows here after {'its' if len(lsa) == 1 else 'each one’s'} first "
                   f"epoch" if lsa else "no LSA layers in the models being fine-tuned")
        status = run_status(state, self.app.root, now=now)
        kept = {m.label: m.training.kept_epoch for m in state.members if m.training}
        updates = {out.status: status,
                   out.curves: gr.update(value=plots.plot_training(histories, kept), visible=True),
                   out.tau: gr.update(value=plots.plot_tau_history(histories, empty=waiting), visible=True)}
        if not (final and state.status == RunStatus.DONE):
            return updates
        rep = run_report(state, plan)
        refs = follow.checkpoint_refs(state, self.app.root)
        a, b = follow.new_slots(state, refs, a, b)
        choices = self.app.slot_choices(request)
        self._reports[self.app.session(request)] = (len(rep.disagree), len(rep.columns), len(rep.per_class_columns))
        while len(self._reports) > REPORTS_KEPT:  # visitors through the API alone never show theirs
            self._reports.pop(next(iter(self._reports)))
        updates |= {out.status: "\n\n".join(t for t in (status, rep.summary, rep.note) if t),
                    out.results: pd.DataFrame(rep.rows, columns=rep.columns),
                    out.per_class: pd.DataFrame(rep.per_class, columns=rep.per_class_columns),
                    out.gallery: self._disagreements(state, plan, rep.disagree[:18]),
                    out.slots[0]: gr.update(choices=choices, value=a),
                    out.slots[1]: gr.update(choices=choices, value=b),
                    out.base: gr.update(choices=base_choices(choices))}
        # The new models are loaded here, so that the slots, their cards and every tab change at once.
        for tag, ref, loaded, card in zip("AB", (a, b), out.loaded, out.cards, strict=True):
            if ref not in refs:
                continue
            try:
                updates |= {loaded: ref, card: card_markdown(self.app, ref, request=request)}
                self.app.shown(request, tag, ref)
            except (CheckpointError, ValueError, OSError) as e:
                updates[card] = f"**⚠ could not load {ref!r}: {self.app.safe(e)}**"
        return updates

    @staticmethod
    def _disagreements(state, plan, indices) -> list:
        """The test images where the run's models disagree, each captioned with the truth and every answer."""
        x, y, names = plan.dataset.x_test, plan.dataset.y_test, plan.dataset.class_names
        preds = [m.predictions for m in state.members]
        return [(square(x[i], 96), f"{names[y[i]]}: " + " · ".join(
            f"{m.tag or m.label} {names[p[i]]}" for m, p in zip(state.members, preds, strict=True)))
            for i in indices]

    def hide_report(self, request: gr.Request = None):
        """A Start: the report of an earlier run leaves the page (this run's comes when it is done)."""
        self._reports.pop(self.app.session(request), None)
        return (gr.update(value=None, visible=False),) * 3

    def show_report(self, request: gr.Request = None):
        """A run has ended: its report shows where it has one (a run that failed or was cancelled has none)."""
        done = self._reports.pop(self.app.session(request), None)
        if done is None:
            return (gr.update(visible=False),) * 3
        disagreements, results, per_class = done
        # The first column (a model, a class) takes what the numbers leave: at 800 px every column shows.
        return (gr.update(visible=True, column_widths=shares(results, 30)),
                gr.update(visible=True, column_widths=shares(per_class, 40)), gr.update(visible=disagreements > 0))
