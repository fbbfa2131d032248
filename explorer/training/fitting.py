"""The training loop: `fit` trains a model in place with a recipe (explorer.training.recipe) on its batches
(explorer.data.batches), on the devices of explorer.core.devices; its recorder keeps the run's history and state
(explorer.training.fit_state), stops it at a cancel or the recipe's limits and reports progress; a backup
(explorer.training.backup) lets a killed run resume. `finish_run` writes a finished run's checkpoint.
explorer.train starts new models with it, explorer.finetune continues or fine-tunes trained ones.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import keras
import numpy as np

from explorer.checkpoints.store import unique_dir, write_checkpoint
from explorer.core.card import Card, Data, Epoch, Lineage, Metrics, Start, Training
from explorer.core.devices import check_batch_split, data_parallel_devices, device_name
from explorer.core.protocol import BatchEnd, EpochEnd, MemberEvent, Phase, PhaseBegun
from explorer.data.batches import make_batches, training_split
from explorer.data.datasets import Dataset
from explorer.data.device_batches import on_device
from explorer.data.step_augment import Reseed, augmentation_block, with_augmentation
from explorer.model.layers import DropPath
from explorer.model.models import tau_values
from explorer.model.predict import accuracy_metrics, predict_logits
from explorer.training import backup as backups
from explorer.training.backup import remove
from explorer.training.fit_state import BestEpoch, FitState
from explorer.training.recipe import TrainConfig, compile_for_run

# Progress (a batch event) at most this often: each report waits for the device to finish its step.
PROGRESS_EVERY_S = 0.25


class Cancelled(Exception):
    """The run was cancelled; nothing was saved. Raised without a message, it says so in the one wording
    every place that cancels uses."""

    MESSAGE = "training was cancelled; no checkpoint was written"

    def __init__(self, message: str = MESSAGE):
        super().__init__(message)


class Recorder(keras.callbacks.Callback):
    """Records a run into its history and state: its steps and where the time went, every epoch's record
    (learning rate, metrics, tau), the best epoch; stops the run at a cancel or the recipe's limits; reports
    batch and epoch events to `progress`.

    Args:
        target: the model trained (the callback's own `model` may wrap it with in-step augmentation).
        recipe: the run's TrainConfig.
        history: the run's epoch records, appended to.
        state: the run's FitState, updated in place.
        batches: the training PyDataset (explorer.data.batches or explorer.data.device_batches).
        validation: the validation batches, or None.
        progress: called with every event (protocol.BatchEnd, EpochEnd), or None.
        cancel: set to stop the run after its current step, or None.
    """

    def __init__(self, target, recipe: TrainConfig, history: list, state: FitState, batches, validation,
                 progress: Callable[[MemberEvent], None] | None, cancel: threading.Event | None):
        super().__init__()
        self.target, self.recipe, self.history, self.state = target, recipe, history, state
        self.batches, self.validation, self.progress, self.cancel = batches, validation, progress, cancel

    def on_train_begin(self, logs=None):
        self.batches.begin(0)
        self.state.start = time.perf_counter()
        self.state.epoch_start = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self.state.epoch_start = time.perf_counter()
        self.state.current_epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        state = self.state
        state.steps += self.batches.steps_in(batch)
        now = time.perf_counter()
        elapsed = now - state.start
        if state.first_step_s is None:  # includes tracing and compiling the step when it is new
            state.first_step_s = now - state.epoch_start
            state.first_step_epoch = state.current_epoch
        state.last_batch_end = now
        self._stop_at_limits(elapsed)
        # Reading the loss waits for the device to finish the step: at most every PROGRESS_EVERY_S, and
        # at an epoch's last step, so the steps between run without a sync.
        if self.progress is not None and (elapsed - state.reported >= PROGRESS_EVERY_S
                                          or batch + 1 == len(self.batches) or self.model.stop_training):
            state.reported = elapsed
            self.progress(BatchEnd(state.steps, self.batches.steps * self.recipe.epochs, state.epoch,
                                   float((logs or {}).get("loss", float("nan"))), elapsed))

    def _stop_at_limits(self, elapsed: float) -> None:
        """Stops training after this step at a cancel, or at the recipe's step or time limits."""
        state, recipe = self.state, self.recipe
        if self.cancel is not None and self.cancel.is_set():
            state.cancelled = True
            self.model.stop_training = True
        for stopped_by, reached in (("max_steps", recipe.max_steps and state.steps >= recipe.max_steps),
                                    ("max_seconds", recipe.max_seconds and elapsed >= recipe.max_seconds),
                                    ("time_limit", recipe.time_limit and elapsed >= recipe.time_limit)):
            if reached:
                state.stopped_by = stopped_by
                self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        state = self.state
        state.steps_s = state.steps_s + self._last_batch_end() - state.epoch_start
        logs = dict(logs or {})
        self._stop_before_an_epoch_too_long(epoch, time.perf_counter())
        last = epoch + 1 == self.recipe.epochs or self.model.stop_training
        if self.validation is not None and last and "val_top1" not in logs and not state.cancelled:
            # The last epoch fell between validations (or a step or time limit ends the run here): the
            # weights a run ends with are always validated.
            logs.update({f"val_{k}": v for k, v in
                         self.model.evaluate(self.validation, verbose=0, return_dict=True).items()})
        state.epoch = epoch + 1
        record = {"epoch": epoch + 1,
                  "time_s": round(time.perf_counter() - state.epoch_start, 2),
                  "learning_rate": float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)),
                  **{k: float(v) for k, v in logs.items() if k != "learning_rate"},
                  "tau": tau_values(self.target)}
        self.history.append(record)
        state.validation_s = state.validation_s + time.perf_counter() - self._last_batch_end()
        if self.recipe.keep_best and "val_top1" in record and (state.best is None or state.best.beaten_by(record)):
            state.best = BestEpoch(epoch + 1, record["val_top1"], record.get("val_loss"), self.target.get_weights())
        if self.progress is not None:
            self.progress(EpochEnd(Epoch.from_json(record)))

    def _last_batch_end(self) -> float:
        state = self.state
        return state.last_batch_end if state.last_batch_end is not None else state.epoch_start

    def _stop_before_an_epoch_too_long(self, epoch: int, now: float) -> None:
        """With a time limit, stops at this epoch's end when another epoch (as long as this one, without the
        compiling of a first step) would not fit; the backup keeps this one."""
        state, recipe = self.state, self.recipe
        spent = now - state.epoch_start - (state.first_step_s if state.first_step_epoch == epoch else 0.0)
        if recipe.time_limit and epoch + 1 < recipe.epochs and not self.model.stop_training and \
                now - state.start + spent > recipe.time_limit:
            state.stopped_by = "time_limit"
            self.model.stop_training = True


