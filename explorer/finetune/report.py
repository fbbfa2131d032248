"""The side-by-side report of a finished job: a row per model, each class's top-1 (and B − A for a pair),
and the test images where the pair disagrees."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from explorer.analysis.reports import small_splits, without_top5
from explorer.core.card import Metrics, Training
from explorer.core.formatting import pct
from explorer.finetune.state import MemberState


@dataclass
class Report:
    """The side-by-side result of a finished job."""

    rows: list[list]                 # one per member: model, top-1, top-5, device, images/s, train time
    per_class: list[list]            # class, each member's top-1 (and B − A for a pair)
    disagree: list[int]              # test indices where the two members' predictions differ
    summary: str = ""
    columns: list[str] = field(default_factory=list)
    per_class_columns: list[str] = field(default_factory=list)
    note: str = ""                   # the held-out splits too small to read a percentage from (run_report)


def report(members: list[MemberState], y_test: np.ndarray, class_names: list[str]) -> Report:
    """`members`: a finished run's models (their label, tag, metrics, training and test predictions)."""
    rows = []
    for m in members:
        t, met = m.training or Training(), m.metrics or Metrics()
        rows.append([m.label, pct(met.test_top1), pct(met.test_top5), t.device or "–",
                     t.images_per_second or "–", f"{t.wall_time_s or 0:.0f} s"])
    per_model = [(m.metrics.test_per_class if m.metrics else None) or [None] * len(class_names) for m in members]
    per_class = []
    for i, c in enumerate(class_names):
        row = [c] + [pct(p[i]) for p in per_model]
        if len(members) == 2:
            a, b = per_model[0][i], per_model[1][i]
            row.append("–" if a is None or b is None else f"{100 * (b - a):+.1f}")
        per_class.append(row)
    tags = [m.tag or m.label for m in members]
    per_class_columns = ["class"] + [f"{t} top-1" for t in tags] + (["B − A (points)"] if len(members) == 2 else [])
    disagree: list[int] = []
    summary = ""
    if len(members) == 2 and all(m.predictions is not None for m in members):
        pa, pb = (np.asarray(m.predictions) for m in members)
        y = np.asarray(y_test)
        diff = np.flatnonzero(pa != pb)
        disagree = diff.tolist()
        a, b = (m.label for m in members)
        summary = (f"On {len(y)} test images they disagree on **{len(diff)}**: {a} right on "
                   f"{int((pa[diff] == y[diff]).sum())}, {b} right on {int((pb[diff] == y[diff]).sum())}.")
    if len(y_test) == 0:
        summary = ("**No test score**: every image was used for training, as asked, so nothing is left to "
                   "judge the models on.")
    columns = ["model", "test top-1", "test top-5", "device", "images/s", "train time"]
    return Report(rows, per_class, disagree, summary, columns, per_class_columns)


def run_report(state, plan) -> Report:
    """The report of a done run (a finetune.state.RunState) on its plan's test images, as the page shows it:
    without top-5 columns for fewer than six classes, with a note on held-out splits too small to trust."""
    names = plan.dataset.class_names
    rep = report(state.members, plan.dataset.y_test, names)
    rep.columns, rep.rows = without_top5(rep.columns, rep.rows, len(names))
    validation = max(((m.training.validation_images if m.training else 0) or 0 for m in state.members), default=0)
    rep.note = small_splits({"validation": validation, "test": len(plan.dataset.y_test)})
    if plan.dataset.unreadable:
        rep.note = "\n\n".join(t for t in (rep.note, f"⚠ {plan.dataset.note}.") if t)
    return rep
