"""The Fine-tune tab: the form, a run followed live (or a place in the queue on a shared instance), its
report, and the visitor's fine-tuned checkpoints to download. The waiting and the following are
explorer.finetune.follow's; what each of their updates shows is finetune_run.py's."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import uuid
from dataclasses import dataclass

import gradio as gr

from explorer.checkpoints.store import CheckpointError
from explorer.checkpoints.visitors import REFUSED
from explorer.data.datasets import DatasetError
from explorer.finetune import follow
from explorer.finetune.backend import hardware
from explorer.finetune.plan import ZIP, JobError, Plan
from explorer.finetune.queue import Busy, Ticket
from explorer.model.config import PRESETS, VARIANTS
from explorer.ui.context import IN_PLACE, AppState, Page, expected, reporter
from explorer.ui.finetune_run import PAIR, SCRATCH, RunOutputs, RunView, base_choices
from explorer.ui.finetune_text import (
    CANCEL_ANSWERS,
    COMPARE_RUNNING,
    COMPARE_WAITING,
    hardware_note,
    help_text,
    refused_status,
    small_data_note,
    training_where,
)
from explorer.ui.pictures import PLOT_MIN

# How many visitors' last Starts the tab keeps for follow_own (each with its test split only once it has started).
STARTS_KEPT = 16


@dataclass
class LastStart:
    """A visitor's last Start: its plan (only the test split, all its report needs, once its run has started),
    the visitor's own checkpoints among its bases (kept from pruning while it waits or runs), and where it
    stands: `ticket` while it waits in the shared queue, `run_id` once its run has started."""

    plan: Plan
    refs: set[str]
    ticket: Ticket | None = None
    run_id: int | None = None

    def began(self, run_id: int) -> None:
        """Its run has started as `run_id` (the job folder holds its images now): only the test split is kept."""
        d = self.plan.dataset
        self.run_id, self.plan = run_id, dataclasses.replace(self.plan, dataset=dataclasses.replace(
            d, x_train=d.x_train[:0], y_train=d.y_train[:0]))


class FinetuneTab:
    def __init__(self, app: AppState):
        self.app = app
        self.view = RunView(app)  # what a Start shows, on the components it updates (set when the tab is built)
        # Each visitor's last Start until a page of theirs has followed it to its end (at most STARTS_KEPT
        # visitors): a page they open meanwhile takes up its wait or follows its run, and one they open after it
        # ended unseen shows how it ended (follow_own). A Start is not tied to its page.
        self._starts: dict[str | None, LastStart] = {}
        self._protected: dict[int, LastStart] = {}  # the Starts whose bases are kept from pruning, by id
        self._lock = threading.Lock()  # both, changed by every visitor's events

    def finetune_plan(self, what: str, preset: str, variant: str, data: str, zip_file, epochs, lr, batch_size,
                      images, freeze: bool, name: str | None, ref_a: str | None, ref_b: str | None, progress=None,
                      request=None, train_on_all: bool = False):
        """The form as a validated plan.Plan (ExplorerState.finetune_plan, of the bases `what` names); every
        refusal is a gr.Error that says why."""
        if what == PAIR:
            bases = [("A", ref_a), ("B", ref_b)]
        elif what in (None, "", SCRATCH):
            bases = []
        else:
            bases = [(next((t for t, r in (("A", ref_a), ("B", ref_b)) if r == what), ""), what)]
        try:
            return self.app.finetune_plan(bases, (preset, variant), data, zip_file, epochs, lr, batch_size, images,
                                          freeze, name, request, reporter(progress) if progress else None,
                                          train_on_all)
        except (JobError, DatasetError, CheckpointError, OSError) as e:
            raise gr.Error(self.app.safe(e)) from None

    def plan_note(self, what, preset, variant, data, zip_file, epochs, lr, batch_size, images, freeze, name, ref_a,
                  ref_b, train_on_all=False, request: gr.Request = None) -> str:
        """Said before a Start, as the zip or the form changes: that the zip is too small for the fine-tune to
        decide, how it is split and what the run will do (small_data_note); nothing without a zip, or for a form
        a Start would refuse (the Start says why)."""
        if data != ZIP or zip_file is None:
            return ""
        try:
            plan = self.finetune_plan(what, preset, variant, data, zip_file, epochs, lr, batch_size, images, freeze,
                                      name, ref_a, ref_b, request=request, train_on_all=train_on_all)
        except gr.Error:
            return ""
        return small_data_note(plan)

    def finetune(self, what, preset, variant, data, zip_file, epochs, lr, batch_size, images, freeze, name,
                 a, b, train_on_all=False, request: gr.Request = None, progress=gr.Progress()):
        """Starts a run and streams both models' curves until it ends (the run is not tied to this page);
        when it succeeds, its checkpoints go into the slots they came from. In shared mode a Start that
        finds another visitor's run going on waits in the queue, its place and wait shown, refreshed."""
        app, view = self.app, self.view
        try:
            plan = self.finetune_plan(what, preset, variant, data, zip_file, epochs, lr, batch_size, images, freeze,
                                      name, a, b, progress, request, train_on_all)
        except gr.Error as e:
            # The reason stays in the status line, in place of an earlier run's report and curves, until the
            # next Start; an API caller gets the error itself.
            out, hidden = view.outputs, gr.update(value=None, visible=False)
            yield {out.status: refused_status(e.message), out.curves: hidden, out.tau: hidden}
            raise expected(e.message, "fine-tune not started", toast=False) from None
        owner = app.owner(request)
        start = self._protect(LastStart(plan, {r for r in (a, b) if r in set(app.my_runs(request))}))
        try:
            if app.shared:
                start.ticket = app.runner.join(owner)
            else:
                start.began(app.runner.start(plan, owner, app.runs.out_dir(owner)))
        except (Busy, JobError) as e:  # a run going on (single user), a full queue, a plan that cannot start
            self._release()
            raise gr.Error(str(e)) from None
        self._keep(owner, start)
        yield from self._take_up(owner, start, a, b, request)

    def follow_own(self, a, b, request: gr.Request = None):
        """As a page opens: when the visitor's last Start waits in the queue or its run goes on (a page
        reloaded, another tab), the page takes up its wait or follows its run to its end as the page that
        started it does (place in the queue; status, bar, curves, then the report and the new models in the
        slots); when it ended while no page of theirs followed it (closed mid-run), the page shows how it
        ended, as that page would have, or that its place in the queue was given up. Else it changes nothing."""
        owner = self.app.owner(request)
        self._release()
        start = self._starts.get(owner)
        if start is not None and start.run_id is not None and self.app.runner.snapshot(start.run_id).run_id != \
                start.run_id:  # too long gone to show
            self._forget(owner, start)
            start = None
        if start is None:
            yield {self.view.outputs.status: gr.skip()}  # a generator that yields nothing would blank its outputs
            return
        yield from self._take_up(owner, start, a, b, request)

    def follow_on_open(self, opened, page: Page) -> None:
        """Chains follow_own onto `opened`, the page's opening once the visitor and the slots are known; its
        end lists the visitor's checkpoints and shows the report, as a Start's does."""
        out = self.view.outputs
        opened.then(self.follow_own, [page.slot_a, page.slot_b], out.components(), api_name=False,
                    concurrency_limit=None, show_progress="hidden").then(
            self.mine, None, [page.from_tabs.finetune_runs], api_name=False).then(
            self.view.show_report, None, [out.results, out.per_class, out.gallery], api_name=False, queue=False)

    def _protect(self, start: LastStart) -> LastStart:
        """Keeps the bases of `start` from being pruned while it waits or runs (see _release)."""
        self._release()
        with self._lock:
            self._protected[id(start)] = start
        self.app.visitors.protect_bases(id(start), start.refs)
        return start

    def _keep(self, owner: str | None, start: LastStart) -> LastStart:
        """Keeps `start` (protected) as `owner`'s last Start for follow_own."""
        with self._lock:
            self._starts.pop(owner, None)
            self._starts[owner] = start
            while len(self._starts) > STARTS_KEPT:
                self._starts.pop(next(iter(self._starts)))
        return start

    def _forget(self, owner: str | None, start: LastStart) -> None:
        """`owner`'s Start `start` has been shown to its end (or never started): no page shows it again."""
        with self._lock:
            if self._starts.get(owner) is start:
                self._starts.pop(owner)
        self._release()

    def _release(self) -> None:
        """Lets the bases of every Start that no longer waits or runs be pruned again."""
        runner = self.app.runner
        with self._lock:
            starts = list(self._protected.items())
        for key, start in starts:
            waiting = start.ticket is not None and start.ticket.waiting
            running = start.run_id is not None and runner.snapshot(start.run_id).running
            if not (waiting or running):
                with self._lock:
                    self._protected.pop(key, None)
                self.app.visitors.protect_bases(key, None)

    def _take_up(self, owner: str | None, start: LastStart, a, b, request):
        """The updates of `owner`'s Start `start` (the slots holding `a` and `b`): its wait in the queue, then
        its run until it has ended; once a page has shown its end, no other page of theirs shows it again. A
        page that closes meanwhile leaves the wait and the run to the next page of theirs that opens."""
        if start.run_id is None:
            try:
                with contextlib.closing(follow.wait_in_queue(self.app.runner, start.plan, owner,
                                                             self.app.runs.out_dir(owner), start.ticket)) as turn:
                    for update in turn:
                        if isinstance(update, follow.Started):
                            start.began(update.run_id)
                        else:
                            yield self.view.waiting(update, start.plan.description)
            except JobError as e:  # the plan cannot start
                self._forget(owner, start)
                raise gr.Error(str(e)) from None
            if start.run_id is None:  # left the queue, or dropped from it
                self._forget(owner, start)
                return
        plan, view = start.plan, self.view
        ended = lambda state: view.run_outputs(state, plan, a, b, True, request)  # noqa: E731
        with contextlib.closing(follow.follow_run(self.app.runner, start.run_id, ended)) as run:
            for update in run:
                yield view.following(update, plan, a, b, request)
        self._forget(owner, start)

    def running_note(self, request: gr.Request = None) -> str:
        """Compare's line on the visitor's last Start: that it waits in the queue or runs; else nothing."""
        start = self._starts.get(self.app.owner(request))
        if start is None:
            return ""
        if start.run_id is None:
            return COMPARE_WAITING if start.ticket is not None and start.ticket.waiting else ""
        return COMPARE_RUNNING if self.app.runner.snapshot(start.run_id).running else ""

    def cancel(self, request: gr.Request = None):
        """Cancels the visitor's own run (or their place in the queue); another visitor's run goes on."""
        return CANCEL_ANSWERS[self.app.runner.cancel_as(self.app.owner(request))]

    def mine(self, request: gr.Request = None):
        """The visitor's fine-tuned checkpoints, the newest chosen (ready to download)."""
        runs = self.app.my_runs(request)
        newest = max(runs, key=lambda r: (self.app.root / r).stat().st_mtime, default=None)
        return gr.update(choices=runs, value=newest)

    def download(self, ref: str | None, request: gr.Request = None):
        """A zip of one of the visitor's fine-tuned checkpoints (`<name>/` and its files)."""
        if not ref or ref not in self.app.my_runs(request):
            raise gr.Error(REFUSED if ref else "choose one of your fine-tuned checkpoints first")
        try:
            target = self.app.downloads_dir / uuid.uuid4().hex[:12]
            return gr.update(value=str(self.app.runs.zip_checkpoint(ref, self.app.owner(request), target)),
                             visible=True)
        except (CheckpointError, OSError) as e:
            raise gr.Error(self.app.safe(e)) from None