def fit(model, dataset: Dataset, recipe: TrainConfig, verbose: int = 1,
        progress: Callable[[MemberEvent], None] | None = None, cancel: threading.Event | None = None,
        backup: str | os.PathLike | None = None, start: Start | None = None, base: dict | None = None,
        reuse: bool = False) -> RunRecord:
    """Trains `model` in place on `dataset` with the recipe; returns the run's record (no saving).

    With `reuse` (a worker that keeps models between runs), the model's compiled steps from an earlier run of
    the same shape are used again (see compile_for_run), and the validation batch is padded to a multiple of
    64 images, so that zips of similar size share it too.

    `start` (metrics of the model before any step, see choose_head) is reported as epoch 0. With a
    `backup` folder, the state after every epoch is kept there (explorer.training.backup): a run killed at any
    moment and started again with the same arguments resumes from its last completed epoch and ends
    as if it had never stopped; a backup of another run (`base`, the recipe, data or model differ) is
    refused with the reason."""
    _seed_run(recipe.seed, reuse)
    (x_train, y_train), val = training_split(dataset, recipe)
    batch_size = min(recipe.batch_size, len(x_train))
    devices = data_parallel_devices()
    check_batch_split(batch_size, devices)
    trainee, block, train_batches, val_batches = _run_batches(model, recipe, (x_train, y_train), val,
                                                              dataset.num_classes, batch_size, devices, reuse)
    total_steps = train_batches.steps * recipe.epochs
    if recipe.max_steps:
        total_steps = min(total_steps, recipe.max_steps)
    compiled = compile_for_run(trainee, recipe, dataset.num_classes, total_steps, reuse)
    history: list[dict] = []
    state = FitState()
    if backup:
        _check_backup(backup, model, dataset, recipe, base)
    if recipe.keep_best and start is not None and start.val_top1 is not None:
        # Step 0 competes too: a run that never beats the head it started from keeps that head.
        state.best = BestEpoch(0, start.val_top1, None, model.get_weights())
    callbacks = _run_callbacks(model, trainee, block, recipe, history, state, train_batches, val_batches,
                               progress, cancel, backup)
    if progress is not None:
        if start is not None:
            progress(EpochEnd(Epoch.from_json({"epoch": 0, **start.to_json()})))
        progress(PhaseBegun(Phase.COMPILING))  # until the first batch's event
    began = time.perf_counter()
    # shuffle=False: the batches shuffle themselves, by (seed, epoch), not by Python's global random state.
    trainee.fit(train_batches, validation_data=val_batches, epochs=recipe.epochs, verbose=verbose, shuffle=False,
                callbacks=callbacks, validation_freq=recipe.validation_every)
    wall = time.perf_counter() - began + state.wall_before
    if state.cancelled or (cancel is not None and cancel.is_set()):
        raise Cancelled()
    kept, metrics = _keep_best(model, history, state, start)
    training = _training_summary(recipe, history, state, start, kept, wall, compiled, batch_size=batch_size,
                                 train_images=len(x_train), validation_images=len(val[0]) if val is not None else 0,
                                 devices=devices)
    return RunRecord([Epoch.from_json(e) for e in history], Metrics.from_json(metrics), Training.from_json(training),
                     state.stopped_by)


