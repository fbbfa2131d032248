"""A fine-tune's run as the Fine-tune tab shows it: the components a Start updates, each update of a Start
followed (explorer.finetune.follow) as theirs, and its report once it is done."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import gradio as gr
import pandas as pd

from explorer.analysis import plots
from explorer.analysis.render import square
from explorer.app.starts import LastStart
from explorer.checkpoints.store import CheckpointError
from explorer.finetune import follow
from explorer.finetune.plan import JobError, lsa_labels
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
    # The page's last done run (Gradio keeps a State per page): what show_report needs to show its report.
    shape: gr.State

    def components(self) -> list:
        """The /finetune endpoint's outputs, in the order an API caller receives them (the bar last: its
        percentage is the status line's; a State is not one of the API's outputs)."""
        return [self.status, self.curves, self.tau, self.results, self.per_class, self.gallery, *self.slots,
                self.base, *self.loaded, *self.cards, self.bar, self.shape]

    def report(self) -> list:
        """The report's components, which show once a run is done."""
        return [self.results, self.per_class, self.gallery]


@dataclass(frozen=True)
class ReportShape:
    """A done run's report as the page must lay it out: how many test images its models disagree on (its
    gallery shows when there is one) and its tables' numbers of columns."""

    disagreements: int
    results: int
    per_class: int


