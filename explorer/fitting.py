"""The training loop: the recipe (TrainConfig), its batches (explorer.batches), the warmup-cosine AdamW,
callbacks (best epoch, cancel, time limit, backups), devices and data parallelism, predictions and accuracy,
and writing a finished run's checkpoint. explorer.train starts new models with it, explorer.finetune
continues or fine-tunes trained ones.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from explorer.batches import make_batches, training_split
from explorer.card import Card, Data, Epoch, Lineage, Metrics, Training
from explorer.data import Dataset
from explorer.schedules import ScheduledAdamW, WarmUpCosine

# How a fine-tune's classifier starts (see choose_head): "auto" keeps the base's head for the base's own
# classes, takes the base's rows when the new classes are some of the base's, else fits a linear probe.
HEAD_INITS = ("auto", "probe", "new")
# Progress (a batch event) at most this often: each report waits for the device to finish its step.
PROGRESS_EVERY_S = 0.25
# predict_logits' batch: every batch has this many images (the last topped up), so one compiled predict
# step serves any number of images.
PREDICT_BATCH = 256


class Cancelled(Exception):
    """The run was cancelled; nothing was saved."""


class DistributionError(ValueError):
    """A data-parallel run that cannot be: not on JAX, or a batch that does not split evenly."""


@dataclass
class TrainConfig:
    """The recipe. keras.io: AdamW lr 1e-3, weight decay 1e-4, batch 256, 10 % warmup then cosine."""

    epochs: int = 30
    batch_size: int = 128
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    warmup_fraction: float = 0.1
    label_smoothing: float = 0.1
    validation_fraction: float = 0.1
    augment: bool = True
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    mix_prob: float = 1.0
    seed: int = 0
    max_seconds: float | None = None
    max_steps: int | None = None
    train_subset: int | None = None
    # The small-data study's data: the validation split drawn with `split_seed` (None: with `seed`, as
    # before), then a class-balanced subset of `balanced_subset` training images that contains every
    # smaller one drawn with the same split seed, whatever the training seed.
    split_seed: int | None = None
    balanced_subset: int | None = None
    # Validation after every n-th epoch (and always after the last): at 1,000 training images a pass over
    # 5,000 validation images costs more than the epoch itself.
    validation_every: int = 1
    freeze_backbone: bool = False
    head_init: str = "auto"
    keep_best: bool = False
    # Augmentation inside the training step (explorer.step_augment), after the numpy crop, flip and mix:
    # Keras' RandAugment at this factor and random erasing with this probability (0 = off).
    randaugment: float = 0.0
    random_erasing: float = 0.0
    # Repeated augmentation: every epoch passes over the training images this many times, each pass in its
    # own order and every pass augmented anew (the authors' RASampler as their main.py calls it).
    repeats: int = 1
    # The named recipe (RECIPES) these values started from, for the card; None: TrainConfig's defaults.
    name: str | None = None
    # The fast path (explorer.device_batches; for a new model): the compute precision (models.PRECISIONS),
    # the training images on the device with crop, flip and mix inside the compiled step, and on JAX this
    # many steps per call into it.
    precision: str = "float32"
    device_data: bool = False
    steps_per_call: int = 1
    # A window's budget: training stops at the end of the last epoch that fits in this many seconds (or at
    # the step that passes it), keeping its backup, from which the same command resumes.
    time_limit: float | None = None

    def __post_init__(self):
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not (isinstance(self.learning_rate, (int, float)) and 0 < self.learning_rate <= 1):
            raise ValueError(f"learning_rate must be in (0, 1], got {self.learning_rate!r}")
        if not 0 <= self.weight_decay < 1:
            raise ValueError(f"weight_decay must be in [0, 1), got {self.weight_decay!r}")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction!r}")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing!r}")
        if not 0 <= self.validation_fraction < 1:
            raise ValueError(f"validation_fraction must be in [0, 1), got {self.validation_fraction!r}")
        for name in ("mixup_alpha", "cutmix_alpha"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value <= 10):
                raise ValueError(f"{name} must be in [0, 10] (0 = off), got {value!r}")
        if not 0 < self.mix_prob <= 1:
            raise ValueError(f"mix_prob must be in (0, 1], got {self.mix_prob!r}")
        if not isinstance(self.validation_every, int) or self.validation_every < 1:
            raise ValueError(f"validation_every must be a positive integer, got {self.validation_every!r}")
        if self.split_seed is not None and (not isinstance(self.split_seed, int) or self.split_seed < 0):
            raise ValueError(f"split_seed must be a non-negative integer when given, got {self.split_seed!r}")
        if self.train_subset and self.balanced_subset:
            raise ValueError("train_subset and balanced_subset are two ways to take a subset: give one")
        for name in ("max_seconds", "max_steps", "train_subset", "balanced_subset"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive when given, got {value!r}")
        if self.head_init not in HEAD_INITS:
            raise ValueError(f"head_init must be one of {HEAD_INITS}, got {self.head_init!r}")
        for name in ("randaugment", "random_erasing"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value <= 1):
                raise ValueError(f"{name} must be in [0, 1] (0 = off), got {value!r}")
        if not isinstance(self.repeats, int) or isinstance(self.repeats, bool) or self.repeats < 1:
            raise ValueError(f"repeats must be a positive integer, got {self.repeats!r}")
        from explorer.models import PRECISIONS
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if not isinstance(self.steps_per_call, int) or isinstance(self.steps_per_call, bool) \
                or self.steps_per_call < 1:
            raise ValueError(f"steps_per_call must be a positive integer, got {self.steps_per_call!r}")
        if self.steps_per_call > 1 and not self.device_data:
            raise ValueError("steps_per_call > 1 needs device_data (several steps' draws per call)")
        if self.time_limit is not None and self.time_limit <= 0:
            raise ValueError(f"time_limit must be positive when given, got {self.time_limit!r}")
        if self.name is not None and self.name not in RECIPES:
            raise ValueError(f"name must be None or one of the recipes {sorted(RECIPES)}, got {self.name!r}")


# Named recipes (`python -m explorer.train --recipe NAME`): the TrainConfig values they set; values given
# explicitly win over them.
RECIPES: dict[str, dict] = {
    # The paper's (Lee, Lee & Song 2021), read from the authors' code (aanna0701/SPT_LSA_ViT, main.py): 100
    # epochs of batch 128, AdamW at 1e-3 with weight decay 5e-2, 10 warm-up epochs then cosine, label
    # smoothing 0.1; crop + flip, AutoAugment's CIFAR policy (Keras has none: its RandAugment stands in, at
    # Keras' default strength), random erasing 0.25, CutMix and mixup (alpha 1) on half the batches;
    # repeated augmentation x3 (an epoch is three passes over the images).
    "paper": dict(epochs=100, batch_size=128, learning_rate=1e-3, weight_decay=5e-2, warmup_fraction=0.1,
                  label_smoothing=0.1, augment=True, randaugment=0.5, random_erasing=0.25, mixup_alpha=1.0,
                  cutmix_alpha=1.0, mix_prob=0.5, repeats=3),
}


def _keras():
    import keras
    return keras


def device_name() -> str:
    """"GPU (name)" when the backend sees an accelerator, else "CPU"."""
    keras = _keras()
    backend = keras.backend.backend()
    try:
        if backend == "tensorflow":
            import tensorflow as tf
            gpus = tf.config.list_physical_devices("GPU")
            return f"GPU ({gpus[0].name})" if gpus else "CPU"
        if backend == "jax":
            import jax
            device = jax.devices()[0]
            return "CPU" if device.platform == "cpu" else f"GPU ({device.device_kind})"
        if backend == "torch":
            import torch
            return f"GPU ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "CPU"
    except Exception:
        pass
    return "CPU"


def distribute_over_devices() -> int:
    """Makes every model built afterwards data-parallel over all the devices Keras' JAX backend sees (its
    accelerators, else the CPU's), with Keras' own distribution API: the weights replicated on each device,
    every batch split evenly between them, the gradients averaged. Returns how many devices."""
    keras = _keras()
    if keras.backend.backend() != "jax":
        raise DistributionError(f"--distribute needs Keras' JAX backend (KERAS_BACKEND=jax; on a GPU "
                                f"machine with requirements-gpu.txt), not {keras.backend.backend()!r}")
    devices = keras.distribution.list_devices()
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    return len(devices)


def data_parallel_devices() -> int:
    """How many devices share each batch: those of the distribution set by distribute_over_devices, else 1."""
    distribution = _keras().distribution.distribution()
    if distribution is None:
        return 1
    mesh = distribution.device_mesh
    return int(mesh.shape[list(mesh.axis_names).index(distribution.batch_dim_name)])


def check_batch_split(batch_size: int, devices: int) -> None:
    if batch_size % devices:
        raise DistributionError(f"a batch of {batch_size} images does not split evenly over {devices} "
                                f"devices; give --batch-size a multiple of {devices}")


def _better(record: dict, best: dict | None) -> bool:
    """Whether an epoch's validation beats the best so far: higher top-1, then lower loss."""
    if best is None:
        return True
    if record["val_top1"] != best["val_top1"]:
        return record["val_top1"] > best["val_top1"]
    return (record.get("val_loss") or 0.0) <= (best.get("val_loss") or float("inf"))


