"""How long a fine-tune takes through the runner, as the Fine-tune tab starts it, and where the time goes.

For each worker backend (TensorFlow, and JAX when installed) a new FineTuneRunner (as the app makes at start)
runs, in order: a tiny pair job (2 classes x 12 images, 1 epoch, all trained on) cold, then the same job
again (warm: the worker, its models and their compiled steps reused), then the default recipe on an
800-image zip of five CIFAR-10 classes (the issue's job), then that again. For JAX, a second runner (the app
restarted) then runs the tiny job and the 800-image job once each with the compilation cache the first one
left on disk. The reference is the worker as it was before it lived across runs: one process per job
(`python -m explorer.finetune JOB_DIR`, TensorFlow), the tiny job and the 800-image job once each.

Each run prints its wall time (Start to the checkpoints in place) and its phases: `start` (the worker process
and its imports, when a run starts one), per model `prepare` (load, head, linear probe), `first step` (with
tracing/compiling when new), `steps` (all steps), `validation`, and `report` (test predictions, checkpoint),
and what the run compiled anew. The host's training speed (bench/train_throughput.py's loop, one round) comes
first, and the targets are scaled by 568 / that speed.

    python bench/finetune_speed.py [--backends tensorflow,jax] [--skip-reference] [--no-host]
    python bench/finetune_speed.py --write-data devdata     # the test images it uses, for a lent GPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import ROOT, data_dir
from explorer.finetune.state import RunStatus
from finetune_quality import _pixels, _unpickle, _write_zip

PAIR = ("cifar10-vanilla", "cifar10-spt_lsa")
FIVE = ("cat", "deer", "dog", "frog", "horse")


def _chosen(y: np.ndarray, names: list[str]) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """Each zip's classes and test images: tiny, cat and dog, 12 each; 800, 160 of each of five classes."""
    return {key: (classes, np.concatenate([np.flatnonzero(y == names.index(c))[:count] for c in classes]))
            for key, classes, count in (("tiny", ("cat", "dog"), 12), ("800", FIVE, 160))}


def build_zips(folder: Path, data: Path) -> dict[str, Path]:
    """tiny: cat and dog, 12 test images each; 800: 160 test images of each of five classes."""
    test = _unpickle(data / "cifar-10-batches-py" / "test_batch")
    names = [n.decode() for n in _unpickle(data / "cifar-10-batches-py" / "batches.meta")[b"label_names"]]
    x, y = _pixels(test), np.asarray(test[b"labels"])
    zips = {}
    for key, (classes, keep) in _chosen(y, names).items():
        labels = np.asarray([classes.index(names[i]) for i in y[keep]])
        zips[key] = _write_zip(folder / f"{key}.zip", x[keep], labels, list(classes))
    return zips


def write_data(folder: Path, data: Path) -> int:
    """A CIFAR-10 folder (pickle layout) holding only the test images build_zips takes from `data`, in their
    order, so that build_zips on it makes the same zips: for a machine that takes few MiB (a lent GPU's)."""
    import pickle
    test = _unpickle(data / "cifar-10-batches-py" / "test_batch")
    meta = _unpickle(data / "cifar-10-batches-py" / "batches.meta")
    names = [n.decode() for n in meta[b"label_names"]]
    y = np.asarray(test[b"labels"])
    keep = sorted({int(i) for _, chosen in _chosen(y, names).values() for i in chosen})
    out = folder / "cifar-10-batches-py"
    out.mkdir(parents=True, exist_ok=True)
    small = {b"batch_label": test.get(b"batch_label", b"testing batch 1 of 1"), b"labels": y[keep].tolist(),
             b"data": np.asarray(test[b"data"])[keep], b"filenames": [test[b"filenames"][i] for i in keep]}
    with open(out / "test_batch", "wb") as f:
        pickle.dump(small, f)
    with open(out / "batches.meta", "wb") as f:
        pickle.dump(meta, f)
    return len(keep)


