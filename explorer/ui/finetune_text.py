"""The Fine-tune tab's words: its help, and what the fine-tuning back end (explorer.finetune) reports, said for
the page: a run's status line and progress bar, a place in the queue, what a Cancel did, where runs train."""

from __future__ import annotations

import html
import os
from pathlib import Path

from explorer.app.costs import Cost
from explorer.app.starts import Going
from explorer.core.card import Training
from explorer.core.formatting import rate
from explorer.core.protocol import Phase
from explorer.finetune.backend import Hardware
from explorer.finetune.estimate import time_left
from explorer.finetune.follow import run_fraction
from explorer.finetune.plan import TEST_FRACTION, Plan, images_per_class_for, plan_splits
from explorer.finetune.queue import QueuePlace
from explorer.finetune.state import CancelAnswer, RunState, RunStatus
from explorer.training.recipe import FINE_TUNE

# What the run's own line says while a cancelled run stops, and the Cancel button's answer then: the two agree.
CANCELLING = "Cancelling: the run stops at its next step (within a few seconds); nothing will be saved."
CANCEL_ANSWERS = {
    CancelAnswer.CANCELLING: CANCELLING,
    CancelAnswer.CANCELLED: "Cancelled: the training process was stopped and nothing was saved.",
    CancelAnswer.LEFT: "You left the queue; nothing was started.",
    CancelAnswer.NOT_YOURS: "The run going on is not yours: only the visitor who started it can cancel it. "
                            "Press Start to wait for your turn in the queue.",
    CancelAnswer.NONE: "No run is going on."}
# A Start whose place in the shared queue was given up because no page of its visitor kept asking about it.
QUEUE_DROPPED = ("Your place in the queue was given up: no page of yours was open to keep it. Nothing was started; "
                 "press Start again.")


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


# What the run is doing, for the status line's headline (Markdown): "{}" is the model (A, B, or its label
# when alone); the verb in bold, as the headline of an ended run is its status.
DOING = {Phase.WAITING: "**loading** {}", Phase.LOADING: "**loading** {}", Phase.HEAD: "**choosing** {}'s head",
         Phase.COMPILING: "**compiling** {}", Phase.TRAINING: "**training** {}", Phase.EVALUATING: "**evaluating** {}",
         Phase.SAVING: "**saving** {}", Phase.DONE: "**saving** {}"}
# A model's own line before its first step.
BEFORE_STEPS = {Phase.WAITING: "waits its turn", Phase.LOADING: "loading its checkpoint",
                Phase.HEAD: "choosing its head (the base's rows or a linear probe, on validation)",
                Phase.COMPILING: "compiling its training step"}
# Compare's one line while the visitor's fine-tune waits or runs (explorer.ui.finetune.FinetuneTab.running_note).
COMPARE_WAITING = ("_Your fine-tune waits in the queue (Fine-tune tab): when it has run, its models come into the "
                   "slots and these answers are redone for them._")
COMPARE_RUNNING = ("_Your fine-tune is running (Fine-tune tab): when it ends, its models come into the slots and "
                   "these answers are redone for them._")
COMPARE_GOING = {Going.WAITING: COMPARE_WAITING, Going.RUNNING: COMPARE_RUNNING, Going.NOTHING: ""}
LOADING_SLOTS = "**loading** the new models into the slots"
# An ended run's headline: how it ended.
ENDED = {RunStatus.IDLE: "**idle**", RunStatus.DONE: "**done**", RunStatus.CANCELLED: "**cancelled**",
         RunStatus.FAILED: "**failed**"}


def headline(s: RunState) -> str:
    """What the run is doing now, in a few words: starting the training process, compiling A, training B,
    evaluating B, saving B, ..., cancelling the run; once it has ended, how (done, cancelled, failed)."""
    if not s.running:
        return ENDED[s.status]
    if s.cancelling:  # until the worker has stopped: then "cancelled"
        return "**cancelling** the run"
    if not s.device:
        return "**starting** the training process"
    m = s.members[s.current]
    return DOING[m.phase].format(m.tag or m.label)


def plain(markdown: str) -> str:
    """A headline without its Markdown (for the progress bar's line)."""
    return markdown.replace("**", "")