def make_callbacks(model, history: list, recipe: TrainConfig, steps_per_epoch: int,
                   progress: Callable[[dict], None] | None, cancel: threading.Event | None,
                   state: dict, batches=None, validation=None):
    keras = _keras()
    from explorer.models import tau_values
    items = len(batches) if batches is not None else steps_per_epoch  # calls per epoch

    class Recorder(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            if batches is not None:
                batches.begin(0)
            state["start"] = time.perf_counter()
            state.setdefault("steps", 0)
            state["epoch_start"] = time.perf_counter()

        def on_epoch_begin(self, epoch, logs=None):
            state["epoch_start"] = time.perf_counter()
            state["current_epoch"] = epoch

        def on_train_batch_end(self, batch, logs=None):
            state["steps"] += batches.steps_in(batch) if batches is not None else 1
            now = time.perf_counter()
            elapsed = now - state["start"]
            if "first_step_s" not in state:  # includes tracing and compiling the step when it is new
                state["first_step_s"] = now - state["epoch_start"]
                state["first_step_epoch"] = state.get("current_epoch", 0)
            state["last_batch_end"] = now
            if cancel is not None and cancel.is_set():
                state["cancelled"] = True
                self.model.stop_training = True
            if recipe.max_steps and state["steps"] >= recipe.max_steps:
                state["stopped_by"] = "max_steps"
                self.model.stop_training = True
            if recipe.max_seconds and elapsed >= recipe.max_seconds:
                state["stopped_by"] = "max_seconds"
                self.model.stop_training = True
            if recipe.time_limit and elapsed >= recipe.time_limit:
                state["stopped_by"] = "time_limit"
                self.model.stop_training = True
            # Reading the loss waits for the device to finish the step: at most every PROGRESS_EVERY_S, and
            # at an epoch's last step, so the steps between run without a sync.
            if progress is not None and (elapsed - state.get("reported", -1.0) >= PROGRESS_EVERY_S
                                         or batch + 1 == items or self.model.stop_training):
                state["reported"] = elapsed
                progress({"kind": "batch", "step": state["steps"],
                          "total_steps": steps_per_epoch * recipe.epochs, "epoch": state.get("epoch", 0),
                          "loss": float((logs or {}).get("loss", float("nan"))), "elapsed": elapsed})

        def on_epoch_end(self, epoch, logs=None):
            state["steps_s"] = state.get("steps_s", 0.0) + state.get("last_batch_end", state["epoch_start"]) \
                - state["epoch_start"]
            logs = dict(logs or {})
            now = time.perf_counter()
            # The next epoch's length, as this one's without the compiling of a first step.
            spent = now - state["epoch_start"] - (state["first_step_s"] if state.get("first_step_epoch") == epoch
                                                  else 0.0)
            if recipe.time_limit and epoch + 1 < recipe.epochs and not self.model.stop_training and \
                    now - state["start"] + spent > recipe.time_limit:
                # Another epoch would not fit: stop at this one's end, which the backup keeps.
                state["stopped_by"] = "time_limit"
                self.model.stop_training = True
            last = epoch + 1 == recipe.epochs or self.model.stop_training
            if validation is not None and last and "val_top1" not in logs and not state["cancelled"]:
                # The last epoch fell between validations (or a step or time limit ends the run here): the
                # weights a run ends with are always validated.
                logs.update({f"val_{k}": v for k, v in
                             self.model.evaluate(validation, verbose=0, return_dict=True).items()})
            state["epoch"] = epoch + 1
            record = {"epoch": epoch + 1,
                      "time_s": round(time.perf_counter() - state["epoch_start"], 2),
                      "learning_rate": float(keras.ops.convert_to_numpy(
                          self.model.optimizer.learning_rate)),
                      **{k: float(v) for k, v in logs.items() if k != "learning_rate"},
                      "tau": tau_values(model)}
            history.append(record)
            state["validation_s"] = state.get("validation_s", 0.0) + time.perf_counter() - state.get(
                "last_batch_end", state["epoch_start"])
            if recipe.keep_best and "val_top1" in record and _better(record, state.get("best")):
                state["best"] = {"epoch": epoch + 1, "val_top1": record["val_top1"],
                                 "val_loss": record.get("val_loss"), "weights": model.get_weights()}
            if progress is not None:
                progress({"kind": "epoch", **record})

    return [Recorder()]


def compile_for_run(model, recipe: TrainConfig, num_classes: int, total_steps: int, reuse: bool = False) -> bool:
    """Compiles `model` for a run of `total_steps` steps of the recipe; returns whether it compiled anew.

    With `reuse`, a model compiled before for the same loss, metrics, weight decay and trainable weights keeps
    its compiled steps: its optimizer (ScheduledAdamW, whose schedule lives in variables) only restarts, so a
    repeat run traces and compiles nothing."""
    keras = _keras()
    warmup = int(recipe.warmup_fraction * total_steps)
    top5 = min(5, num_classes)
    key = (recipe.label_smoothing, recipe.weight_decay, top5, tuple(v.path for v in model.trainable_variables))
    if reuse and getattr(model, "_explorer_compiled", None) == key:
        model.optimizer.restart(recipe.learning_rate, total_steps, warmup)
        return False
    if reuse:
        optimizer = ScheduledAdamW(recipe.learning_rate, total_steps, warmup, weight_decay=recipe.weight_decay)
    else:
        optimizer = keras.optimizers.AdamW(learning_rate=WarmUpCosine(recipe.learning_rate, total_steps, warmup),
                                           weight_decay=recipe.weight_decay)
    # Temperatures, norms, biases and position embeddings are not decayed towards zero.
    optimizer.exclude_from_weight_decay(var_names=["tau", "bias", "gamma", "beta", "position_embedding"])
    model.compile(optimizer=optimizer,
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True,
                                                            label_smoothing=recipe.label_smoothing),
                  # weighted_metrics, not metrics: Keras 3 gives sample weights to these only, and the
                  # validation batches' padding has weight 0 (see make_batches).
                  weighted_metrics=[keras.metrics.CategoricalAccuracy(name="top1"),
                                    keras.metrics.TopKCategoricalAccuracy(k=top5, name="top5")])
    model._explorer_compiled = key if reuse else None
    return True