def build(app: AppState, page: Page) -> FinetuneTab:
    tab = FinetuneTab(app)
    choices = app.slot_choices()
    with gr.Tab("Fine-tune", id="finetune"):
        if app.shared:
            with gr.Row():
                gr.Markdown(f"**A shared instance:** {app.shared_limits.describe()}.", elem_id="shared-note")
                if app.settings.space_id:
                    gr.DuplicateButton("Duplicate this Space to fine-tune on your own hardware", size="sm",
                                       scale=0, elem_id="duplicate")
        hw = hardware(app.runner.settings)
        gr.Markdown(help_text(training_where(hw), app.limits.max_epochs, app.limits.max_images))
        gr.Markdown(hardware_note(hw), elem_id="ft-hardware")
        with gr.Row():
            base = gr.Dropdown(base_choices(choices), value=PAIR, label="fine-tune",
                               info="both slots on one split, or one checkpoint alone")
            preset = gr.Dropdown(sorted(PRESETS), value="cifar-small", label="preset (new model)")
            variant = gr.Dropdown(list(VARIANTS), value="spt_lsa", label="variant (new model)")
        with gr.Row():
            data = gr.Radio([ZIP, "cifar10", "cifar100"], value=ZIP, label="data")
            zip_file = gr.File(label="zip of class folders", file_types=[".zip"], type="filepath", elem_id="ft-zip")
        with gr.Row():
            epochs = gr.Number(0, label="epochs (0 = auto)", precision=0, min_width=120)
            lr = gr.Number(0, label="learning rate (0 = auto)", min_width=120)
            batch = gr.Number(0, label="batch size (0 = auto)", precision=0, min_width=120)
            subset = gr.Number(0, label="training images (0 = all)", precision=0, min_width=120)
            name = gr.Textbox("", label="name (optional)", min_width=160)
        with gr.Row():
            freeze = gr.Checkbox(False, label="freeze the backbone (train only the head)", elem_id="ft-freeze")
            all_images = gr.Checkbox(False, label="Train on all images (no test score)", elem_id="ft-all",
                                     info="a zip with too few images per class to hold a fifth out")
        plan_note = gr.Markdown("", elem_id="ft-plan-note")  # a zip too small for the run to decide, before Start
        with gr.Row():
            start = gr.Button("Start", variant="primary", elem_id="ft-start")
            cancel = gr.Button("Cancel", variant="stop", elem_id="ft-cancel")
        # A run's progress bar, drawn by the run's own updates (each with the status line it agrees with), in a
        # box of its own above the status line (while a Start waits in the queue, how far its wait has come);
        # Gradio's progress (reading a zip, downloading CIFAR before a run starts) shows over this box too,
        # never over the status line.
        progress_box = gr.HTML("", elem_id="ft-progress", elem_classes=IN_PLACE)  # a refusal: the status says why
        status = gr.Markdown("No run yet.", elem_id="ft-status")
        # The report comes when a run is done, right under the status line that ends with what qualifies it
        # (splits too small to trust a point); the curves follow the run as it goes.
        results = gr.Dataframe(label="result on the held-out test images", interactive=False, wrap=True,
                               headers=["model", "test top-1", "device", "images/s", "train time"], visible=False,
                               elem_id="ft-results")
        # One above the other: side by side at 1280 px the table's last column and the captions were cut.
        per_class = gr.Dataframe(label="per-class test top-1", interactive=False, wrap=True, elem_id="ft-per-class",
                                 headers=["class", "A top-1", "B top-1", "B − A (points)"], visible=False)
        gallery = gr.Gallery(format="png", label="test images where they disagree (true class: A's guess · B's guess)",
                             columns=6, height="auto", elem_id="ft-gallery", visible=False, object_fit="scale-down")
        # Side by side, or one per row in a narrow window; shown once a run has curves to draw.
        with gr.Row(elem_id="ft-plots"):
            curves = gr.Plot(label="loss and accuracy", show_label=False, min_width=PLOT_MIN, elem_id="ft-curves",
                             visible=False)
            tau = gr.Plot(label="tau per layer", show_label=False, min_width=PLOT_MIN, elem_id="ft-tau",
                          visible=False)
        with gr.Row():
            mine = gr.Dropdown(app.my_runs() if not app.shared else [], value=None, scale=3,
                               label="your fine-tuned checkpoints" if app.shared else "fine-tuned checkpoints",
                               info="a zip of the folder: `python -m explorer.evaluate` and "
                                    "`keras.saving.load_model` (after `import explorer`) load it")
            download = gr.Button("Download", scale=1, elem_id="ft-download")
        # On a row of its own, shown once there is a zip: beside the list, at 800 px its download arrow
        # covered the file's name.
        archive = gr.File(label="checkpoint zip", interactive=False, height=120, visible=False, elem_id="ft-archive")
    # The zip box only matters for a zip: CIFAR comes from the data folder or is downloaded.
    data.change(lambda d: gr.update(visible=d == ZIP), [data], [zip_file], api_name=False, queue=False)
    form = [base, preset, variant, data, zip_file, epochs, lr, batch, subset, freeze, name, page.slot_a, page.slot_b,
            all_images]
    gr.on([zip_file.change, data.change, base.change, subset.blur, subset.submit, all_images.change], tab.plan_note,
          form, [plan_note], api_name=False, show_progress="hidden", trigger_mode="always_last")
    page.from_tabs.finetune_base, page.from_tabs.finetune_runs = base, mine
    tab.view.outputs = RunOutputs(status, curves, tau, results, per_class, gallery, base,
                                  slots=(page.slot_a, page.slot_b), loaded=page.loaded, cards=page.cards,
                                  bar=progress_box)

    # A Start first takes an earlier run's report off the page; this run's shows once it has ended.
    # Not limited to one at a time: a second Start must reach the runner and hear that one is going on.
    start.click(tab.view.hide_report, None, [results, per_class, gallery], api_name=False, queue=False).then(
        tab.finetune, form, tab.view.outputs.components(), api_name="finetune", concurrency_id="finetune",
        # every waiting Start holds a worker: the queue, the run followed, one to refuse
        concurrency_limit=app.shared_limits.max_queue + 2 if app.shared else 4,
        # progress shows in its own box only: not over the status line, the slots or the plots
        show_progress_on=[progress_box]).then(tab.mine, None, [mine], api_name=False).then(
        tab.view.show_report, None, [results, per_class, gallery], api_name=False, queue=False)
    # The run's own line, never under Gradio's timer (the tab draws its own progress bar).
    cancel.click(tab.cancel, None, [status], api_name="cancel", concurrency_limit=None, show_progress="hidden")
    if page.from_tabs.compare_running is not None:  # Compare says while the visitor's run waits or goes on
        status.change(tab.running_note, None, [page.from_tabs.compare_running], api_name=False, queue=False)
    download.click(tab.download, [mine], [archive], api_name="download_checkpoint")
    return tab