def percent(fraction: float) -> str:
    """The run's progress as the status line and the bar show it."""
    return f"{100 * fraction:.1f} %"


def _bar(fraction: float | None, text: str, label: str) -> str:
    """A bar filled to `fraction` (None: not known, an empty bar without a value) over the line `text`."""
    width = 0.0 if fraction is None else 100 * min(1.0, max(0.0, fraction))
    value = "" if fraction is None else f'aria-valuenow="{width:.1f}" '
    return (f'<div class="ft-bar" role="progressbar" aria-valuemin="0" aria-valuemax="100" {value}'
            f'aria-label="{label}"><div class="ft-bar-fill" style="width: {width:.1f}%"></div></div>'
            f'<div class="ft-bar-text">{html.escape(text)}</div>')


def progress_bar(fraction: float, desc: str) -> str:
    """The run's progress bar (HTML): `desc` and the percentage over a bar filled to `fraction`. Drawn by the
    run's own updates, each sent with the status line it agrees with, so that it never blanks: Gradio's
    overlay is hidden whenever an output arrives, until its next progress message."""
    fraction = min(1.0, max(0.0, fraction))
    return _bar(fraction, f"{desc} · {percent(fraction)}", "fine-tune progress")


def run_bar(s: RunState, fraction: float) -> str:
    """A running run's bar: its headline and percentage over the fill; while it is being cancelled its headline
    alone ("cancelling the run") over the fill it had reached: it goes no further."""
    if s.cancelling:
        return _bar(fraction, plain(headline(s)), "fine-tune progress")
    left = time_left(s, s.planned)
    fraction = min(1.0, max(0.0, fraction))
    return _bar(fraction, f"{plain(headline(s))} · {percent(fraction)}"
                          + (f" · about {duration(left)} left" if left is not None else ""), "fine-tune progress")


def wait_bar(where: QueuePlace) -> str:
    """A waiting Start's bar (HTML), in the run's box: filled to the share of its wait behind it (what it has
    waited over that plus the estimate of what is left), empty until there is an estimate."""
    fraction = where.waited / (where.waited + where.eta) if where.eta is not None and where.waited + where.eta > 0 \
        else None
    return _bar(fraction, f"waiting for your turn · {where.place} of {where.length} in the queue · "
                          f"{duration(where.waited)} so far", "wait in the queue")


def run_status(s: RunState, root: str | os.PathLike, loading: float | None = None, now: float | None = None) -> str:
    """Markdown for a run: what it is doing (its headline, and the seconds since its Start), each member's
    progress and result, and how it ended; checkpoints are named relative to `root`. `loading` (seconds
    since the Start) says that the run is done and its models are being loaded into the slots; `now` is the
    moment its percentage is for (the progress bar's, sent with it)."""
    if s.status == RunStatus.IDLE:
        return "No run yet."
    where = f"on **{s.device}** ({s.backend})" if s.device else f"starting a {s.backend} worker"
    doing, elapsed = (LOADING_SLOTS, loading) if loading is not None else (headline(s), s.elapsed)
    # no percentage while cancelling: the run goes no further
    far = f" · {percent(run_fraction(s, now))}" if s.running and not s.cancelling and loading is None else ""
    left = time_left(s, s.planned, now) if loading is None and not s.cancelling else None
    then = f", about {duration(left)} left" if left is not None else ""
    lines = [f"{doing}{far} · {s.description} · {where} · {elapsed:.0f} s{then}"]
    for m in s.members:
        t = m.training or Training()
        done = (f" · done: test top-1 **{100 * m.metrics.test_top1:.1f} %**, "
                f"{t.images_per_second} images/s" if m.metrics and m.metrics.test_top1 is not None else "")
        start = next((e for e in m.history if e.epoch == 0), None)
        head = f" · head: {start.extra['head']}" if start and start.extra.get("head") else ""
        kept = f" · kept: {t.kept_model}" if done and t.kept_model else ""
        progress = (f"step {m.step}/{m.total_steps}" if m.total_steps else
                    BEFORE_STEPS.get(m.phase, m.phase.value))
        lines.append(f"{m.label}: {progress}"
                     + (f" · loss {m.last_loss:.3f}" if m.last_loss is not None else "") + head + done + kept)
        if kept and t.decision:
            lines.append(f"{m.label}: {t.decision}" + (
                f"<details><summary>the numbers behind it</summary>{t.decision_detail}</details>"
                if t.decision_detail else ""))
    if s.status == RunStatus.DONE and loading is None:
        saved = ", ".join(f"`{os.path.relpath(m.checkpoint, Path(root))}`" for m in s.members)
        lines.append(f"Saved as {saved}, and loaded into the model slots: every tab now compares them.")
    if s.cancelling and s.running:
        lines.append(CANCELLING)
    if s.status == RunStatus.CANCELLED:
        lines.append(CANCEL_ANSWERS[CancelAnswer.CANCELLED])
    if s.error:
        lines.append(f"**⚠ the run failed:** {s.error} · nothing was saved; the slots are as they were.")
    return "\n\n".join(lines)