def fit(model, dataset: Dataset, recipe: TrainConfig, verbose: int = 1,
        progress: Callable[[dict], None] | None = None, cancel: threading.Event | None = None,
        backup: str | os.PathLike | None = None, start: dict | None = None, base: dict | None = None,
        reuse: bool = False) -> dict:
    """Trains `model` in place on `dataset` with the recipe; returns the run's record (no saving).

    With `reuse` (a worker that keeps models between runs), the model's compiled steps from an earlier run of
    the same shape are used again (see compile_for_run), and the validation batch is padded to a multiple of
    64 images, so that zips of similar size share it too.

    `start` (metrics of the model before any step, see choose_head) is reported as epoch 0. With a
    `backup` folder, the state after every epoch is kept there (explorer.backup): a run killed at any
    moment and started again with the same arguments resumes from its last completed epoch and ends
    as if it had never stopped; a backup of another run (`base`, the recipe, data or model differ) is
    refused with the reason."""
    _seed_run(recipe.seed, reuse)
    (x_train, y_train), val = training_split(dataset, recipe)
    num_classes = dataset.num_classes
    batch_size = min(recipe.batch_size, len(x_train))
    devices = data_parallel_devices()
    check_batch_split(batch_size, devices)
    if recipe.device_data:
        from explorer.device_batches import on_device
        trainee, block, train_batches, val_batches = on_device(
            model, _step_augmentation(recipe), (x_train, y_train), val, num_classes, batch_size, recipe,
            _validation_size(len(val[0]), devices, reuse) if val is not None else 0)
    else:
        train_batches = make_batches(x_train, y_train, num_classes, batch_size, recipe.augment, recipe.seed,
                                     True, recipe.mixup_alpha, recipe.cutmix_alpha, recipe.mix_prob,
                                     recipe.repeats)
        val_batches = _validation_batches(val, num_classes, recipe.seed, devices, reuse)
        trainee, block = _with_step_augmentation(model, recipe)
    steps_per_epoch = train_batches.steps
    total_steps = steps_per_epoch * recipe.epochs
    if recipe.max_steps:
        total_steps = min(total_steps, recipe.max_steps)
    compiled = compile_for_run(trainee, recipe, num_classes, total_steps, reuse)
    history: list[dict] = []
    state: dict = {"cancelled": False, "stopped_by": None, "wall_before": 0.0}
    if backup:
        _check_backup(backup, model, dataset, recipe, base)
    if recipe.keep_best and start is not None and "val_top1" in start:
        # Step 0 competes too: a run that never beats the head it started from keeps that head.
        state["best"] = {"epoch": 0, "val_top1": start["val_top1"], "val_loss": start.get("val_loss"),
                         "weights": model.get_weights()}
    callbacks = _run_callbacks(model, trainee, block, recipe, history, state, train_batches, val_batches,
                               progress, cancel, backup)
    if start is not None and progress is not None:
        progress({"kind": "epoch", "epoch": 0, **start})
    began = time.perf_counter()
    # shuffle=False: the batches shuffle themselves, by (seed, epoch), not by Python's global random state.
    trainee.fit(train_batches, validation_data=val_batches, epochs=recipe.epochs, verbose=verbose, shuffle=False,
                callbacks=callbacks, validation_freq=recipe.validation_every)
    wall = time.perf_counter() - began + state["wall_before"]
    if state["cancelled"] or (cancel is not None and cancel.is_set()):
        raise Cancelled("training was cancelled; no checkpoint was written")
    kept, metrics = _keep_best(model, history, state, start)
    training = _training_summary(recipe, history, state, start, kept, wall, compiled, batch_size=batch_size,
                                 train_images=len(x_train), validation_images=len(val[0]) if val is not None else 0,
                                 devices=devices)
    return {"history": history, "metrics": metrics, "steps": state["steps"],
            "stopped_by": state["stopped_by"], "epochs_done": len(history), "training": training}