def _run_batches(model, recipe: TrainConfig, train, val, num_classes: int, batch_size: int, devices: int,
                 reuse: bool) -> tuple:
    """(what is fitted, the in-step augmentation block or None, the training batches, the validation batches
    or None): on the device with the fast path (recipe.device_data), else numpy batches from the host."""
    if recipe.device_data:
        return on_device(model, _step_augmentation(recipe), train, val, num_classes, batch_size, recipe,
                         _validation_size(len(val[0]), devices, reuse) if val is not None else 0)
    train_batches = make_batches(train[0], train[1], num_classes, batch_size, recipe.augment, recipe.seed,
                                 True, recipe.mixup_alpha, recipe.cutmix_alpha, recipe.mix_prob, recipe.repeats)
    val_batches = _validation_batches(val, num_classes, recipe.seed, devices, reuse)
    trainee, block = _with_step_augmentation(model, recipe)
    return trainee, block, train_batches, val_batches


def _seed_run(seed: int, reuse: bool) -> None:
    """Seeds what a run draws from outside its own (seed, epoch, index) streams."""
    if reuse:
        # Not keras.utils.set_random_seed: on TensorFlow it calls tf.random.set_seed, which clears the
        # eager context's caches, and every compiled function then takes seconds to set up again (measured:
        # 4 s of a 5 s warm run). Batches and augmentation draw from their own (seed, epoch, index) streams,
        # and Keras' layers from their own seed generators, so Python's and NumPy's seeds are all that is left.
        random.seed(seed)
        np.random.seed(seed)
    else:
        keras.utils.set_random_seed(seed)


def _validation_batches(val, num_classes: int, seed: int, devices: int, reuse: bool):
    """The held-out images' batches, or None without a validation split.

    One validation batch when it fits (exact weighted loss, one compiled shape), else padded batches; padded
    to a size every device gets an equal share of."""
    if val is None:
        return None
    return make_batches(val[0], val[1], num_classes, _validation_size(len(val[0]), devices, reuse), False, seed,
                        False)


