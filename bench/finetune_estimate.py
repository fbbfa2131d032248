"""What the Fine-tune tab says a run will cost before its Start, against what the run then takes, on this host.

As a visitor meets it: one runner, its worker started as the app starts it (`prepare`), then for each pair on
the same 800-image zip of five CIFAR-10 classes (bench/finetune_speed.py's), the paper-scale pair first (the
pair a first visit opens with), then the shipped 0.2 M pair: the tab's estimate as it comes (explorer.app.costs:
a Measure of each model where this machine has no pace for it yet; its seconds are printed), then the run
from Start to its checkpoints, and the time left the tab shows, sampled every 2 s: its first value, and its
largest rise between two samples (the goal: it falls steadily). Then each pair again, estimated from its
first run's paces (a second Start of the same shape: nothing compiles).

The goal (issue #83): the estimate within a factor of 1.5 of the run for both pairs. The host's training
speed (bench/train_throughput.py, one round) comes first: read every time against it.

    python bench/finetune_estimate.py [--no-host] [--pairs paper,shipped] [--again]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _common import ROOT, data_dir
from explorer.app.costs import costs
from explorer.checkpoints.store import read_card
from explorer.finetune.estimate import Estimate, time_left
from explorer.finetune.plan import ZIP, Base, Limits, job_data, plan_job
from explorer.finetune.runner import FineTuneRunner
from explorer.finetune.state import RunStatus
from finetune_speed import build_zips, host_speed

PAIRS = {"paper": ("paper/cifar10-vanilla", "paper/cifar10-spt_lsa"), "shipped": ("cifar10-vanilla", "cifar10-spt_lsa")}
GOAL = 1.5


def plan_of(pair: tuple[str, str], zip_path: Path):
    members = [Base(tag, f"{tag}: {ref}", str(ROOT / "checkpoints" / ref), read_card(ROOT / "checkpoints" / ref))
               for tag, ref in zip("AB", pair, strict=True)]
    return plan_job(members, job_data(ZIP, str(zip_path), None, Limits(), 32))


def estimated(runner, plan) -> tuple[Estimate, float, bool]:
    """The tab's estimate once final, the seconds it took, and whether a Measure ran for it."""
    began, measured = time.time(), False
    for cost in costs(plan, runner, on_cpu=True, shipped_plan=lambda: None, wait_s=1800):
        measured |= cost.measuring
        if cost.final:
            if cost.estimate is None:
                raise SystemExit(f"no estimate: {cost}")
            return cost.estimate, time.time() - began, measured


def run(runner, plan) -> tuple[float, float | None, float]:
    """(wall seconds from Start to its end, the first time left shown, the largest rise between samples)."""
    began = time.time()
    runner.start(plan)
    samples = []
    while True:
        s = runner.snapshot()
        left = time_left(s, s.planned)
        if left is not None:
            samples.append(left)
        if not s.running:
            break
        runner.wait(2.0)
    s = runner.snapshot()
    if s.status != RunStatus.DONE:
        raise SystemExit(f"the run ended {s.status}: {s.error}")
    rise = max((b - a for a, b in zip(samples, samples[1:], strict=False)), default=0.0)
    return time.time() - began, samples[0] if samples else None, rise


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-host", action="store_true", help="skip measuring the host's training speed")
    p.add_argument("--pairs", default="paper,shipped", help="which pairs, in order (paper, shipped)")
    p.add_argument("--again", action="store_true", help="each pair a second time, from its first run's paces")
    args = p.parse_args()
    if not args.no_host:
        print(f"host: our training loop at {host_speed():.0f} images/s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        zips = build_zips(Path(tmp), Path(data_dir()))
        runner = FineTuneRunner(Path(tmp) / "checkpoints" / "finetuned",
                                environ={**os.environ, "PYTHONPATH": str(ROOT)})
        runner.prepare()  # as the app does at its start: the worker's imports, no compiling on a CPU
        rows = []
        for round_ in range(2 if args.again else 1):
            for name in args.pairs.split(","):
                plan = plan_of(PAIRS[name], zips["800"])
                est, asked, measured = estimated(runner, plan)
                wall, first_left, rise = run(runner, plan)
                ratio = wall / est.seconds
                label = f"{name}{' again' if round_ else ''}"
                rows.append((label, ratio))
                parts = " + ".join(f"{m.seconds:.1f}" for m in est.members)
                start = f" + start {est.start_s:.1f}" if est.start_s else ""
                source = f"a measure of {asked:.1f} s" if measured else "from earlier runs"
                print(f"{label:14s} estimate {est.seconds:6.1f} s ({parts}{start}; {source}) | run {wall:6.1f} s | "
                      f"run / estimate {ratio:.2f} | time left first {first_left or 0:6.1f} s, largest rise "
                      f"{rise:.1f} s", flush=True)
        runner.shutdown()
    worst = max(max(r, 1 / r) for _, r in rows)
    print(f"worst factor {worst:.2f} (goal: at most {GOAL}): {'met' if worst <= GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