def _seed_run(seed: int, reuse: bool) -> None:
    """Seeds what a run draws from outside its own (seed, epoch, index) streams."""
    if reuse:
        # Not keras.utils.set_random_seed: on TensorFlow it calls tf.random.set_seed, which clears the
        # eager context's caches, and every compiled function then takes seconds to set up again (measured:
        # 4 s of a 5 s warm run). Batches and augmentation draw from their own (seed, epoch, index) streams,
        # and Keras' layers from their own seed generators, so Python's and NumPy's seeds are all that is left.
        import random
        random.seed(seed)
        np.random.seed(seed)
    else:
        _keras().utils.set_random_seed(seed)


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
    from explorer.step_augment import with_augmentation
    return with_augmentation(model, block), block


def _step_augmentation(recipe: TrainConfig):
    if not (recipe.randaugment or recipe.random_erasing):
        return None
    from explorer.step_augment import augmentation_block
    return augmentation_block(recipe.randaugment, recipe.random_erasing)


def _check_backup(backup, model, dataset: Dataset, recipe: TrainConfig, base: dict | None) -> None:
    """Refuses another run's backup; says how far a backup of this run got."""
    from explorer import backup as backups
    done = backups.check(backup, backups.run_identity(model, dataset, recipe, base))
    if done:
        print(f"resuming from backup {backup}: {done} of {recipe.epochs} epochs done", flush=True)