def _validation_size(n: int, devices: int, reuse: bool) -> int:
    step = 64 if reuse else 1
    size = -(-n // step) * step if n <= 2048 else 512
    return -(-size // devices) * devices


def _with_step_augmentation(model, recipe: TrainConfig):
    """(what is fitted, the in-step augmentation block or None): the model itself, or the model behind the
    recipe's RandAugment / random erasing block, which trains the model's own weights."""
    block = _step_augmentation(recipe)
    if block is None:
        return model, None
    return with_augmentation(model, block), block


def _step_augmentation(recipe: TrainConfig):
    if not (recipe.randaugment or recipe.random_erasing or recipe.autoaugment):
        return None
    return augmentation_block(recipe.randaugment, recipe.random_erasing, autoaugment=recipe.autoaugment)


def _check_backup(backup, model, dataset: Dataset, recipe: TrainConfig, base: dict | None) -> None:
    """Refuses another run's backup; says how far a backup of this run got."""
    done = backups.check(backup, backups.run_identity(model, dataset, recipe, base))
    if done:
        print(f"resuming from backup {backup}: {done} of {recipe.epochs} epochs done", flush=True)


def _run_callbacks(model, trainee, block, recipe: TrainConfig, history: list, state: FitState, train_batches,
                   val_batches, progress: Callable[[MemberEvent], None] | None, cancel: threading.Event | None,
                   backup) -> list:
    """The run's callbacks in their order: the reseeding of in-step draws, the recorder, the backup."""
    callbacks = [Recorder(model, recipe, history, state, train_batches, val_batches, progress, cancel)]
    if block is not None or any(isinstance(layer, DropPath) for layer in model.layers):
        callbacks.insert(0, Reseed(trainee, recipe.seed))  # the step's draws a function of (seed, epoch, step)
    if backup:
        # After the recorder: an epoch is saved once its record is in the history.
        callbacks.append(backups.TrainingBackup(backup, train_batches, history, state))
    return callbacks


def _keep_best(model, history: list, state: FitState, start: Start | None) -> tuple[int, dict]:
    """(the epoch the run ends with, its metrics): with keep_best, the best epoch's weights are put back."""
    best = state.best
    kept = len(history)
    if best is not None and best.epoch != len(history):
        model.set_weights(best.weights)
        kept = best.epoch
    metrics = {}
    if history:
        last = history[kept - 1] if kept >= 1 else start.to_json() if start is not None else {}
        metrics.update({k: last[k] for k in ("top1", "top5", "loss") if k in last})
        metrics.update({k: last[k] for k in ("val_top1", "val_top5", "val_loss") if k in last})
    return kept, metrics


def _training_summary(recipe: TrainConfig, history: list, state: FitState, start: Start | None, kept: int,
                      wall: float, compiled: bool, *, batch_size: int, train_images: int, validation_images: int,
                      devices: int) -> dict:
    """The record's "training": what ran, on what, and where the time went."""
    images_seen = state.steps * batch_size
    return {"epochs": len(history), "planned_epochs": recipe.epochs, "steps": state.steps,
            "wall_time_s": round(wall, 1),
            "images_per_second": round(images_seen / wall, 1) if wall > 0 else None,
            "train_images": int(train_images), "batch_size": batch_size,
            "start": start.to_json() if start is not None else None, "kept_epoch": kept,
            "validation_images": int(validation_images),
            "device": device_name() if devices == 1 else f"{devices} × {device_name()}",
            "devices": devices, "recipe": asdict(recipe),
            # where the time went: the first step (with tracing and compiling when it is new),
            # all steps, validation and what the callbacks do at each epoch's end
            "timing": {"first_step_s": round(state.first_step_s or 0.0, 3),
                       "steps_s": round(state.steps_s, 3),
                       "validation_s": round(state.validation_s, 3),
                       "compiled": compiled}}


def drop_backup(backup, record: RunRecord) -> None:
    """A finished run's backup goes once its checkpoint is written: the same command then starts anew.
    A run stopped by --max-seconds keeps it, so the same command with more time goes on from there."""
    if backup and record.stopped_by not in ("max_seconds", "time_limit"):
        remove(backup)


def _run_card(record: RunRecord, config, preset: str | None, dataset: Dataset, metrics: Metrics,
              base: Lineage | None) -> Card:
    """The card of a finished run: `record` is fit's, `metrics` its metrics with the test set's."""
    is_cifar = dataset.name in ("cifar10", "cifar100")
    data = Data(name=dataset.name, num_classes=dataset.num_classes,
                source="CIFAR python-pickle folder" if is_cifar else Path(dataset.source).name,
                train_images=record.training.train_images, validation_images=record.training.validation_images,
                test_images=int(len(dataset.x_test)), note=dataset.note)
    return Card(variant=config.variant, preset=preset, config=config.to_dict(), dataset=data,
                class_names=list(dataset.class_names), metrics=metrics, history=list(record.history),
                training=record.training, base=base)


@dataclass
class RunRecord:
    """What `fit` returns, in the card's own sections: every epoch's record, the metrics of the epoch kept
    (training and validation), how the run went (`training`: what ran, on what, the head it started from,
    the epoch kept, where the time went), and what stopped it before its last epoch ("max_steps",
    "max_seconds", "time_limit"), if anything did. A fine-tune's head decision (explorer.training.head.settle) and a
    continued run (explorer.training.tuning.continued_record) change it before finish_run writes it as the card."""

    history: list[Epoch]
    metrics: Metrics
    training: Training
    stopped_by: str | None = None


@dataclass
class RunResult:
    """A run as its caller gets it back: where its checkpoint went (None when the recipe's time limit stopped
    the run first: `backup` then holds where it got to, and `stopped_by` says "time_limit"), its metrics
    (with the test images', once evaluated), its history and training record, and the class predicted
    for each test image."""

    checkpoint: str | None
    metrics: Metrics
    history: list[Epoch]
    training: Training
    test_predictions: list = field(default_factory=list)
    backup: str | None = None
    stopped_by: str | None = None


def finish_run(model, record: RunRecord, config, preset, dataset, out_dir, name, base: Lineage | None,
               progress: Callable[[MemberEvent], None] | None = None) -> RunResult:
    """The trained model evaluated on the test images and written as a checkpoint, with its card; `progress`
    hears each of the two phases begin."""
    if progress is not None:
        progress(PhaseBegun(Phase.EVALUATING))
    logits = predict_logits(model, dataset.x_test) if len(dataset.x_test) else None
    test = accuracy_metrics(logits, dataset.y_test) if logits is not None else None
    metrics = Metrics.from_json(record.metrics.to_json())
    if test is not None:
        metrics.test_top1, metrics.test_top5 = test.top1, test.top5
        metrics.test_per_class, metrics.test_count = test.per_class, test.count
    card = _run_card(record, config, preset, dataset, metrics, base)
    if progress is not None:
        progress(PhaseBegun(Phase.SAVING))
    folder = write_checkpoint(model, unique_dir(out_dir, name), card)
    return RunResult(str(folder), metrics, list(record.history), record.training,
                     logits.argmax(-1).tolist() if logits is not None else [])