def plan_for(zip_path: Path, tiny: bool):
    from explorer.checkpoints.store import read_card
    from explorer.finetune.plan import ZIP, Base, Limits, job_data, plan_job
    members = [Base(tag, f"{tag}: {ref}", str(ROOT / "checkpoints" / ref), read_card(ROOT / "checkpoints" / ref))
               for tag, ref in zip("AB", PAIR, strict=True)]
    dataset = job_data(ZIP, str(zip_path), None, Limits(), 32, train_on_all=tiny)
    return plan_job(members, dataset, epochs=1 if tiny else None, train_on_all=tiny)


def phases(members) -> dict:
    """Sums over the members of a finished run: prepare, first step, steps, validation, report."""
    out = dict.fromkeys(("prepare", "first step", "steps", "validation", "report"), 0.0)
    compiled = 0
    for m in members:
        t = m.training.to_json() if m.training else {}
        timing = t.get("timing") or {}
        fit = float(t.get("wall_time_s") or 0.0)
        total = float(m.seconds or 0.0)
        out["first step"] += timing.get("first_step_s", 0.0)
        out["steps"] += timing.get("steps_s", 0.0) - timing.get("first_step_s", 0.0)
        out["validation"] += timing.get("validation_s", 0.0)
        prepare = timing.get("prepare_s", 0.0)
        out["prepare"] += prepare
        out["report"] += max(total - fit - prepare, 0.0)
        compiled += int(bool(timing.get("compiled")))
    out["compiled"] = compiled
    return out


def run_once(runner, plan, label: str) -> float:
    started_workers = runner.supervisor.started
    began = time.time()
    runner.start(plan)
    runner.wait(1800)
    wall = time.time() - began
    s = runner.snapshot()
    if s.status != RunStatus.DONE:
        raise SystemExit(f"{label}: the run ended {s.status}: {s.error}")
    p = phases(s.members)
    new_worker = runner.supervisor.started > started_workers
    start = s.ready_at - began if s.ready_at else 0.0
    top1 = " / ".join(f"{100 * m.metrics.test_top1:.1f}" for m in s.members
                      if m.metrics and m.metrics.test_top1 is not None)
    print(f"{label:44s} {wall:6.1f} s | start {start:5.1f}{' (new worker)' if new_worker else '':13s} "
          f"prepare {p['prepare']:5.1f}  first step {p['first step']:5.1f}  steps {p['steps']:5.1f}  "
          f"validation {p['validation']:4.1f}  report {p['report']:4.1f} | compiled anew: {p['compiled']} of "
          f"{len(s.members)} | {s.device} | test top-1 {top1 or '-'} %", flush=True)
    return wall


def reference(plan, label: str, env: dict) -> float:
    """The worker as it was: a process per job, on TensorFlow."""
    from explorer.finetune.jobfolder import write_job
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job"
        write_job(plan, job)
        began = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "explorer.finetune", str(job)], cwd=ROOT, capture_output=True,
                              env={**env, "KERAS_BACKEND": "tensorflow"}, text=True)
        wall = time.perf_counter() - began
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if not any(e.get("kind") == "done" for e in events):
            raise SystemExit(f"{label}: {proc.stderr[-2000:]}")
    print(f"{label:44s} {wall:6.1f} s", flush=True)
    return wall