def _run_callbacks(model, trainee, block, recipe: TrainConfig, history: list, state: dict, train_batches,
                   val_batches, progress: Callable[[dict], None] | None, cancel: threading.Event | None,
                   backup) -> list:
    """The run's callbacks in their order: the reseeding of in-step draws, the recorder, the backup."""
    callbacks = make_callbacks(model, history, recipe, train_batches.steps, progress, cancel, state, train_batches,
                               val_batches)
    from explorer.layers import DropPath
    if block is not None or any(isinstance(layer, DropPath) for layer in model.layers):
        from explorer.step_augment import Reseed
        callbacks.insert(0, Reseed(trainee, recipe.seed))  # the step's draws a function of (seed, epoch, step)
    if backup:
        from explorer import backup as backups
        # After the recorder: an epoch is saved once its record is in the history.
        callbacks.append(backups.TrainingBackup(backup, train_batches, history, state))
    return callbacks


def _keep_best(model, history: list, state: dict, start: dict | None) -> tuple[int, dict]:
    """(the epoch the run ends with, its metrics): with keep_best, the best epoch's weights are put back."""
    best = state.get("best")
    kept = len(history)
    if best is not None and best["epoch"] != len(history):
        model.set_weights(best["weights"])
        kept = best["epoch"]
    metrics = {}
    if history:
        last = history[kept - 1] if kept >= 1 else start
        metrics.update({k: last[k] for k in ("top1", "top5", "loss") if k in last})
        metrics.update({k: last[k] for k in ("val_top1", "val_top5", "val_loss") if k in last})
    return kept, metrics