class RunView:
    """The Fine-tune tab's outputs of a Start, on `outputs` (set when the tab is built)."""

    def __init__(self, app: AppState):
        self.app = app
        self.outputs: RunOutputs | None = None

    def waiting(self, update: follow.InQueue | follow.LeftQueue, description: str) -> dict:
        """A Start waiting for its turn: its place in the queue, and in the run's box how far its wait has come;
        or that the visitor left it (or it was dropped), and no bar."""
        out = self.outputs
        if isinstance(update, follow.LeftQueue):
            return {out.status: QUEUE_DROPPED if update.dropped else CANCEL_ANSWERS[CancelAnswer.LEFT], out.bar: ""}
        return {out.status: queue_status(update.place, description), out.bar: wait_bar(update.place)}

    def following(self, update: follow.Tick | follow.Loading | follow.Ended) -> dict:
        """A followed run's update: while it runs, the status line and the bar from the same moment (and the
        curves, once drawn); while a done run's models load into the slots, the status line's counter and a
        full bar; once it has ended, its outputs (`update.outputs`, run_outputs') and no bar."""
        out = self.outputs
        if isinstance(update, follow.Ended):
            return update.outputs | {out.bar: ""}
        if isinstance(update, follow.Loading):
            return {out.status: run_status(update.state, self.app.root, loading=update.seconds),
                    out.bar: progress_bar(1.0, plain(LOADING_SLOTS))}
        # The curves (drawn beside, follow.follow_run) under this moment's status line and bar.
        return (update.drawn or {}) | {out.status: run_status(update.state, self.app.root, now=update.now),
                                       out.bar: run_bar(update.state, update.fraction)}

    def follow_own(self, a, b, request: gr.Request = None):
        """As a page opens: when the visitor's last Start waits in the queue or its run goes on (a page
        reloaded, another tab), the page takes up its wait or follows its run to its end as the page that
        started it does (place in the queue; status, bar, curves, then the report and the new models in the
        slots); when it ended while no page of theirs followed it (closed mid-run), the page shows how it
        ended, as that page would have, or that its place in the queue was given up. Else it changes nothing."""
        owner = self.app.owner(request)
        start = self.app.starts.last(owner)
        if start is None:
            yield {self.outputs.status: gr.skip()}  # a generator that yields nothing would blank its outputs
            return
        yield from self.take_up(owner, start, a, b, request)

    def take_up(self, owner: str | None, start: LastStart, a, b, request):
        """The updates of `owner`'s Start `start` (the slots holding `a` and `b`): its wait in the queue, then
        its run until it has ended; once a page has shown its end, no other page of theirs shows it again. A
        page that closes meanwhile leaves the wait and the run to the next page of theirs that opens."""
        if start.run_id is None:
            try:
                with contextlib.closing(follow.wait_in_queue(self.app.runner, start.plan, owner,
                                                             self.app.runs.out_dir(owner), start.ticket)) as turn:
                    for update in turn:
                        if isinstance(update, follow.TurnCame):
                            start.began(update.run_id)
                        else:
                            yield self.waiting(update, start.plan.description)
            except JobError as e:  # the plan cannot start
                self.app.starts.forget(owner, start)
                raise gr.Error(str(e)) from None
            if start.run_id is None:  # left the queue, or dropped from it
                self.app.starts.forget(owner, start)
                return
        plan, view = start.plan, self
        ended = lambda state: view.run_outputs(state, plan, a, b, True, request)  # noqa: E731
        with contextlib.closing(follow.follow_run(self.app.runner, start.run_id, ended,
                                                  draw=lambda state: view.drawn(state, plan))) as run:
            for update in run:
                yield view.following(update)
        self.app.starts.forget(owner, start)

    def run_outputs(self, state, plan, a, b, final: bool = False, request=None, now: float | None = None) -> dict:
        """Status, curves, tau; when the run is done also its report, and the slots, their cards and the
        page's loaded models holding its checkpoints, all in one update."""
        out = self.outputs
        status = run_status(state, self.app.root, now=now)
        updates = {out.status: status} | self.drawn(state, plan)
        if not (final and state.status == RunStatus.DONE):
            return updates
        rep = run_report(state, plan)
        refs = follow.checkpoint_refs(state, self.app.root)
        a, b = follow.new_slots(state, refs, a, b)
        choices = self.app.slot_choices(request)
        updates |= {out.shape: ReportShape(len(rep.disagree), len(rep.columns), len(rep.per_class_columns)),
                    out.status: "\n\n".join(t for t in (status, rep.summary, rep.note) if t),
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

    def figures(self, state, plan) -> tuple:
        """The run's curves (loss and top-1 per epoch, each model) and its τ per layer and epoch."""
        histories = {m.label: [e.to_json() for e in m.history] for m in state.members}
        lsa = lsa_labels(plan)
        waiting = (f"τ of {' and '.join(lsa)} shows here after {'its' if len(lsa) == 1 else 'each one’s'} first "
                   f"epoch" if lsa else "no LSA layers in the models being fine-tuned")
        kept = {m.label: m.training.kept_epoch for m in state.members if m.training}
        return plots.plot_training(histories, kept), plots.plot_tau_history(histories, empty=waiting)

    def drawn(self, state, plan) -> dict:
        """The run's figures as the page receives them (pictures): made here, in the thread that draws them, rather
        than by Gradio's postprocess, which runs on the server's event loop (every visitor's requests wait for
        it: a second or more for the two on a slow host)."""
        out = self.outputs
        return {plot: gr.update(value=plot.postprocess(figure), visible=True)
                for plot, figure in zip((out.curves, out.tau), self.figures(state, plan), strict=True)}

    @staticmethod
    def _disagreements(state, plan, indices) -> list:
        """The test images where the run's models disagree, each captioned with the truth and every answer."""
        x, y, names = plan.dataset.x_test, plan.dataset.y_test, plan.dataset.class_names
        preds = [m.predictions for m in state.members]
        return [(square(x[i], 96), f"{names[y[i]]}: " + " · ".join(
            f"{m.tag or m.label} {names[p[i]]}" for m, p in zip(state.members, preds, strict=True)))
            for i in indices]

    @staticmethod
    def hide_report():
        """A Start: the report of an earlier run leaves the page (this run's comes when it is done)."""
        return (gr.update(value=None, visible=False),) * 3 + (None,)

    @staticmethod
    def show_report(shape: ReportShape | None):
        """A run has ended: its report shows where it has one (a run that failed or was cancelled has none);
        `shape` is the page's, which the run's last update set (and a Start cleared)."""
        if shape is None:
            return (gr.update(visible=False),) * 3
        # The first column (a model, a class) takes what the numbers leave: at 800 px every column shows.
        return (gr.update(visible=True, column_widths=shares(shape.results, 30)),
                gr.update(visible=True, column_widths=shares(shape.per_class, 40)),
                gr.update(visible=shape.disagreements > 0))
