"""Does Keras' `steps_per_execution` make a fine-tune faster? Measured through the worker's own warm path.

Issue #43 asks to try `steps_per_execution` (several training steps per call into the compiled function, so
that Python, the callbacks and the host-device hand-over run once per k steps instead of once per step).
This runs what the fine-tune worker runs (explorer.training.tuning.fine_tune with a WarmModels cache, as
`python -m explorer.finetune --serve` does) on the 800-image zip of bench/finetune_speed.py, for each k: a
first run (tracing and compiling the k-step function: the cost a new job shape pays; the process's own
first-time costs are paid before, by a run that is not compared) and then `--repeats`
warm runs (nothing compiles; the cost every repeat run pays). Each k gets its own models, so nothing compiled
for one k serves another, and the k take turns round by round, so a neighbour's load is shared out.

The step count in the checkpoint's card is counted per callback call, so with k > 1 it undercounts; only the
wall times below are compared. The host's training speed comes first (bench/train_throughput.py, one round).

    python bench/steps_per_execution.py [--backend jax] [--k 1,4,23] [--repeats 2] [--member vanilla]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, data_dir


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="jax", choices=("jax", "tensorflow"))
    p.add_argument("--k", default="1,4,23", help="steps per execution to compare (23: one call per epoch of the "
                                                  "800-image job)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--member", default="spt_lsa", choices=("vanilla", "spt_lsa"))
    p.add_argument("--no-host", action="store_true")
    args = p.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    if not args.no_host:
        from finetune_speed import host_speed
        print(f"host: our training loop at {host_speed():.0f} images/s", flush=True)
    os.environ["KERAS_BACKEND"] = args.backend
    sys.path.insert(0, str(ROOT))
    from explorer.finetune.plan import ZIP, Limits, job_data
    from explorer.finetune.warm import WarmModels
    from explorer.training import fitting
    from explorer.training.head import base_rows
    from explorer.training.runs import recipe_for
    from explorer.training.tuning import fine_tune
    from finetune_speed import build_zips

    chosen = {"k": 1}
    compile_for_run = fitting.compile_for_run

    def with_k(model, *a, **kw):
        anew = compile_for_run(model, *a, **kw)
        if anew:
            model.steps_per_execution = chosen["k"]  # read when fit makes the train function and the iterator
        return anew

    fitting.compile_for_run = with_k
    base = ROOT / "checkpoints" / f"cifar10-{args.member}"
    times: dict[int, list[float]] = {k: [] for k in ks}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        zips = build_zips(tmp, Path(data_dir()))
        ds = job_data(ZIP, str(zips["800"]), None, Limits(), 32)
        from explorer.checkpoints.store import read_card
        known = base_rows(read_card(base).class_names or [], ds.class_names) is not None
        recipe = recipe_for({}, len(ds.x_train), False, known_classes=known)
        steps = -(-int(len(ds.x_train) * (1 - recipe.validation_fraction)) // recipe.batch_size)
        print(f"{base.name} on the 800-image zip: {len(ds.x_train)} training images, {recipe.epochs} epochs of "
              f"batch {recipe.batch_size} (about {steps} steps an epoch), backend {args.backend}", flush=True)
        chosen["k"] = 1  # the process's own first-time costs (imports, the probe's and predict's compiles)
        began = time.perf_counter()
        fine_tune(base, ds, recipe, tmp / "out-warm-up", verbose=0, warm=WarmModels())
        print(f"process warm-up, k=1, not compared: {time.perf_counter() - began:.1f} s", flush=True)
        warm = {k: WarmModels() for k in ks}
        for round_ in range(1 + args.repeats):
            order = ks if round_ % 2 == 0 else ks[::-1]
            for k in order:
                chosen["k"] = k
                began = time.perf_counter()
                result = fine_tune(base, ds, recipe, tmp / f"out-{k}-{round_}", verbose=0, warm=warm[k])
                wall = time.perf_counter() - began
                times[k].append(wall)
                timing = result.training.timing
                print(f"k={k:3d} {'first' if round_ == 0 else 'warm ':5s} {wall:6.1f} s  (first step "
                      f"{timing.first_step_s or 0:5.2f} s, fit {result.training.wall_time_s:6.1f} s) "
                      f"test top-1 {100 * result.metrics.test_top1:.1f} %", flush=True)
    one = times[ks[0]]
    print(f"\nratios to k={ks[0]} (below 1: faster)")
    for k in ks[1:]:
        first = times[k][0] / one[0]
        warm_ratio = sum(times[k][1:]) / max(sum(one[1:]), 1e-9)
        print(f"k={k:3d}: first run {first:.2f}, warm runs {warm_ratio:.2f}")


if __name__ == "__main__":
    main()
