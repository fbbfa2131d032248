"""The Trust tab's words: the verdict read from a pair's shipped results, what each measure will cost before its
button is pressed, and a computed job's progress line (done of total, the time left at its measured rate)."""

from __future__ import annotations

import re

from explorer.analysis import corruptions, faithfulness
from explorer.analysis.trust_service import Cost, Eta
from explorer.core.formatting import pct


def seconds(value: float) -> str:
    """A duration as a reader says it: "40 s", "about 7 min"; never "0 s"."""
    return f"{max(1, round(value))} s" if value < 120 else f"{round(value / 60)} min"


def cost(c: Cost) -> str:
    """"about 40 s" with where the rate comes from."""
    return f"about {seconds(c.seconds)} " + ("at this host's measured rate" if c.measured else
                                            "(estimated from the models' sizes)")


def _maps_beating_random(m: faithfulness.ModelFaithfulness) -> list[str]:
    return [faithfulness.SHOWN_AS[k] for k in faithfulness.KINDS if k != "random"
            and m.deletion_auc[k] < m.deletion_auc["random"] and m.insertion_auc[k] > m.insertion_auc["random"]]


def verdict(table: corruptions.CorruptionTable | None, report: faithfulness.FaithfulnessReport | None) -> str:
    """The verdict the shipped results give for the pair in the slots (Markdown); "" when nothing is shipped."""
    lines = []
    if table is not None:
        (ca, cb), (ma, mb) = table.clean, table.mean_accuracy
        better = "B" if mb > ma else "A"
        lines.append(f"**Under corruption, {better} holds up better**: over 15 corruptions x 5 severities A keeps "
                     f"**{pct(ma)}** and B **{pct(mb)}** (clean: A {pct(ca)}, B {pct(cb)}; {table.count:,} "
                     f"images); B's mCE relative to A **{100 * table.mce(1):.1f} %** (below 100 %: fewer errors "
                     f"than A).")
    if report is not None:
        best = [max(faithfulness.KINDS[:-1], key=lambda k, m=m: m.insertion_auc[k] - m.deletion_auc[k])
                for m in report.models]
        most = f"{best[0]} for both" if len(set(best)) == 1 else f"{best[0]} for A, {best[1]} for B"
        beat = [", ".join(k for k in faithfulness.KINDS[:-1] if faithfulness.SHOWN_AS[k] in _maps_beating_random(m))
                or "none" for m in report.models]
        beat_words = f"{beat[0]} for both" if beat[0] == beat[1] else f"A: {beat[0]}; B: {beat[1]}"
        lines.append(f"**Which map to trust**: the most faithful is {most} ({report.count} images); beating a "
                     f"random ranking on both curves: {beat_words}.")
    if lines:
        lines.insert(0, "**Verdict** (shipped results, computed once for this pair):")
    return "  \n".join(lines)


def report_words(c: Cost, count: int) -> str:
    """What the whole-set report will compute, before it has."""
    return (f"_The whole-set report on {count:,} images (confusion, per class, calibration) is computed when the "
            f"tab opens, {cost(c)}; **Evaluate both models** computes it for another set._")


def corruption_words(c: Cost, count: int) -> str:
    """What **Corruptions** will compute for this pair, before it has (nothing is shipped for it)."""
    return (f"**Corruptions**: nothing is shipped for this pair; the button computes 15 corruptions x 5 "
            f"severities on the first {count:,} test images, {cost(c)} (set to fit a CPU Space's patience; "
            f"more images take longer in proportion), and keeps the table for this pair.")


def faithfulness_words(c: Cost) -> str:
    """What **Which map to trust** will compute for this pair, before it has (nothing is shipped for it)."""
    return (f"**Which map to trust**: nothing is shipped for this pair; the button measures deletion, insertion "
            f"and the randomisation check on the first {faithfulness.IMAGES} test images, {cost(c)}, and keeps "
            f"the result for this pair.")


def progress_line(message: str, done: int, total: int, unit: str, left: float | None) -> str:
    """A computed job's progress: what it is doing, done of total and the time left at its measured rate."""
    message = re.sub(r"\s*\(\d+/\d+\)$", "", message)  # the library's own count, said once below instead
    return (f"{message} · {done:,} of {total:,} {unit}"
            + (f" · about {seconds(left)} left" if left is not None else ""))


def timed(progress, total: int, unit: str):
    """A `progress(fraction, message)` for the analysis layer, as Gradio's bar: the real fraction, and a line
    saying done of `total` `unit` and the time left measured from the job's own pace."""
    eta = Eta()

    def report(fraction: float, message: str) -> None:
        done = int(round(fraction * total))
        progress(fraction, desc=progress_line(message, done, total, unit, eta.left(fraction)))
    return report
