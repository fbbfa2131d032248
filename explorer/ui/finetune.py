"""The Fine-tune tab: the form, a run followed live (or a place in the queue on a shared instance), its
report, and the visitor's fine-tuned checkpoints to download."""

from __future__ import annotations

import concurrent.futures
import os
import time
import uuid
from dataclasses import dataclass

import gradio as gr
import pandas as pd

from explorer import plots
from explorer.checkpoints import CheckpointError, read_card
from explorer.config import PRESETS, VARIANTS
from explorer.data import DatasetError
from explorer.finetune import head, tuning
from explorer.finetune.backend import hardware
from explorer.finetune.plan import ZIP, JobError, job_data, plan_job
from explorer.finetune.queue import Busy, QueueFull
from explorer.finetune.report import report
from explorer.finetune.state import CancelAnswer
from explorer.formatting import rate
from explorer.reports import small_splits, without_top5
from explorer.ui.cards import card_markdown
from explorer.ui.context import AppState, Page, expected, reporter, shares
from explorer.ui.finetune_text import (
    CANCEL_ANSWERS,
    LOADING_SLOTS,
    hardware_note,
    headline,
    plain,
    progress_bar,
    queue_status,
    refused_status,
    run_fraction,
    run_status,
    training_where,
)
from explorer.ui.pictures import PLOT_MIN
from explorer.visitors import REFUSED
from explorer.workbench import square

SCRATCH = "(a new model from scratch)"
PAIR = "A and B (the two slots)"


