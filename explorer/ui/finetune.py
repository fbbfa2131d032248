"""The Fine-tune tab: the form, a run followed live (or a place in the queue on a shared instance), its
report, and the visitor's fine-tuned checkpoints to download. The waiting and the following are
explorer.finetune.follow's; what each of their updates shows is finetune_run.py's."""

from __future__ import annotations

import gradio as gr

from explorer.checkpoints.store import CheckpointError
from explorer.data.datasets import DatasetError
from explorer.finetune.backend import hardware
from explorer.finetune.plan import ZIP, JobError
from explorer.finetune.queue import Busy
from explorer.model.config import PRESETS, VARIANTS
from explorer.ui import finetune_cost
from explorer.ui.context import IN_PLACE, AppState, Page, expected, reporter
from explorer.ui.finetune_run import PAIR, SCRATCH, RunOutputs, RunView, base_choices
from explorer.ui.finetune_text import (
    CANCEL_ANSWERS,
    COMPARE_GOING,
    hardware_note,
    help_text,
    refused_status,
    training_where,
)
from explorer.ui.pictures import PLOT_MIN


class FinetuneTab:
    def __init__(self, app: AppState):
        self.app = app
        self.view = RunView(app)  # what a Start shows, on the components it updates (set when the tab is built)

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
        start = app.starts.new(plan, {r for r in (a, b) if r in set(app.my_runs(request))})
        try:
            if app.shared:
                start.ticket = app.runner.join(owner)
            else:
                start.began(app.runner.start(plan, owner, app.runs.out_dir(owner)))
        except (Busy, JobError) as e:  # a run going on (single user), a full queue, a plan that cannot start
            app.starts.release()
            raise gr.Error(str(e)) from None
        app.starts.keep(owner, start)
        yield from self.view.take_up(owner, start, a, b, request)

    def follow_on_open(self, opened, page: Page) -> None:
        """Chains follow_own onto `opened`, the page's opening once the visitor and the slots are known; its
        end lists the visitor's checkpoints and shows the report, as a Start's does."""
        out = self.view.outputs
        opened.then(self.view.follow_own, [page.slot_a, page.slot_b], out.components(), api_name=False,
                    concurrency_limit=None, show_progress="hidden").then(
            self.mine, None, [page.from_tabs.finetune_runs], api_name=False).then(
            self.view.show_report, [out.shape], out.report(), api_name=False, queue=False)

    def running_note(self, request: gr.Request = None) -> str:
        """Compare's line on the visitor's last Start: that it waits in the queue or runs; else nothing."""
        return COMPARE_GOING[self.app.starts.going(self.app.owner(request))]

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
        if not ref:
            raise gr.Error("choose one of your fine-tuned checkpoints first")
        try:
            return gr.update(value=str(self.app.checkpoint_zip(ref, request)), visible=True)
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
        before = finetune_cost.layout()  # what the run will cost here, and a zip too small to decide, before Start
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
        shape = gr.State(None)  # the page's last done run, for its report (RunView.show_report)
        archive = gr.File(label="checkpoint zip", interactive=False, height=120, visible=False, elem_id="ft-archive")
    # The zip box only matters for a zip: CIFAR comes from the data folder or is downloaded.
    data.change(lambda d: gr.update(visible=d == ZIP), [data], [zip_file], api_name=False, queue=False)
    form = [base, preset, variant, data, zip_file, epochs, lr, batch, subset, freeze, name, page.slot_a, page.slot_b,
            all_images]
    finetune_cost.wire(tab, before, form, page)
    page.from_tabs.finetune_base, page.from_tabs.finetune_runs = base, mine
    tab.view.outputs = RunOutputs(status, curves, tau, results, per_class, gallery, base,
                                  slots=(page.slot_a, page.slot_b), loaded=page.loaded, cards=page.cards,
                                  bar=progress_box, shape=shape)

    # A Start first takes an earlier run's report off the page; this run's shows once it has ended.
    # Not limited to one at a time: a second Start must reach the runner and hear that one is going on.
    out = tab.view.outputs
    start.click(tab.view.hide_report, None, out.report() + [out.shape], api_name=False, queue=False).then(
        tab.finetune, form, tab.view.outputs.components(), api_name="finetune", concurrency_id="finetune",
        # every waiting Start holds a worker: the queue, the run followed, one to refuse
        concurrency_limit=app.shared_limits.max_queue + 2 if app.shared else 4,
        # progress shows in its own box only: not over the status line, the slots or the plots
        show_progress_on=[progress_box]).then(tab.mine, None, [mine], api_name=False).then(
        tab.view.show_report, [out.shape], out.report(), api_name=False, queue=False)
    # The run's own line, never under Gradio's timer (the tab draws its own progress bar).
    cancel.click(tab.cancel, None, [status], api_name="cancel", concurrency_limit=None, show_progress="hidden")
    if page.from_tabs.compare_running is not None:  # Compare says while the visitor's run waits or goes on
        status.change(tab.running_note, None, [page.from_tabs.compare_running], api_name=False, queue=False)
    download.click(tab.download, [mine], [archive], api_name="download_checkpoint")
    return tab