def small_data_note(plan: Plan) -> str:
    """Markdown said before a Start when the plan's validation split is too small for the fine-tune's decision
    (keep a fine-tuned epoch, or its start) to mean much: how the images are split, what the run will do, and
    how many images would do; empty when it is not (or when a new model is trained: it has no start to keep)."""
    split = plan_splits(plan)
    if plan.scratch or not split.validation or split.validation >= FINE_TUNE.min_validation_images:
        return ""
    d, n = plan.dataset, split.validation
    models = "each model" if len(plan.members) > 1 else "the model"
    test = f"{split.test} to test, " if split.test else ""
    need = images_per_class_for(FINE_TUNE.min_validation_images, d.num_classes,
                                TEST_FRACTION if split.test else 0.0)
    return (f"⚠ **Too few images for the fine-tune to decide.** Of {len(d.x_train) + len(d.x_test)} images, "
            f"{test}{n} to validate and {split.train} to train {models}. A fine-tuned model is kept only when it "
            f"does clearly better than its start (the base model's answers, or a linear classifier on its features) "
            f"on the validation images, and on {n} (under {FINE_TUNE.min_validation_images}) one image is worth "
            f"{100 / n:.3g} points: the run cannot tell the two apart: after training it keeps whichever a single "
            f"image favours, and the start on a tie. Add images: {need} a class give "
            f"{FINE_TUNE.min_validation_images} to validate.")


def cost_note(cost: Cost, shipped: str | None, on_cpu: bool) -> str:
    """Markdown for what a run will cost on this machine (explorer.app.costs.Cost): measuring first, held back
    by a run going on, or the estimate and where its paces come from; when long on a CPU, the faster choices."""
    where = "this machine's CPU" if on_cpu else "this machine"
    est = cost.estimate
    if est is None:
        if cost.measuring:
            return ("**Measuring this machine's pace** for these models: a few training steps of each in the "
                    "training process (what they compile, the run then finds compiled)…")
        if cost.held:
            return "The estimate comes when the run going on has ended: these models are measured then."
        return ""
    parts = " + ".join(f"{m.label.split(':')[0]} {duration(m.seconds)}" for m in est.members)
    start = f" + the training process's start {duration(est.start_s)}" if est.start_s >= 1 else ""
    how = ("a few steps of each model measured here" if est.measured == "measure" else
           "these models' earlier runs here")
    lines = [f"**This run: about {duration(est.seconds)}** on {where} ({parts}{start}; from {how})."]
    if cost.measuring:
        lines.append(f"Measuring {shipped or 'the faster choice'} too…")
    if cost.shipped is not None or cost.fewer is not None:
        offers = [f"{shipped} on the same zip takes about {duration(cost.shipped.seconds)}"] if cost.shipped else []
        if cost.fewer:
            k, fewer = cost.fewer
            offers.append(f"{k} epoch{'s take' if k > 1 else ' takes'} about {duration(fewer.seconds)}")
        lines.append("That is long on a CPU: " + "; or ".join(offers) + " (one click below).")
    return " ".join(lines)


def refused_status(reason: str) -> str:
    """Markdown for a Start that could not start a run (a zip without class folders, a bad number)."""
    return f"**⚠ not started:** {reason}\n\nChange the form or the zip and press Start again."