def parallel(backend: str) -> None:
    """The 800-image pair, warm: one worker training the two models one after the other, against two workers
    (one model each) training at the same time; each measured twice after a first run that warms them."""
    import threading

    from explorer.finetune.runner import FineTuneRunner
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        zips = build_zips(tmp, Path(data_dir()))
        pair = plan_for(zips["800"], False)
        alone = []
        for i in range(2):
            plan = plan_for(zips["800"], False)
            plan.members = [plan.members[i]]
            alone.append(plan)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_WORKER_PRIORITY": "normal",
               "EXPLORER_TRAIN_BACKEND": backend}
        one = FineTuneRunner(tmp / "one", environ=env, compile_cache=tmp / "cache")
        two = [FineTuneRunner(tmp / f"two{i}", environ=env, compile_cache=tmp / "cache") for i in range(2)]
        try:
            run_once(one, pair, f"{backend}: one worker, the pair (warming)")
            for runner, plan in zip(two, alone, strict=True):
                run_once(runner, plan, f"{backend}: a worker per model (warming)")
            for round_ in (1, 2):
                sequential = run_once(one, pair, f"{backend}: one worker, one model after the other, round {round_}")
                began = time.time()
                threads = [threading.Thread(target=lambda r=r, p=p: (r.start(p), r.wait(1800)))
                           for r, p in zip(two, alone, strict=True)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                both = time.time() - began
                print(f"{backend}: a worker per model, both at once, round {round_}: {both:.1f} s; "
                      f"parallel / sequential {both / sequential:.2f}", flush=True)
        finally:
            for runner in (one, *two):
                runner.shutdown()


def host_speed() -> float:
    """Training images/s of our loop on this host (bench/train_throughput.py, one round, our loop only)."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "train_throughput.py"), "--rounds", "1"], cwd=ROOT,
                         capture_output=True, text=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("our loop"))
    return float(line.split(":")[1].split()[0])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default="tensorflow,jax")
    p.add_argument("--skip-reference", action="store_true")
    p.add_argument("--no-host", action="store_true", help="skip measuring the host's training speed")
    p.add_argument("--parallel-only", action="store_true",
                   help="only the parallel measurement: the 800-image pair in one worker, one model after the "
                        "other, against each model in a worker of its own, both at once (all warm)")
    p.add_argument("--write-data", metavar="DIR",
                   help="only write DIR/cifar-10-batches-py with the test images the zips take (2.4 MiB), for "
                        "EXPLORER_DATA_DIR on a machine without the CIFAR folder (tools/gpu_session.sh's devdata)")
    args = p.parse_args()
    if args.write_data:
        print(f"wrote {write_data(Path(args.write_data), Path(data_dir()))} test images into {args.write_data}")
        return None
    speed = None if args.no_host else host_speed()
    scale = 568.0 / speed if speed else 1.0
    if speed:
        print(f"host: our training loop at {speed:.0f} images/s; targets scaled by 568 / {speed:.0f} = {scale:.2f}: "
              f"tiny pair cold <= {15 * scale:.1f} s, warm <= {5 * scale:.1f} s; 800-image pair <= {35 * scale:.1f} s")
    from explorer.finetune.runner import FineTuneRunner
    if args.parallel_only:
        return parallel(args.backends.split(",")[-1])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        zips = build_zips(tmp, Path(data_dir()))
        tiny, default = plan_for(zips["tiny"], True), plan_for(zips["800"], False)
        print(f"tiny: {tiny.description}\n800: {default.description}", flush=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_WORKER_PRIORITY": "normal"}
        if not args.skip_reference:
            results["reference tiny"] = reference(tiny, "one process per job (TF): tiny pair", env)
            results["reference 800"] = reference(default, "one process per job (TF): 800-image pair", env)
        for backend in args.backends.split(","):
            cache = tmp / f"compile-cache-{backend}"
            for restart in ((False, True) if backend == "jax" else (False,)):
                runner = FineTuneRunner(tmp / f"out-{backend}", environ={**env, "EXPLORER_TRAIN_BACKEND": backend},
                                        compile_cache=cache)
                name = f"{backend}{' (restarted, cache on disk)' if restart else ''}"
                results[f"{name} tiny cold"] = run_once(runner, tiny, f"{name}: tiny pair, first")
                if not restart:
                    results[f"{name} tiny warm"] = run_once(runner, tiny, f"{name}: tiny pair, again")
                results[f"{name} 800 first"] = run_once(runner, default, f"{name}: 800-image pair, first")
                if not restart:
                    results[f"{name} 800 again"] = run_once(runner, default, f"{name}: 800-image pair, again")
                runner.shutdown()
        if "jax" in args.backends and "tensorflow" in args.backends:
            for key in ("tiny cold", "tiny warm", "800 first", "800 again"):
                print(f"jax / tensorflow, {key}: {results[f'jax {key}'] / results[f'tensorflow {key}']:.2f}")
        if not args.skip_reference:
            for backend in args.backends.split(","):
                print(f"{backend} warm worker / one process per job: tiny cold "
                      f"{results[f'{backend} tiny cold'] / results['reference tiny']:.2f}, tiny warm "
                      f"{results[f'{backend} tiny warm'] / results['reference tiny']:.2f}, 800 first "
                      f"{results[f'{backend} 800 first'] / results['reference 800']:.2f}")
    print(json.dumps({k: round(v, 2) for k, v in results.items()}))


if __name__ == "__main__":
    main()
