"""One job in the worker process: each member of the plan trained in turn (a base fine-tuned, or a new
model trained), its progress reported as events; the warm-up that compiles a job's steps before anyone
asks; and the measure of this machine's pace at a run of a base (explorer.finetune.estimate reads it)."""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import keras
import numpy as np

from explorer.checkpoints.store import read_card
from explorer.core.devices import device_name
from explorer.core.protocol import (
    Done,
    Measured,
    MemberDone,
    MemberEvent,
    MemberRecipe,
    MemberStarted,
    Shape,
    Started,
)
from explorer.data.batches import training_split
from explorer.data.datasets import Dataset
from explorer.finetune.jobfolder import read_job, staging
from explorer.model.config import get_preset
from explorer.training.fitting import Cancelled
from explorer.training.head import pooled_features
from explorer.training.runs import fine_tune, knows_classes, recipe_for, train_new


def run_job(job_dir: Path, emit, warm=None, cancel=None) -> None:
    """Trains every member of the job in `job_dir` in turn, writing checkpoints to its staging folder and
    reporting each step through `emit(event)` (an event of protocol.py). `warm` (warm.WarmModels): a
    long-lived worker's models, reused with their compiled steps; `cancel` (a threading.Event) stops the job
    at the next step."""
    plan = read_job(job_dir)
    ds = plan.dataset
    emit(Started(device_name(), keras.backend.backend()))
    out = staging(job_dir)
    for i, m in enumerate(plan.members):
        def progress(event: MemberEvent, i=i) -> None:
            emit(replace(event, member=i))

        if cancel is not None and cancel.is_set():
            raise Cancelled()
        began = time.perf_counter()
        recipe = recipe_for(plan.recipe, len(ds.x_train), plan.scratch,
                            known_classes=knows_classes(m.classes, ds.class_names))
        emit(MemberStarted(MemberRecipe(recipe.epochs, recipe.batch_size, recipe.learning_rate, recipe.weight_decay,
                                        recipe.freeze_backbone), member=i))
        if m.base is None:
            config = get_preset(m.preset, variant=m.variant)
            result = train_new(config, m.preset, ds, recipe, out, m.name, verbose=0, progress=progress,
                               cancel=cancel)
        else:
            result = fine_tune(m.base, ds, recipe, out, m.name, verbose=0, progress=progress, cancel=cancel,
                               warm=warm)
        emit(MemberDone(Path(result.checkpoint).name, result.metrics, result.training, result.test_predictions,
                        round(time.perf_counter() - began, 3), member=i))
    emit(Done())


def warm_up(warm, bases: list[str], shapes: list[Shape]) -> None:
    """Compiles, before anyone asks, what a fine-tune of each of `bases` at each of `shapes` (number of
    classes, images) will run: a one-epoch run on random images, whose result is thrown away. On JAX with the
    compilation cache this loads from disk what an earlier process compiled."""
    for base in bases:
        card = read_card(base)
        size = int((card.config or {}).get("image_size", 32))
        for shape in shapes:
            n, classes = shape.images, shape.classes
            y = np.arange(n) % classes
            x = np.random.default_rng(0).integers(0, 255, (n, size, size, 3), dtype=np.uint8)
            ds = Dataset("warm-up", x, y, x[:max(1, n // 5)], y[:max(1, n // 5)], [f"c{i}" for i in range(classes)])
            recipe = recipe_for({"epochs": 1}, n, False)
            with tempfile.TemporaryDirectory() as out:
                fine_tune(base, ds, recipe, out, "warm-up", verbose=0, warm=warm)


# A measure's steps: the first holds the compile, the others give the pace of a step.
MEASURED_STEPS = 6


def measure(warm, base: str, classes: int, batch: int, frozen: bool = False) -> Measured:
    """A run of `base` as a job of `classes` classes at `batch` images a step would make it, cut to
    MEASURED_STEPS steps on random images: what it compiles stays compiled in `warm` for the run that follows,
    and its record says where the time went (explorer.finetune.estimate.Pace.from_run reads it)."""
    card = read_card(base)
    size = int((card.config or {}).get("image_size", 32))
    n = math.ceil(batch * MEASURED_STEPS / 0.9) + 1  # MEASURED_STEPS batches after the recipe's 10 % validation
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (n, size, size, 3), dtype=np.uint8)
    y = np.arange(n) % classes
    tests = max(1, batch)
    ds = Dataset("measure", x, y, x[:tests], y[:tests], [f"c{i}" for i in range(classes)])
    recipe = recipe_for({"epochs": 1, "batch_size": batch, "freeze_backbone": frozen}, n, False)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = fine_tune(base, ds, recipe, out, "measure", verbose=0, warm=warm)
    seconds = round(time.perf_counter() - began, 3)
    # A forward pass's pace, compiled: the run's validation held the compiling of its step (a run's later
    # epochs do not), so the head's own pass (its images and their mirror images) is timed again.
    kept = warm.get(base, classes, frozen)
    (fit, _), _ = training_split(ds, recipe)
    both = np.concatenate([fit, fit[:, :, ::-1]])
    began = time.perf_counter()
    pooled_features(kept.model, both, features=kept.features)
    forward = (time.perf_counter() - began) / len(both)
    return Measured(base, seconds, result.training, len(result.test_predictions), forward_s=round(forward, 6))