def _training_summary(recipe: TrainConfig, history: list, state: dict, start: dict | None, kept: int, wall: float,
                      compiled: bool, *, batch_size: int, train_images: int, validation_images: int,
                      devices: int) -> dict:
    """The record's "training": what ran, on what, and where the time went."""
    images_seen = state["steps"] * batch_size
    return {"epochs": len(history), "planned_epochs": recipe.epochs, "steps": state["steps"],
            "wall_time_s": round(wall, 1),
            "images_per_second": round(images_seen / wall, 1) if wall > 0 else None,
            "train_images": int(train_images), "batch_size": batch_size,
            "start": start, "kept_epoch": kept,
            "validation_images": int(validation_images),
            "device": device_name() if devices == 1 else f"{devices} × {device_name()}",
            "devices": devices, "recipe": asdict(recipe),
            # where the time went: the first step (with tracing and compiling when it is new),
            # all steps, validation and what the callbacks do at each epoch's end
            "timing": {"first_step_s": round(state.get("first_step_s", 0.0), 3),
                       "steps_s": round(state.get("steps_s", 0.0), 3),
                       "validation_s": round(state.get("validation_s", 0.0), 3),
                       "compiled": compiled}}


def predict_logits(model, x, batch_size: int = PREDICT_BATCH) -> np.ndarray:
    """The model's outputs for uint8 (or float) images `x`, in batches of exactly `batch_size` (the last one
    topped up with copies of its last image, whose outputs are dropped): one compiled shape per model."""
    devices = data_parallel_devices()
    batch_size = -(-batch_size // devices) * devices  # every device gets an equal share
    out = []
    for i in range(0, len(x), batch_size):
        batch = x[i:i + batch_size].astype("float32")
        n = len(batch)
        if n < batch_size:
            batch = np.concatenate([batch, np.repeat(batch[-1:], batch_size - n, axis=0)])
        out.append(np.asarray(model.predict_on_batch(batch))[:n])
    return np.concatenate(out) if out else np.zeros((0, model.output_shape[-1]), "float32")


def accuracy_metrics(logits: np.ndarray, y: np.ndarray) -> dict:
    y = np.asarray(y)
    num_classes = logits.shape[-1]
    top1 = logits.argmax(-1) == y
    k = min(5, num_classes)
    topk = (np.argsort(-logits, axis=-1)[:, :k] == y[:, None]).any(-1)
    per_class = [float(top1[y == c].mean()) if (y == c).any() else None for c in range(num_classes)]
    return {"top1": float(top1.mean()), "top5": float(topk.mean()), "per_class": per_class,
            "count": int(len(y))}


def drop_backup(backup, record: dict) -> None:
    """A finished run's backup goes once its checkpoint is written: the same command then starts anew.
    A run stopped by --max-seconds keeps it, so the same command with more time goes on from there."""
    if backup and record.get("stopped_by") not in ("max_seconds", "time_limit"):
        from explorer.backup import remove
        remove(backup)


def _run_card(record: dict, config, preset: str | None, dataset: Dataset, metrics: dict, base: Lineage | None) -> Card:
    """The card of a finished run: `record` is fit's, `metrics` its metrics with the test set's."""
    is_cifar = dataset.name in ("cifar10", "cifar100")
    data = Data(name=dataset.name, num_classes=dataset.num_classes,
                source="CIFAR python-pickle folder" if is_cifar else Path(dataset.source).name,
                train_images=record["training"]["train_images"],
                validation_images=record["training"]["validation_images"],
                test_images=int(len(dataset.x_test)), note=dataset.note)
    return Card(variant=config.variant, preset=preset, config=config.to_dict(), dataset=data,
                class_names=list(dataset.class_names), metrics=Metrics.from_json(metrics),
                history=[Epoch.from_json(e) for e in record["history"]],
                training=Training.from_json(record["training"]), base=base)


def finish_run(model, record, config, preset, dataset, out_dir, name, base: Lineage | None) -> dict:
    from explorer.checkpoints import unique_dir, write_checkpoint
    logits = predict_logits(model, dataset.x_test) if len(dataset.x_test) else None
    test = accuracy_metrics(logits, dataset.y_test) if logits is not None else None
    metrics = dict(record["metrics"])
    if test is not None:
        metrics.update(test_top1=test["top1"], test_top5=test["top5"], test_per_class=test["per_class"],
                       test_count=test["count"])
    card = _run_card(record, config, preset, dataset, metrics, base)
    folder = write_checkpoint(model, unique_dir(out_dir, name), card)
    return {"checkpoint": str(folder), "metrics": metrics, "history": record["history"],
            "training": record["training"],
            "test_predictions": logits.argmax(-1).tolist() if logits is not None else []}
