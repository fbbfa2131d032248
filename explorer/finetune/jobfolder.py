"""The job folder, the one thing the app and its worker process share on disk: the app writes the plan
(job.json) and its split images (data.npz) into a hidden folder under the runner's folder
(checkpoints/finetuned); the worker reads them and writes each member's checkpoint under staging/; once the
whole job has succeeded the app moves them into place, all or nothing, and the folder goes. A folder left by
a process that died is removed by the next run (atomic.clean_stale: its name starts with .tmp-)."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from explorer.checkpoints.held_out import write_held_out
from explorer.checkpoints.store import unique_dir, update_card
from explorer.finetune.plan import Plan


def new_job_dir(out_dir: Path) -> Path:
    """A name for a new job's folder under `out_dir` (not created)."""
    return Path(out_dir) / f".tmp-{os.getpid()}-job-{uuid.uuid4().hex[:8]}"


def staging(job_dir: Path) -> Path:
    """Where the worker writes the job's checkpoints."""
    return Path(job_dir) / "staging"


def write_job(plan: Plan, job_dir: Path) -> None:
    job_dir.mkdir(parents=True)
    ds = plan.dataset
    np.savez(job_dir / "data.npz", x_train=ds.x_train, y_train=ds.y_train, x_test=ds.x_test, y_test=ds.y_test)
    (job_dir / "job.json").write_text(json.dumps(plan.to_json(), indent=1))


def read_job(job_dir: Path) -> Plan:
    """The plan write_job wrote into `job_dir`, its images read back."""
    with np.load(job_dir / "data.npz") as data:
        return Plan.from_json(json.loads((job_dir / "job.json").read_text()), dict(data))


def publish(job_dir: Path, folders: list[str | None], out: Path) -> list[Path]:
    """Moves each staged checkpoint of `folders` into `out` (a new name if the planned one is taken, its
    card renamed with it), each with the job's held-out images (explorer.checkpoints.held_out); all or
    nothing. Returns where they went."""
    if None in folders:
        raise RuntimeError("the training process ended without writing every checkpoint")
    ds = read_job(job_dir).dataset
    moved = []
    out.mkdir(parents=True, exist_ok=True)
    try:
        for folder in folders:
            write_held_out(staging(job_dir) / folder, ds.x_test, ds.y_test, ds.class_names, ds.name)
            target = unique_dir(out, folder)
            os.rename(staging(job_dir) / folder, target)
            moved.append(target)
            if target.name != folder:
                update_card(target, name=target.name)
    except BaseException:
        for target in moved:
            shutil.rmtree(target, ignore_errors=True)
        raise
    return moved