def base_choices(slot_choices: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """What the fine-tune dropdown offers: both slots, a new model, or one checkpoint (as the slots list it)."""
    return [(PAIR, PAIR), (SCRATCH, SCRATCH)] + list(slot_choices)
CURVES_EVERY_S = 10.0
REPORTS_KEPT = 256
def help_text(where: str, epochs: int, images: int) -> str:
    """The tab's help: what a run does, with the default recipe's numbers read from the recipe's constants."""
    return f"""\
Fine-tunes **both slots' models on the same data, split and recipe** (one after the other), or one
checkpoint alone, in a separate training process ({where}); the new checkpoints go into the model slots,
so every tab then compares them. Upload a zip with one folder of images per class; it is split 80/20 into
training and held-out test images. **The default recipe** (every number at 0): the head starts where it can
already score (the base's own rows when your classes are among its classes, or a logistic regression on
the frozen features where that does better in 5-fold cross-validation), then the whole model trains (AdamW,
warmup + cosine, crop + flip; peak learning rate {rate(tuning.FT_LEARNING_RATE)}, or
{rate(tuning.FT_LEARNING_RATE_KNOWN)} for classes the base knows) for up to {tuning.FT_TARGET_STEPS:,} steps
and {tuning.FT_IMAGE_BUDGET:,} images, with a batch size scaled to your data. The best epoch on a 10 %
validation split is kept only when it beats its start clearly there (a net gain of over
{head.FT_MARGIN_Z:g} standard error in images right); otherwise the run keeps the start (the base's rows,
or the logistic regression refitted on every labelled image) and says why. The training process stays up
between runs with its models compiled: a repeat run of the same shape starts at once. On 2 CPU cores a
first run costs most: starting the process and compiling both models took about two minutes for a pair on
60 images (a busy host); a repeat run of a pair takes about half a minute. Limits here: {epochs} epochs,
{images:,} images."""


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


class FinetuneTab:
    def __init__(self, app: AppState):
        self.app = app
        self.outputs: RunOutputs | None = None  # the components a Start updates: set when the tab is built
        # Each visitor's last done run: how many test images its models disagree on and its tables' numbers of
        # columns (its tables show once it has ended, its gallery when there is one); the page's components
        # hold the report itself.
        self._reports: dict[str | None, tuple[int, int, int]] = {}

    def finetune_plan(self, what: str, preset: str, variant: str, data: str, zip_file, epochs, lr, batch_size,
                      images, freeze: bool, name: str | None, ref_a: str | None, ref_b: str | None, progress=None,
                      request=None, train_on_all: bool = False):
        """The form as a validated plan.Plan; every refusal is a gr.Error that says why. CIFAR comes
        whole (downloaded once if need be, `progress` following it)."""
        app = self.app
        if what == PAIR:
            bases = [("A", ref_a), ("B", ref_b)]
        elif what in (None, "", SCRATCH):
            bases = []
        else:
            bases = [(next((t for t, r in (("A", ref_a), ("B", ref_b)) if r == what), ""), what)]
        try:
            owner = app.owner(request)
            members = app.store.members([(tag, app.runs.check(ref, owner) if ref else ref) for tag, ref in bases])
            size = members[0][3].config["image_size"] if members else PRESETS.get(preset, PRESETS["tiny"]).image_size

            def load(name):
                return app.tests.training_data(name, progress=reporter(progress) if progress else None)

            dataset = job_data(data, zip_file, load, app.limits, size, train_on_all=bool(train_on_all))
            return plan_job(members, dataset, epochs, lr, batch_size, images, bool(freeze), (name or "").strip(),
                            app.limits, scratch=(preset, variant) if not bases else None,
                            train_on_all=bool(train_on_all))
        except (JobError, DatasetError, CheckpointError, OSError) as e:
            raise gr.Error(app.safe(e)) from None

    def finetune(self, what, preset, variant, data, zip_file, epochs, lr, batch_size, images, freeze, name,
                 a, b, train_on_all=False, request: gr.Request = None, progress=gr.Progress()):
        """Starts a run and streams both models' curves until it ends (the run is not tied to this page);
        when it succeeds, its checkpoints go into the slots they came from. In shared mode a Start that
        finds another visitor's run going on waits in the queue, its place and wait shown, refreshed."""
        app = self.app
        try:
            plan = self.finetune_plan(what, preset, variant, data, zip_file, epochs, lr, batch_size, images, freeze,
                                      name, a, b, progress, request, train_on_all)
        except gr.Error as e:
            # The reason stays in the status line, in place of an earlier run's report and curves, until the
            # next Start; an API caller gets the error itself.
            out, hidden = self.outputs, gr.update(value=None, visible=False)
            yield {out.status: refused_status(e.message), out.curves: hidden, out.tau: hidden}
            raise expected(e.message, "fine-tune not started", toast=False) from None
        owner, key, mine = app.owner(request), id(plan), set(app.my_runs(request))
        app.protect_bases(key, {r for r in (a, b) if r in mine})
        try:
            if app.shared:
                started: dict = {}
                yield from self._wait_in_queue(plan, owner, started)
                run_id = started.get("run_id")
            else:
                try:
                    run_id = app.runner.start(plan, owner, app.runs.out_dir(owner))
                except (Busy, JobError) as e:
                    raise gr.Error(str(e)) from None
            if run_id is not None:
                yield from self._follow_run(run_id, plan, a, b, request)
        finally:
            app.protect_bases(key, None)

    def _wait_in_queue(self, plan, owner, started: dict):
        """Joins the queue and waits for this Start's turn, saying where it stands; puts the run's id in
        `started` (nothing, when the visitor left the queue)."""
        runner = self.app.runner
        try:
            ticket = runner.join(owner)
        except QueueFull as e:
            raise gr.Error(str(e)) from None
        try:
            while True:
                if runner.ready(ticket):
                    try:
                        started["run_id"] = runner.start(plan, owner, self.app.runs.out_dir(owner), ticket)
                        return
                    except JobError as e:
                        raise gr.Error(str(e)) from None
                    except Busy:
                        pass
                if ticket.cancelled:
                    yield {self.outputs.status: CANCEL_ANSWERS[CancelAnswer.LEFT]}
                    return
                yield {self.outputs.status: queue_status(runner.position(ticket), plan.description)}
                time.sleep(1.0)
        finally:
            if "run_id" not in started:
                runner.leave(ticket)

    def _follow_run(self, run_id, plan, a, b, request):
        # The curves are redrawn at most every CURVES_EVERY_S during a run: Gradio turns each matplotlib
        # figure into a PNG in this process (~0.25 s for the two, holding the GIL), which would otherwise
        # land on other visitors' requests at every epoch of a fast run.
        shown, drawn = None, 0.0
        while True:
            state = self.app.runner.snapshot(run_id)
            if state.run_id != run_id:  # too long gone for the runner to keep; nothing more to show
                return
            epochs_seen = tuple(len(x.history) for x in state.members)
            if not state.running:
                yield from self._final_outputs(state, plan, a, b, request)
                return
            # Every half second, whatever the run is doing, the bar and the status line move on, both by
            # the same measure of the run taken at the same moment.
            now = time.time()
            bar = {self.outputs.bar: progress_bar(run_fraction(state, now), plain(headline(state)))}
            if epochs_seen != shown and time.monotonic() - drawn >= CURVES_EVERY_S:
                shown, drawn = epochs_seen, time.monotonic()
                yield self._run_outputs(state, plan, a, b, request=request, now=now) | bar
            else:
                yield {self.outputs.status: run_status(state, self.app.root, now=now)} | bar
            time.sleep(0.5)

    def _final_outputs(self, state, plan, a, b, request):
        """The ended run's outputs; a done run's new models load into the slots meanwhile (seconds), the
        status line saying so with its counter moving."""
        done = {self.outputs.bar: ""}  # the run has ended: no bar
        if state.status != "done":
            yield self._run_outputs(state, plan, a, b, final=True, request=request) | done
            return
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            final = pool.submit(self._run_outputs, state, plan, a, b, True, request)
            while not final.done():
                yield {self.outputs.status: run_status(state, self.app.root, loading=time.time() - state.started),
                       self.outputs.bar: progress_bar(1.0, plain(LOADING_SLOTS))}
                concurrent.futures.wait([final], timeout=0.5)
            yield final.result() | done

    def _lsa_labels(self, plan) -> list[str]:
        """The labels of the run's models that have LSA layers (whose tau the tau plot follows)."""
        labels = []
        for m in plan.members:
            try:
                variant = m.variant or read_card(m.base).variant
            except (CheckpointError, OSError, ValueError):
                continue
            if variant in ("lsa", "spt_lsa"):
                labels.append(m.label)
        return labels

    def _run_outputs(self, state, plan, a, b, final: bool = False, request=None, now: float | None = None) -> dict:
        """Status, curves, tau; when the run is done also its report, and the slots, their cards and the
        page's loaded models holding its checkpoints, all in one update."""
        out = self.outputs
        histories = {m.label: m.history for m in state.members}
        lsa = self._lsa_labels(plan)
        waiting = (f"τ of {' and '.join(lsa)} shows here after {'its' if len(lsa) == 1 else 'each one’s'} first "
                   f"epoch" if lsa else "no LSA layers in the models being fine-tuned")
        status = run_status(state, self.app.root, now=now)
        kept = {m.label: (m.training or {}).get("kept_epoch") for m in state.members if m.training}
        updates = {out.status: status,
                   out.curves: gr.update(value=plots.plot_training(histories, kept), visible=True),
                   out.tau: gr.update(value=plots.plot_tau_history(histories, empty=waiting), visible=True)}
        if not (final and state.status == "done"):
            return updates
        rep = report([m.__dict__ for m in state.members], plan.dataset.y_test, plan.dataset.class_names)
        columns, rows = without_top5(rep.columns, rep.rows, len(plan.dataset.class_names))
        validation = max(((m.training or {}).get("validation_images") or 0 for m in state.members), default=0)
        small = small_splits({"validation": validation, "test": len(plan.dataset.y_test)})
        refs = [os.path.relpath(m.checkpoint, self.app.root) for m in state.members]
        if len(refs) == 2:
            a, b = refs
        elif state.members[0].tag == "A":
            a = refs[0]
        else:
            b = refs[0]
        choices = self.app.slot_choices(request)
        self._reports[self.app.owner(request)] = (len(rep.disagree), len(columns), len(rep.per_class_columns))
        while len(self._reports) > REPORTS_KEPT:  # visitors through the API alone never show theirs
            self._reports.pop(next(iter(self._reports)))
        updates |= {out.status: "\n\n".join(t for t in (status, rep.summary, small) if t),
                    out.results: pd.DataFrame(rows, columns=columns),
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
        self._reports.pop(self.app.owner(request), None)
        return (gr.update(value=None, visible=False),) * 3

    def show_report(self, request: gr.Request = None):
        """A run has ended: its report shows where it has one (a run that failed or was cancelled has none)."""
        done = self._reports.pop(self.app.owner(request), None)
        if done is None:
            return (gr.update(visible=False),) * 3
        disagreements, results, per_class = done
        # The first column (a model, a class) takes what the numbers leave: at 800 px every column shows.
        return (gr.update(visible=True, column_widths=shares(results, 30)),
                gr.update(visible=True, column_widths=shares(per_class, 40)), gr.update(visible=disagreements > 0))

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
        with gr.Row():
            start = gr.Button("Start", variant="primary", elem_id="ft-start")
            cancel = gr.Button("Cancel", variant="stop", elem_id="ft-cancel")
        # A run's progress bar, drawn by the run's own updates (each with the status line it agrees with), in a
        # box of its own above the status line; Gradio's progress (reading a zip, downloading CIFAR before a
        # run starts) shows over this box too, never over the status line.
        progress_box = gr.HTML("", elem_id="ft-progress")
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
    page.from_tabs.finetune_base, page.from_tabs.finetune_runs = base, mine
    tab.outputs = RunOutputs(status, curves, tau, results, per_class, gallery, base, slots=(page.slot_a, page.slot_b),
                             loaded=page.loaded, cards=page.cards, bar=progress_box)

    # A Start first takes an earlier run's report off the page; this run's shows once it has ended.
    # Not limited to one at a time: a second Start must reach the runner and hear that one is going on.
    start.click(tab.hide_report, None, [results, per_class, gallery], api_name=False, queue=False).then(
        tab.finetune, [base, preset, variant, data, zip_file, epochs, lr, batch, subset, freeze, name, page.slot_a,
                       page.slot_b, all_images],
        tab.outputs.components(), api_name="finetune", concurrency_id="finetune",
        # every waiting Start holds a worker: the queue, the run followed, one to refuse
        concurrency_limit=app.shared_limits.max_queue + 2 if app.shared else 4,
        # progress shows in its own box only: not over the status line, the slots or the plots
        show_progress_on=[progress_box]).then(tab.mine, None, [mine], api_name=False).then(
        tab.show_report, None, [results, per_class, gallery], api_name=False, queue=False)
    cancel.click(tab.cancel, None, [status], api_name="cancel", concurrency_limit=None)
    download.click(tab.download, [mine], [archive], api_name="download_checkpoint")
    return tab
