"""The training functions the command line (explorer.train) and the fine-tune jobs (explorer.finetune.job)
call, and the one choice of a run's recipe: a new model trained (train_new), a checkpoint fine-tuned
(explorer.training.tuning.fine_tune), and which recipe a model's run gets from the data and its base's classes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import keras

from explorer.data.datasets import Dataset
from explorer.model.config import ViTConfig
from explorer.model.models import build_vit, float32_copy
from explorer.training.fitting import RunResult, drop_backup, finish_run, fit
from explorer.training.head import base_rows
from explorer.training.recipe import TrainConfig
from explorer.training.tuning import fine_tune, fine_tune_recipe

__all__ = ["fine_tune", "knows_classes", "recipe_for", "train_new"]


def train_new(config: ViTConfig, preset: str, dataset: Dataset, recipe: TrainConfig, out_dir: str | Path,
              name: str | None = None, verbose: int = 1, progress=None, cancel=None,
              backup: str | None = None) -> RunResult:
    """Builds a fresh model, trains it, evaluates on the test split and writes a checkpoint (a float32 model,
    whatever precision it trained at). A run stopped by the recipe's time limit writes none: its backup holds
    where it got to, and the same call resumes from it."""
    keras.utils.set_random_seed(recipe.seed)
    model = build_vit(config, dataset.num_classes, precision=recipe.precision)
    record = fit(model, dataset, recipe, verbose=verbose, progress=progress, cancel=cancel, backup=backup,
                 base={"preset": preset})
    if record.stopped_by == "time_limit":
        return RunResult(None, record.metrics, record.history, record.training,
                         backup=str(backup) if backup else None, stopped_by="time_limit")
    model = float32_copy(model, config, dataset.num_classes)
    result = finish_run(model, record, config, preset, dataset, out_dir,
                     name or f"{dataset.name}-{config.variant}", base=None, progress=progress)
    drop_backup(backup, record)
    return result


def knows_classes(base_classes: list[str] | None, class_names: list[str]) -> bool:
    """Whether a base's own classifier rows can start the head: every class of the data is one of the base's
    (the fine-tune recipe then starts from them, at its lower learning rate)."""
    return base_rows(list(base_classes or []), class_names) is not None


def recipe_for(plan_recipe: dict, n_images: int, scratch: bool, known_classes: bool = False):
    """The TrainConfig of a job's member: the default fine-tune recipe (or, for a new model, the keras.io
    recipe with as many steps) with the request's values on top. `known_classes`: the job's classes are all
    classes of the member's base."""
    given = {k: v for k, v in plan_recipe.items() if v is not None}
    if scratch:
        given.pop("freeze_backbone", None)
        steps = fine_tune_recipe(n_images, **given)  # the same number of steps and batch size
        return dataclasses.replace(steps, learning_rate=given.get("learning_rate", TrainConfig.learning_rate),
                                   weight_decay=TrainConfig.weight_decay, keep_best=False)
    return fine_tune_recipe(n_images, known_classes=known_classes, **given)
