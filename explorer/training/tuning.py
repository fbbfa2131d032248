"""Starting from a trained model: the short fine-tune recipe, `fine_tune` itself (its head chosen by
head.py), and a continued stage of the base's own training."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from explorer.checkpoints.store import load_checkpoint
from explorer.core.card import Card, Epoch, Lineage, Training
from explorer.core.protocol import Phase, PhaseBegun
from explorer.data.batches import training_split
from explorer.data.datasets import Dataset, DatasetError
from explorer.model.config import ViTConfig
from explorer.training.fitting import Cancelled, RunRecord, RunResult, drop_backup, finish_run, fit
from explorer.training.head import choose_head, settle
from explorer.training.recipe import FINE_TUNE, TrainConfig


def fine_tune_recipe(n_images: int, epochs: int | None = None, batch_size: int | None = None,
                     learning_rate: float | None = None, freeze_backbone: bool = False,
                     known_classes: bool = False, **overrides) -> TrainConfig:
    """The default recipe for fine-tuning a checkpoint on `n_images` training images (before the 10 %
    validation split): a head that starts where it can already score (the base's rows, or a linear probe on
    the frozen features; see choose_head), then the whole model with AdamW, warmup + cosine, crop + flip,
    with a batch size scaled to the data so that even a few hundred images give up to FINE_TUNE.target_steps
    steps (FINE_TUNE.image_budget images at most, which keeps about a thousand images near a minute on 2 CPU
    cores), keeping the epoch (step 0 included) that does best on the validation split. `known_classes`: the
    new classes are all base classes (a gentler learning rate). Given values win."""
    validation_fraction = overrides.pop("validation_fraction", 0.1 if n_images >= 20 else 0.0)
    n_fit = max(1, n_images - int(round(n_images * validation_fraction)))
    if batch_size is None:
        batch_size = int(np.clip(2 ** round(math.log2(max(n_fit / 24, 1))), 16, 128))
    batch_size = max(1, min(batch_size, n_fit))
    if epochs is None:
        steps = min(FINE_TUNE.target_steps, FINE_TUNE.image_budget / batch_size)
        epochs = int(np.clip(round(steps / math.ceil(n_fit / batch_size)), 1, 30))
    if learning_rate is None:
        learning_rate = FINE_TUNE.learning_rate_known if known_classes else FINE_TUNE.learning_rate
    return TrainConfig(**{"epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate,
                          "weight_decay": FINE_TUNE.weight_decay, "validation_fraction": validation_fraction,
                          "freeze_backbone": freeze_backbone, "head_init": "auto", "keep_best": True,
                          **overrides})


def fine_tune(base: str | Path, dataset: Dataset, recipe: TrainConfig, out_dir: str | Path,
              name: str | None = None, verbose: int = 1, progress=None, cancel=None,
              backup: str | None = None, extend: bool = False, warm=None) -> RunResult:
    """Continues training a checkpoint on `dataset`; its head is chosen by `choose_head` first.

    With `extend`, this is a second stage of the base's own training rather than a fine-tune: the
    dataset, its held-out split and the class list must be the base's, and the new checkpoint's history,
    epoch count, wall time and throughput cover both stages (see `continued_record`).
    With `warm` (warm.WarmModels), the model comes from (and stays in) that cache, with its compiled steps.
    """
    began = time.perf_counter()
    if warm is not None:
        kept = warm.get(base, dataset.num_classes, recipe.freeze_backbone)
        model, card, base_head, features = kept.model, kept.card, kept.base_head, kept.features
    else:
        (model, card), base_head, features = load_checkpoint(base), None, None
    config = ViTConfig.from_dict(card.config)
    if dataset.x_train.shape[1:3] != (config.image_size, config.image_size):
        raise DatasetError(f"dataset images are {dataset.x_train.shape[1:3]} but the model takes "
                         f"{config.image_size}x{config.image_size}")
    if extend:
        check_continuation(card, dataset, recipe)
    if progress is not None:
        progress(PhaseBegun(Phase.HEAD))
    model, start, choice = choose_head(model, card.class_names or [], dataset, recipe, base_head, features)
    if cancel is not None and cancel.is_set():
        raise Cancelled()
    start_weights = model.get_weights() if choice is not None else None
    record = fit(model, dataset, recipe, verbose=verbose, progress=progress, cancel=cancel, backup=backup,
                 start=start, base={"name": card.name, "created": card.created,
                                    "epochs": len(card.history or []), "continued": extend},
                 reuse=warm is not None)
    if progress is not None:
        progress(PhaseBegun(Phase.EVALUATING))
    if not extend:
        settle(model, record, start_weights, choice, training_split(dataset, recipe)[1])
    record.training.timing.prepare_s = round(time.perf_counter() - began - record.training.wall_time_s, 3)
    lineage = Lineage(name=card.name, source=str(base))
    if extend:
        record = continued_record(card, record)
        lineage.continued, lineage.epochs = True, len(card.history)
    suffix = f"{record.training.epochs}ep" if extend else f"ft-{dataset.name}"
    result = finish_run(model, record, config, card.preset, dataset, out_dir,
                     name or f"{'model' if card.name is None else card.name}-{suffix}", base=lineage,
                     progress=progress)
    drop_backup(backup, record)
    return result


def check_continuation(card: Card, dataset: Dataset, recipe: TrainConfig) -> None:
    """Refuses a continuation that would not be the same training: other data, classes or held-out split.

    The split is a function of the number of images, the validation fraction and the seed, so those must
    match the base's; otherwise images the base validated on would now be trained on.
    """
    base_recipe, data = card.training.recipe or {}, card.dataset
    if not card.history or not base_recipe:
        raise DatasetError(f"{card.name} has no training history or base_recipe to continue")
    problems = []
    if data.name != dataset.name:
        problems.append(f"it was trained on {data.name!r}, not {dataset.name!r}")
    if list(card.class_names or []) != list(dataset.class_names):
        problems.append("its class list differs from the dataset's")
    for key in ("validation_fraction", "seed", "train_subset", "split_seed", "balanced_subset"):
        if base_recipe.get(key) != getattr(recipe, key):
            problems.append(f"its {key} was {base_recipe.get(key)!r}, this run's is {getattr(recipe, key)!r}")
    n = len(dataset.x_train) if not recipe.train_subset else min(recipe.train_subset, len(dataset.x_train))
    if recipe.balanced_subset:
        n = recipe.balanced_subset + int(data.validation_images or 0)
    seen = (data.train_images or 0) + (data.validation_images or 0)
    if seen != n:
        problems.append(f"it saw {seen} train+validation images, this dataset has {n}")
    if recipe.freeze_backbone:
        problems.append("a continuation trains the whole model (drop --freeze-backbone)")
    if problems:
        raise DatasetError(f"cannot continue {card.name}: " + "; ".join(problems)
                         + " (use a plain fine-tune for a different setup)")


def _stage(training: dict) -> dict:
    return {k: training.get(k) for k in ("epochs", "steps", "wall_time_s", "images_per_second", "device",
                                         "recipe")}


def continued_record(base_card: Card, record: RunRecord) -> RunRecord:
    """`record` (a run that continued `base_card`'s training) as one run: the base's history then this
    run's, epochs numbered from the start and tagged with their stage; epochs, steps and wall time
    summed; images/s over the whole; `recipe` stays the first stage's, `stages` lists every stage."""
    before = [dict(e.to_json(), stage=1 if e.stage is None else e.stage) for e in base_card.history or []]
    first = base_card.training
    stages = [s.to_json() for s in first.stages] or [_stage(first.to_json())]
    new = record.training.to_json()
    stages.append(_stage(new))
    history = before + [dict(e.to_json(), epoch=e.epoch + len(before), stage=len(stages)) for e in record.history]
    wall = sum(s.get("wall_time_s") or 0 for s in stages)
    images = sum((s.get("images_per_second") or 0) * (s.get("wall_time_s") or 0) for s in stages)
    devices = list(dict.fromkeys(s.get("device") for s in stages if s.get("device")))
    training = {**new, "epochs": len(history),
                "planned_epochs": sum(s.get("epochs") or 0 for s in stages[:-1]) + new.get("planned_epochs", 0),
                "steps": sum(s.get("steps") or 0 for s in stages),
                "wall_time_s": round(wall, 1),
                "images_per_second": round(images / wall, 1) if wall > 0 else None,
                "device": "; ".join(devices), "recipe": stages[0]["recipe"], "stages": stages}
    return RunRecord([Epoch.from_json(e) for e in history], record.metrics, Training.from_json(training),
                     record.stopped_by)
