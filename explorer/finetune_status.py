"""A fine-tune run's state as the Fine-tune tab says it (MERGE: goes to the fine-tune side's report)."""

from __future__ import annotations

import os
from pathlib import Path


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def run_status(s, root: str | os.PathLike) -> str:
    """Markdown for a RunState `s`: the run, each member's progress and result, and how it ended;
    checkpoints are named relative to `root`."""
    if s.status == "idle":
        return "No run yet."
    where = f"on **{s.device}** ({s.backend})" if s.device else f"starting a {s.backend} worker"
    lines = [f"**{s.status}** · {s.description} · {where} · {s.elapsed:.0f} s"]
    for m in s.members:
        pct = 100 * m.step / m.total_steps if m.total_steps else 0
        t = m.training or {}
        done = (f" · done: test top-1 **{100 * m.metrics['test_top1']:.1f} %**, "
                f"{t.get('images_per_second')} images/s" if m.metrics and "test_top1" in m.metrics else "")
        start = next((e for e in m.history if e.get("epoch") == 0), None)
        head = f" · head: {start['head']}" if start and start.get("head") else ""
        lines.append(f"{m.label}: step {m.step}/{m.total_steps} ({pct:.0f} %)"
                     + (f" · loss {m.last_loss:.3f}" if m.last_loss is not None else "") + head + done)
    if s.status == "done":
        saved = ", ".join(f"`{os.path.relpath(m.checkpoint, Path(root))}`" for m in s.members)
        lines.append(f"Saved as {saved}, and loaded into the model slots: every tab now compares them.")
    if s.status == "cancelled":
        lines.append("Cancelled: the training process was stopped and nothing was saved.")
    if s.error:
        lines.append(f"**⚠ the run failed:** {s.error} · nothing was saved; the slots are as they were.")
    return "\n\n".join(lines)


def queue_status(place: int, length: int, eta: float | None, description: str) -> str:
    """Markdown for a Start waiting behind another visitor's run."""
    wait = f"about {duration(eta)}" if eta is not None else "an estimate comes once it has made progress"
    return (f"**waiting** · another visitor's run is going on · your place in the queue: **{place} of {length}** · "
            f"{wait} · {description} starts by itself when its turn comes; keep this page open (Cancel leaves "
            f"the queue)")


CANCEL_ANSWERS = {"cancelled": "Cancelled: the training process was stopped and nothing was saved.",
                  "left": "You left the queue; nothing was started.",
                  "not yours": "The run going on is not yours: only the visitor who started it can cancel it. "
                               "Press Start to wait for your turn in the queue.",
                  "none": "No run is going on."}