def queue_status(where: QueuePlace, description: str) -> str:
    """Markdown for a Start waiting behind another visitor's run."""
    wait = f"about {duration(where.eta)}" if where.eta is not None else "an estimate comes once it has made progress"
    return (f"**waiting** · another visitor's run is going on · your place in the queue: **{where.place} of "
            f"{where.length}** · {wait} · {description} starts by itself when its turn comes while a page of yours is "
            f"open (a reload keeps your place; Cancel leaves the queue)")


def help_text(where: str, epochs: int, images: int) -> str:
    """The tab's help: what a run does, with the default recipe's numbers read from the recipe's constants."""
    return f"""\
Fine-tunes **both slots' models on the same data, split and recipe** (one after the other), or one
checkpoint alone, in a separate training process ({where}); the new checkpoints go into the model slots,
so every tab then compares them. Upload a zip with one folder of images per class; it is split 80/20 into
training and held-out test images. **The default recipe** (every number at 0): the head starts where it can
already score (the base's own rows when your classes are among its classes, or a logistic regression on
the frozen features where that does better in 5-fold cross-validation), then the whole model trains (AdamW,
warmup + cosine, crop + flip; peak learning rate {rate(FINE_TUNE.learning_rate)}, or
{rate(FINE_TUNE.learning_rate_known)} for classes the base knows) for up to {FINE_TUNE.target_steps:,} steps
and {FINE_TUNE.image_budget:,} images, with a batch size scaled to your data. The best epoch on a 10 %
validation split is kept only when it beats its start clearly there (a net gain of over
{FINE_TUNE.margin_z:g} standard error in images right); otherwise the run keeps the start (the base's rows,
or the logistic regression refitted on every labelled image) and says why. The training process stays up
between runs with its models compiled: a repeat run of the same shape starts at once. What a run will cost
**on this machine** is said above Start once a zip is in, from the pace measured here (a few steps of each
model, or their earlier runs), and counted down while it runs. Limits here: {epochs} epochs,
{images:,} images."""


def training_where(hw: Hardware) -> str:
    """Where a fine-tune will run, in a few words (the tab's help text)."""
    if hw.error:
        return f"⚠ {hw.error}"
    return f"Keras on {hw.backend}; {hw.reason}" if hw.reason != "no GPU" else f"CPU, Keras on {hw.backend}"


def hardware_note(hw: Hardware) -> str:
    """Where fine-tuning runs will train: on a GPU or not, and when a GPU would sit idle, exactly what to
    change; on a Space without one, what duplicating it buys."""
    if hw.error:
        return f"⚠ {hw.error}"
    backend = hw.backend
    switch = ("replace this Space's `requirements.txt` with the repository's `requirements-gpu.txt` (the same "
              "packages plus JAX with CUDA 12) and let the Space rebuild" if hw.space else
              "`pip install -r requirements-gpu.txt` (JAX with CUDA 12) and restart the app")
    if hw.gpu and backend == "jax" and hw.jax_cuda:
        return "Runs train on this machine's **GPU** (a worker process on Keras' JAX backend with CUDA)."
    if hw.gpu and hw.reason == "EXPLORER_TRAIN_BACKEND":
        return (f"This machine has an NVIDIA GPU; `EXPLORER_TRAIN_BACKEND={backend}` sends runs to Keras' {backend} "
                f"backend{', which trains on the GPU when it has CUDA' if backend != 'tensorflow' else ' on the CPU'}.")
    if hw.gpu:
        return (f"⚠ **This machine has an NVIDIA GPU, but runs will train on its CPU**: JAX with CUDA is not "
                f"installed. To train on the GPU, {switch}.")
    if hw.space:
        return ("Runs train on this Space's **CPU**, shared by its visitors. **Duplicate the Space** for a copy of "
                "your own: no queue and no shared limits; on GPU hardware (Settings → Space hardware, an NVIDIA "
                "T4 or L4) with `requirements-gpu.txt` as its `requirements.txt`, runs train on the GPU. ZeroGPU "
                "hardware does not help: it serves PyTorch only, and runs here train with Keras on JAX.")
    return (f"Runs train on this machine's **CPU** (Keras on {backend}); with an NVIDIA GPU, "
            "`pip install -r requirements-gpu.txt` and they train on it.")
