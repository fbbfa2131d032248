"""The Fine-tune tab's words for what the fine-tuning back end reports (explorer.finetune): a run's status
line, a place in the queue, what a Cancel did, and where runs train."""

from __future__ import annotations

import html
import os
import time
from pathlib import Path

from explorer.finetune.backend import Hardware
from explorer.finetune.protocol import Phase
from explorer.finetune.queue import QueuePlace
from explorer.finetune.state import CancelAnswer, RunState

CANCEL_ANSWERS = {
    CancelAnswer.CANCELLED: "Cancelled: the training process was stopped and nothing was saved.",
    CancelAnswer.LEFT: "You left the queue; nothing was started.",
    CancelAnswer.NOT_YOURS: "The run going on is not yours: only the visitor who started it can cancel it. "
                            "Press Start to wait for your turn in the queue.",
    CancelAnswer.NONE: "No run is going on."}


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
LOADING_SLOTS = "**loading** the new models into the slots"


def headline(s: RunState) -> str:
    """What the run is doing now, in a few words: starting the training process, compiling A, training B,
    evaluating B, saving B, ...; once it has ended, how (done, cancelled, failed)."""
    if not s.running:
        return f"**{s.status}**"
    if not s.device:
        return "**starting** the training process"
    m = s.members[s.current]
    return DOING[m.phase].format(m.tag or m.label)


def plain(markdown: str) -> str:
    """A headline without its Markdown (for the progress bar's line)."""
    return markdown.replace("**", "")


# Each model's share of the bar, by phase: what precedes its steps (loading, choosing the head, compiling),
# its steps, then evaluating and saving. A phase without steps moves on with time towards its end (half the
# way in PHASE_HALF_S seconds), and a step that takes long (an epoch's end: validation, its first compile)
# towards the next step (half the way in STEP_HALF_S), so that the bar and the status line never stand still.
# The first model waits while the training process starts.
# The first model waits while the training process starts. On 2 CPU cores what precedes the steps takes
# about as long as the steps of a small run, whence its share.
SPANS = {Phase.WAITING: (0.0, 0.1), Phase.LOADING: (0.1, 0.15), Phase.HEAD: (0.15, 0.25),
         Phase.COMPILING: (0.25, 0.4), Phase.TRAINING: (0.4, 0.94), Phase.EVALUATING: (0.94, 0.98),
         Phase.SAVING: (0.98, 1.0), Phase.DONE: (1.0, 1.0)}
PHASE_HALF_S = 10.0
STEP_HALF_S = 2.0


def run_fraction(s: RunState, now: float | None = None) -> float:
    """How far the run has come, from 0 to 1, the one measure of the bar and the status line: its models in
    turn, each through its phases, by its steps while it trains and by time in the phases without steps."""
    if not s.members:
        return 0.0
    m = s.members[s.current]
    lo, hi = SPANS[m.phase]
    since = m.since or s.started
    waited = max(0.0, (now if now is not None else time.time()) - since) if since else 0.0
    if m.phase == Phase.TRAINING and m.total_steps:
        steps = m.step + (1.0 - 0.5 ** (waited / STEP_HALF_S))
        own = lo + (hi - lo) * min(1.0, steps / m.total_steps)
    else:
        own = lo + (hi - lo) * (1.0 - 0.5 ** (waited / PHASE_HALF_S))
    return min(1.0, (s.current + own) / len(s.members))


def percent(fraction: float) -> str:
    """The run's progress as the status line and the bar show it."""
    return f"{100 * fraction:.1f} %"


def progress_bar(fraction: float, desc: str) -> str:
    """The run's progress bar (HTML): `desc` and the percentage over a bar filled to `fraction`. Drawn by the
    run's own updates, each sent with the status line it agrees with, so that it never blanks: Gradio's
    overlay is hidden whenever an output arrives, until its next progress message."""
    fraction = min(1.0, max(0.0, fraction))
    return (f'<div class="ft-bar" role="progressbar" aria-valuemin="0" aria-valuemax="100" '
            f'aria-valuenow="{100 * fraction:.1f}" aria-label="fine-tune progress">'
            f'<div class="ft-bar-fill" style="width: {100 * fraction:.1f}%"></div></div>'
            f'<div class="ft-bar-text">{html.escape(desc)} · {percent(fraction)}</div>')


def run_status(s: RunState, root: str | os.PathLike, loading: float | None = None, now: float | None = None) -> str:
    """Markdown for a run: what it is doing (its headline, and the seconds since its Start), each member's
    progress and result, and how it ended; checkpoints are named relative to `root`. `loading` (seconds
    since the Start) says that the run is done and its models are being loaded into the slots; `now` is the
    moment its percentage is for (the progress bar's, sent with it)."""
    if s.status == "idle":
        return "No run yet."
    where = f"on **{s.device}** ({s.backend})" if s.device else f"starting a {s.backend} worker"
    doing, elapsed = (LOADING_SLOTS, loading) if loading is not None else (headline(s), s.elapsed)
    far = f" · {percent(run_fraction(s, now))}" if s.running and loading is None else ""
    lines = [f"{doing}{far} · {s.description} · {where} · {elapsed:.0f} s"]
    for m in s.members:
        t = m.training or {}
        done = (f" · done: test top-1 **{100 * m.metrics['test_top1']:.1f} %**, "
                f"{t.get('images_per_second')} images/s" if m.metrics and "test_top1" in m.metrics else "")
        start = next((e for e in m.history if e.get("epoch") == 0), None)
        head = f" · head: {start['head']}" if start and start.get("head") else ""
        kept = f" · kept: {t['kept_model']}" if done and t.get("kept_model") else ""
        progress = (f"step {m.step}/{m.total_steps}" if m.total_steps else
                    BEFORE_STEPS.get(m.phase, m.phase.value))
        lines.append(f"{m.label}: {progress}"
                     + (f" · loss {m.last_loss:.3f}" if m.last_loss is not None else "") + head + done + kept)
        if kept and t.get("decision"):
            lines.append(f"{m.label}: {t['decision']}" + (
                f"<details><summary>the numbers behind it</summary>{t['decision_detail']}</details>"
                if t.get("decision_detail") else ""))
    if s.status == "done" and loading is None:
        saved = ", ".join(f"`{os.path.relpath(m.checkpoint, Path(root))}`" for m in s.members)
        lines.append(f"Saved as {saved}, and loaded into the model slots: every tab now compares them.")
    if s.cancelling and s.running:
        lines.append("Cancelling: the run stops at its next step; nothing will be saved.")
    if s.status == "cancelled":
        lines.append(CANCEL_ANSWERS[CancelAnswer.CANCELLED])
    if s.error:
        lines.append(f"**⚠ the run failed:** {s.error} · nothing was saved; the slots are as they were.")
    return "\n\n".join(lines)


def refused_status(reason: str) -> str:
    """Markdown for a Start that could not start a run (a zip without class folders, a bad number)."""
    return f"**⚠ not started:** {reason}\n\nChange the form or the zip and press Start again."


def queue_status(where: QueuePlace, description: str) -> str:
    """Markdown for a Start waiting behind another visitor's run."""
    wait = f"about {duration(where.eta)}" if where.eta is not None else "an estimate comes once it has made progress"
    return (f"**waiting** · another visitor's run is going on · your place in the queue: **{where.place} of "
            f"{where.length}** · {wait} · {description} starts by itself when its turn comes; keep this page open "
            f"(Cancel leaves the queue)")


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
