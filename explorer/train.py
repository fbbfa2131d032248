"""Training and fine-tuning: the keras.io recipe with its schedule really driving AdamW.

    python -m explorer.train --preset cifar-small --variant spt_lsa --dataset cifar10 --epochs 30
    python -m explorer.train --base checkpoints/cifar10-spt_lsa --dataset my_images.zip --freeze-backbone
    python -m explorer.train --base runs/cifar10-spt_lsa --continue --dataset cifar10 --epochs 50 --lr 5e-4
    KERAS_BACKEND=jax python -m explorer.train --preset keras-io --dataset cifar100 --batch-size 256 --distribute
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from explorer.config import PRESETS, VARIANTS, ViTConfig, get_preset
from explorer.data import Dataset, DatasetError, augment_batch, load_dataset, mix_batch
from explorer.schedules import WarmUpCosine


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
    freeze_backbone: bool = False
    head_init: str = "auto"
    keep_best: bool = False

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
        for name in ("max_seconds", "max_steps", "train_subset"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive when given, got {value!r}")
        if self.head_init not in HEAD_INITS:
            raise ValueError(f"head_init must be one of {HEAD_INITS}, got {self.head_init!r}")


# How a fine-tune's classifier starts (see prepare_head): "auto" keeps the base's head for the base's own
# classes, takes the base's rows when the new classes are some of the base's, else fits a linear probe.
HEAD_INITS = ("auto", "probe", "new")
# The default short fine-tuning recipe (fine_tune_recipe): about this many optimizer steps in all, but no more
# than FT_IMAGE_BUDGET images (~50 s for the SPT/LSA cifar-small model at batch 16 on 2 CPU cores), at a peak
# learning rate that depends on whether the new classes are classes the base already knows.
FT_TARGET_STEPS = 500
FT_IMAGE_BUDGET = 8000
FT_LEARNING_RATE = 5e-4        # a task the base never saw: its features have to move
FT_LEARNING_RATE_KNOWN = 1e-4  # the base's own classes: its features are already tuned for them
FT_WEIGHT_DECAY = 0.05


def fine_tune_recipe(n_images: int, epochs: int | None = None, batch_size: int | None = None,
                     learning_rate: float | None = None, freeze_backbone: bool = False,
                     known_classes: bool = False, **overrides) -> TrainConfig:
    """The default recipe for fine-tuning a checkpoint on `n_images` training images (before the 10 %
    validation split): a head that starts where it can already score (the base's rows, or a linear probe on
    the frozen features; see prepare_head), then the whole model with AdamW, warmup + cosine, crop + flip,
    with a batch size scaled to the data so that even a few hundred images give up to FT_TARGET_STEPS steps
    (FT_IMAGE_BUDGET images at most, which keeps about a thousand images near a minute on 2 CPU cores),
    keeping the epoch (step 0 included) that does best on the validation split. `known_classes`: the new
    classes are all base classes (a gentler learning rate). Given values win."""
    validation_fraction = overrides.pop("validation_fraction", 0.1 if n_images >= 20 else 0.0)
    n_fit = max(1, n_images - int(round(n_images * validation_fraction)))
    if batch_size is None:
        batch_size = int(np.clip(2 ** round(math.log2(max(n_fit / 24, 1))), 16, 128))
    batch_size = max(1, min(batch_size, n_fit))
    if epochs is None:
        steps = min(FT_TARGET_STEPS, FT_IMAGE_BUDGET / batch_size)
        epochs = int(np.clip(round(steps / math.ceil(n_fit / batch_size)), 1, 30))
    if learning_rate is None:
        learning_rate = FT_LEARNING_RATE_KNOWN if known_classes else FT_LEARNING_RATE
    return TrainConfig(**{"epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate,
                          "weight_decay": FT_WEIGHT_DECAY, "validation_fraction": validation_fraction,
                          "freeze_backbone": freeze_backbone, "head_init": "auto", "keep_best": True,
                          **overrides})


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


def make_batches(x, y, num_classes, batch_size, augment, seed, shuffle, mixup_alpha=0.0, cutmix_alpha=0.0,
                 mix_prob=1.0):
    """A keras PyDataset of (float images 0-255, one-hot labels), augmented in numpy per batch.

    Every batch has `batch_size` images, so a compiled step never meets a new shape (JAX compiles again for
    each): a shuffled epoch's last batch is topped up from the start of its order; an unshuffled one
    (validation) repeats images with sample weight 0, so they count for nothing.
    With a mixup or cutmix alpha, batches are also mixed (see data.mix_batch) and labels become soft."""
    keras = _keras()

    class Batches(keras.utils.PyDataset):
        # Batch i of epoch e depends on (seed, e, i) alone, never on when it is asked for: tf.data prefetches
        # the next epoch's first batches before the epoch ends, and a resumed run must draw what the
        # uninterrupted one drew. Calls are counted from `begin` on (Keras' peek at the shapes comes first).
        def __init__(self):
            super().__init__()
            self.first_epoch, self.calls, self.counting = 0, 0, False
            self.cached = (0, self._order(0))

        def begin(self, epochs_done: int = 0) -> None:
            """Training starts, or resumes after `epochs_done` epochs: the next call is that epoch's first."""
            self.first_epoch, self.calls, self.counting = epochs_done, 0, True

        def _order(self, epoch):
            return np.random.default_rng([seed, epoch]).permutation(len(x)) if shuffle else np.arange(len(x))

        def __len__(self):
            return math.ceil(len(x) / batch_size)

        def __getitem__(self, i):
            epoch = 0
            if self.counting and shuffle:
                epoch = self.first_epoch + self.calls // len(self)
                self.calls += 1
            if self.cached[0] != epoch:
                self.cached = (epoch, self._order(epoch))
            order = self.cached[1]
            rng = np.random.default_rng([seed, epoch, i])
            index = np.sort(order[i * batch_size:(i + 1) * batch_size])
            real = len(index)
            if real < batch_size:
                index = np.concatenate([index, np.resize(order if shuffle else index, batch_size - real)])
            images = x[index]
            if augment:
                images = augment_batch(images, rng)
            images, labels = images.astype("float32"), np.eye(num_classes, dtype="float32")[y[index]]
            if not shuffle:
                weights = (np.arange(batch_size) < real).astype("float32")
                return images, labels, weights
            return mix_batch(images, labels, rng, mixup_alpha, cutmix_alpha, mix_prob)

    return Batches()


def split_validation(x, y, fraction, seed):
    if not fraction:
        return (x, y), None
    order = np.random.default_rng(seed + 1).permutation(len(x))
    n_val = max(1, int(round(len(x) * fraction)))
    val, train = np.sort(order[:n_val]), np.sort(order[n_val:])
    return (x[train], y[train]), (x[val], y[val])


def _better(record: dict, best: dict | None) -> bool:
    """Whether an epoch's validation beats the best so far: higher top-1, then lower loss."""
    if best is None:
        return True
    if record["val_top1"] != best["val_top1"]:
        return record["val_top1"] > best["val_top1"]
    return (record.get("val_loss") or 0.0) <= (best.get("val_loss") or float("inf"))


def make_callbacks(model, history: list, tc: TrainConfig, steps_per_epoch: int,
                   progress: Callable[[dict], None] | None, cancel: threading.Event | None,
                   state: dict, batches=None):
    keras = _keras()
    from explorer.models import tau_values

    class Recorder(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            if batches is not None:
                batches.begin(0)
            state["start"] = time.perf_counter()
            state.setdefault("steps", 0)
            state["epoch_start"] = time.perf_counter()

        def on_epoch_begin(self, epoch, logs=None):
            state["epoch_start"] = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            state["steps"] += 1
            elapsed = time.perf_counter() - state["start"]
            if cancel is not None and cancel.is_set():
                state["cancelled"] = True
                self.model.stop_training = True
            if tc.max_steps and state["steps"] >= tc.max_steps:
                state["stopped_by"] = "max_steps"
                self.model.stop_training = True
            if tc.max_seconds and elapsed >= tc.max_seconds:
                state["stopped_by"] = "max_seconds"
                self.model.stop_training = True
            if progress is not None:
                progress({"kind": "batch", "step": state["steps"],
                          "total_steps": steps_per_epoch * tc.epochs, "epoch": state.get("epoch", 0),
                          "loss": float((logs or {}).get("loss", float("nan"))), "elapsed": elapsed})

        def on_epoch_end(self, epoch, logs=None):
            logs = dict(logs or {})
            state["epoch"] = epoch + 1
            record = {"epoch": epoch + 1,
                      "time_s": round(time.perf_counter() - state["epoch_start"], 2),
                      "learning_rate": float(keras.ops.convert_to_numpy(
                          self.model.optimizer.learning_rate)),
                      **{k: float(v) for k, v in logs.items() if k != "learning_rate"},
                      "tau": tau_values(self.model)}
            history.append(record)
            if tc.keep_best and "val_top1" in record and _better(record, state.get("best")):
                state["best"] = {"epoch": epoch + 1, "val_top1": record["val_top1"],
                                 "val_loss": record.get("val_loss"), "weights": self.model.get_weights()}
            if progress is not None:
                progress({"kind": "epoch", **record})

    return [Recorder()]


def training_split(dataset: Dataset, tc: TrainConfig):
    """((x_train, y_train), (x_val, y_val) or None): the recipe's subset and held-out split of the training
    images, the same for the same recipe (fit and prepare_head both use it)."""
    x, y = dataset.x_train, dataset.y_train
    if tc.train_subset and tc.train_subset < len(x):
        keep = np.sort(np.random.default_rng(tc.seed).permutation(len(x))[:tc.train_subset])
        x, y = x[keep], y[keep]
    return split_validation(x, y, tc.validation_fraction, tc.seed)


def fit(model, dataset: Dataset, tc: TrainConfig, verbose: int = 1,
        progress: Callable[[dict], None] | None = None, cancel: threading.Event | None = None,
        backup: str | os.PathLike | None = None, start: dict | None = None, base: dict | None = None) -> dict:
    """Trains `model` in place on `dataset` with the recipe; returns the run's record (no saving).

    `start` (metrics of the model before any step, see prepare_head) is reported as epoch 0. With a
    `backup` folder, the state after every epoch is kept there (explorer.backup): a run killed at any
    moment and started again with the same arguments resumes from its last completed epoch and ends
    as if it had never stopped; a backup of another run (`base`, the recipe, data or model differ) is
    refused with the reason."""
    keras = _keras()
    keras.utils.set_random_seed(tc.seed)
    (x_train, y_train), val = training_split(dataset, tc)
    num_classes = dataset.num_classes
    batch_size = min(tc.batch_size, len(x_train))
    devices = data_parallel_devices()
    check_batch_split(batch_size, devices)
    train_batches = make_batches(x_train, y_train, num_classes, batch_size, tc.augment, tc.seed, True,
                                 tc.mixup_alpha, tc.cutmix_alpha, tc.mix_prob)
    # One validation batch when it fits (exact weighted loss, one compiled shape), else padded batches; padded
    # to a size every device gets an equal share of.
    val_size = -(-(len(val[0]) if len(val[0]) <= 2048 else 512) // devices) * devices if val is not None else 0
    val_batches = (make_batches(val[0], val[1], num_classes, val_size, False, tc.seed, False)
                   if val is not None else None)
    steps_per_epoch = len(train_batches)
    total_steps = steps_per_epoch * tc.epochs
    if tc.max_steps:
        total_steps = min(total_steps, tc.max_steps)
    schedule = WarmUpCosine(tc.learning_rate, total_steps, int(tc.warmup_fraction * total_steps))
    optimizer = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=tc.weight_decay)
    # Temperatures, norms, biases and position embeddings are not decayed towards zero.
    optimizer.exclude_from_weight_decay(var_names=["tau", "bias", "gamma", "beta", "position_embedding"])
    top5 = min(5, num_classes)
    model.compile(optimizer=optimizer,
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True,
                                                            label_smoothing=tc.label_smoothing),
                  metrics=[keras.metrics.CategoricalAccuracy(name="top1"),
                           keras.metrics.TopKCategoricalAccuracy(k=top5, name="top5")])
    history: list[dict] = []
    state: dict = {"cancelled": False, "stopped_by": None, "wall_before": 0.0}
    if backup:
        from explorer import backup as backups
        done = backups.check(backup, backups.run_identity(model, dataset, tc, base))
        if done:
            print(f"resuming from backup {backup}: {done} of {tc.epochs} epochs done", flush=True)
    if tc.keep_best and start is not None and "val_top1" in start:
        # Step 0 competes too: a run that never beats the head it started from keeps that head.
        state["best"] = {"epoch": 0, "val_top1": start["val_top1"], "val_loss": start.get("val_loss"),
                         "weights": model.get_weights()}
    callbacks = make_callbacks(model, history, tc, steps_per_epoch, progress, cancel, state, train_batches)
    if backup:
        # After the recorder: an epoch is saved once its record is in the history.
        callbacks.append(backups.TrainingBackup(backup, train_batches, history, state))
    if start is not None and progress is not None:
        progress({"kind": "epoch", "epoch": 0, **start})
    began = time.perf_counter()
    # shuffle=False: the batches shuffle themselves, by (seed, epoch), not by Python's global random state.
    model.fit(train_batches, validation_data=val_batches, epochs=tc.epochs, verbose=verbose, shuffle=False,
              callbacks=callbacks)
    wall = time.perf_counter() - began + state["wall_before"]
    if state["cancelled"] or (cancel is not None and cancel.is_set()):
        raise Cancelled("training was cancelled; no checkpoint was written")
    images_seen = state["steps"] * batch_size
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
    return {"history": history, "metrics": metrics, "steps": state["steps"],
            "stopped_by": state["stopped_by"], "epochs_done": len(history),
            "training": {"epochs": len(history), "planned_epochs": tc.epochs, "steps": state["steps"],
                         "wall_time_s": round(wall, 1),
                         "images_per_second": round(images_seen / wall, 1) if wall > 0 else None,
                         "train_images": int(len(x_train)), "batch_size": batch_size,
                         "start": start, "kept_epoch": kept,
                         "validation_images": int(len(val[0])) if val is not None else 0,
                         "device": device_name() if devices == 1 else f"{devices} × {device_name()}",
                         "devices": devices, "recipe": asdict(tc)}}


def predict_logits(model, x, batch_size: int = 500) -> np.ndarray:
    devices = data_parallel_devices()
    out = []
    for i in range(0, len(x), batch_size):
        batch = x[i:i + batch_size].astype("float32")
        n = len(batch)
        if n % devices:  # a data-parallel model takes only batches every device has an equal share of
            batch = np.concatenate([batch, np.repeat(batch[-1:], devices - n % devices, axis=0)])
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


def train_new(config: ViTConfig, preset: str, dataset: Dataset, tc: TrainConfig, out_dir: str | Path,
              name: str | None = None, verbose: int = 1, progress=None, cancel=None,
              backup: str | None = None) -> dict:
    """Builds a fresh model, trains it, evaluates on the test split and writes a checkpoint."""
    from explorer.models import build_vit
    _keras().utils.set_random_seed(tc.seed)
    model = build_vit(config, dataset.num_classes)
    record = fit(model, dataset, tc, verbose=verbose, progress=progress, cancel=cancel, backup=backup,
                 base={"preset": preset})
    result = _finish(model, record, config, preset, dataset, out_dir,
                     name or f"{dataset.name}-{config.variant}", base=None)
    _drop_backup(backup, record)
    return result


def _drop_backup(backup, record: dict) -> None:
    """A finished run's backup goes once its checkpoint is written: the same command then starts anew.
    A run stopped by --max-seconds keeps it, so the same command with more time goes on from there."""
    if backup and record.get("stopped_by") != "max_seconds":
        from explorer.backup import remove
        remove(backup)


def fine_tune(base: str | Path, dataset: Dataset, tc: TrainConfig, out_dir: str | Path,
              name: str | None = None, verbose: int = 1, progress=None, cancel=None,
              backup: str | None = None, extend: bool = False) -> dict:
    """Continues training a checkpoint on `dataset`; its head is prepared by `prepare_head` first.

    With `extend`, this is a second stage of the base's own training rather than a fine-tune: the
    dataset, its held-out split and the class list must be the base's, and the new checkpoint's history,
    epoch count, wall time and throughput cover both stages (see `continued_record`).
    """
    from explorer.checkpoints import load_checkpoint
    model, card = load_checkpoint(base)
    config = ViTConfig.from_dict(card["config"])
    if dataset.x_train.shape[1:3] != (config.image_size, config.image_size):
        raise DatasetError(f"dataset images are {dataset.x_train.shape[1:3]} but the model takes "
                         f"{config.image_size}x{config.image_size}")
    if extend:
        check_continuation(card, dataset, tc)
    model, start = prepare_head(model, card.get("class_names") or [], dataset, tc)
    if cancel is not None and cancel.is_set():
        raise Cancelled("training was cancelled; no checkpoint was written")
    record = fit(model, dataset, tc, verbose=verbose, progress=progress, cancel=cancel, backup=backup,
                 start=start, base={"name": card.get("name"), "created": card.get("created"),
                                    "epochs": len(card.get("history") or []), "continued": extend})
    lineage = {"name": card.get("name"), "source": str(base)}
    if extend:
        record = continued_record(card, record)
        lineage.update(continued=True, epochs=len(card["history"]))
    suffix = f"{record['training']['epochs']}ep" if extend else f"ft-{dataset.name}"
    result = _finish(model, record, config, card.get("preset"), dataset, out_dir,
                     name or f"{card.get('name', 'model')}-{suffix}", base=lineage)
    _drop_backup(backup, record)
    return result


def base_rows(base_classes: list[str], classes: list[str]) -> list[int] | None:
    """Where each of `classes` sits in the base's class list (matched case-insensitively), or None when
    any of them is not a base class."""
    index = {str(c).strip().lower(): i for i, c in enumerate(base_classes)}
    rows = [index.get(str(c).strip().lower()) for c in classes]
    return None if not rows or None in rows else rows


def pooled_features(model, x: np.ndarray, batch_size: int = 500) -> np.ndarray:
    """What the classifier head sees (the pooled, normalised tokens) for uint8 images `x`."""
    keras = _keras()
    from explorer.models import HEAD
    features = keras.Model(model.inputs, model.get_layer(HEAD).input)
    return predict_logits(features, x, batch_size)


def prepare_head(model, base_classes: list[str], dataset: Dataset, tc: TrainConfig):
    """(model, start metrics): the model with the head the fine-tune starts from, and how it scores.

    With `tc.head_init` "auto": the base's own classes keep the base's head; classes that are all among
    the base's take the base's rows for them (so step 0 scores what the base scores on them); any other
    class list gets a linear probe (logistic regression on the frozen pooled features of the training
    split and its mirror images, its L2 chosen on the validation split). A frozen backbone takes the
    probe too, unless the base's rows already do better on the validation split. "probe" always fits the
    probe; "new" is a freshly initialised head. The backbone is frozen when the recipe says so.
    """
    from explorer.linear import LinearHead, fit_probe
    from explorer.models import HEAD, freeze_backbone, replace_head
    n = dataset.num_classes
    (x_fit, y_fit), val = training_split(dataset, tc)
    same = model.output_shape[-1] == n and [str(c) for c in base_classes] == list(dataset.class_names)
    rows = base_rows(base_classes, dataset.class_names) if len(base_classes) == model.output_shape[-1] else None
    old = model.get_layer(HEAD)
    kernel, bias = (np.asarray(w) for w in old.get_weights())
    if not same:
        model = replace_head(model, n)
    head = model.get_layer(HEAD)
    how = "kept" if same else "new"
    if same and tc.head_init == "auto":
        pass
    elif rows is not None and tc.head_init == "auto":
        head.set_weights([kernel[:, rows], bias[rows]])
        how = "base rows"
    if tc.head_init == "probe" or (tc.head_init == "auto" and (how == "new" or tc.freeze_backbone)):
        features = pooled_features(model, np.concatenate([x_fit, x_fit[:, :, ::-1]]))
        labels = np.concatenate([y_fit, y_fit])
        val_features = pooled_features(model, val[0]) if val is not None else None
        current = LinearHead(*(np.asarray(w, np.float64) for w in head.get_weights()), l2=0.0)
        probe = fit_probe(features, labels, n, val_features, val[1] if val is not None else None,
                          init=current if how != "new" else None)
        keep_rows = (how in ("kept", "base rows") and val is not None
                     and current.accuracy(val_features, val[1]) > probe.accuracy(val_features, val[1]))
        if not keep_rows:
            head.set_weights([probe.kernel.astype("float32"), probe.bias.astype("float32")])
            how = f"linear probe (L2 {probe.l2:g})"
    freeze_backbone(model, tc.freeze_backbone)
    start = {"head": how}
    if val is not None:
        metrics = accuracy_metrics(predict_logits(model, val[0]), val[1])
        start.update(val_top1=metrics["top1"], val_top5=metrics["top5"])
    return model, start
def check_continuation(card: dict, dataset: Dataset, tc: TrainConfig) -> None:
    """Refuses a continuation that would not be the same training: other data, classes or held-out split.

    The split is a function of the number of images, the validation fraction and the seed, so those must
    match the base's; otherwise images the base validated on would now be trained on.
    """
    recipe = (card.get("training") or {}).get("recipe") or {}
    data = card.get("dataset") or {}
    if not card.get("history") or not recipe:
        raise DatasetError(f"{card.get('name')} has no training history or recipe to continue")
    problems = []
    if data.get("name") != dataset.name:
        problems.append(f"it was trained on {data.get('name')!r}, not {dataset.name!r}")
    if list(card.get("class_names") or []) != list(dataset.class_names):
        problems.append("its class list differs from the dataset's")
    for key in ("validation_fraction", "seed", "train_subset"):
        if recipe.get(key) != getattr(tc, key):
            problems.append(f"its {key} was {recipe.get(key)!r}, this run's is {getattr(tc, key)!r}")
    n = len(dataset.x_train) if not tc.train_subset else min(tc.train_subset, len(dataset.x_train))
    if data.get("train_images", 0) + data.get("validation_images", 0) != n:
        problems.append(f"it saw {data.get('train_images', 0) + data.get('validation_images', 0)} "
                        f"train+validation images, this dataset has {n}")
    if tc.freeze_backbone:
        problems.append("a continuation trains the whole model (drop --freeze-backbone)")
    if problems:
        raise DatasetError(f"cannot continue {card.get('name')}: " + "; ".join(problems)
                         + " (use a plain fine-tune for a different setup)")


def _stage(training: dict) -> dict:
    return {k: training.get(k) for k in ("epochs", "steps", "wall_time_s", "images_per_second", "device",
                                         "recipe")}


def continued_record(base_card: dict, record: dict) -> dict:
    """`record` (a run that continued `base_card`'s training) as one run: the base's history then this
    run's, epochs numbered from the start and tagged with their stage; epochs, steps and wall time
    summed; images/s over the whole; `recipe` stays the first stage's, `stages` lists every stage."""
    before = [dict(e, stage=e.get("stage", 1)) for e in base_card.get("history") or []]
    first = base_card.get("training") or {}
    stages = [dict(s) for s in first.get("stages") or [_stage(first)]]
    new = record["training"]
    stages.append(_stage(new))
    history = before + [dict(e, epoch=e["epoch"] + len(before), stage=len(stages)) for e in record["history"]]
    wall = sum(s.get("wall_time_s") or 0 for s in stages)
    images = sum((s.get("images_per_second") or 0) * (s.get("wall_time_s") or 0) for s in stages)
    devices = list(dict.fromkeys(s.get("device") for s in stages if s.get("device")))
    training = {**new, "epochs": len(history),
                "planned_epochs": sum(s.get("epochs") or 0 for s in stages[:-1]) + new.get("planned_epochs", 0),
                "steps": sum(s.get("steps") or 0 for s in stages),
                "wall_time_s": round(wall, 1),
                "images_per_second": round(images / wall, 1) if wall > 0 else None,
                "device": "; ".join(devices), "recipe": stages[0]["recipe"], "stages": stages}
    return {**record, "history": history, "training": training}


def _finish(model, record, config, preset, dataset, out_dir, name, base) -> dict:
    from explorer.checkpoints import unique_dir, write_checkpoint
    logits = predict_logits(model, dataset.x_test) if len(dataset.x_test) else None
    test = accuracy_metrics(logits, dataset.y_test) if logits is not None else None
    metrics = dict(record["metrics"])
    if test is not None:
        metrics.update(test_top1=test["top1"], test_top5=test["top5"], test_per_class=test["per_class"],
                       test_count=test["count"])
    is_cifar = dataset.name in ("cifar10", "cifar100")
    card = {"variant": config.variant, "preset": preset, "config": config.to_dict(),
            "dataset": {"name": dataset.name, "num_classes": dataset.num_classes,
                        "source": "CIFAR python-pickle folder" if is_cifar else Path(dataset.source).name,
                        "train_images": record["training"]["train_images"],
                        "validation_images": record["training"]["validation_images"],
                        "test_images": int(len(dataset.x_test)),
                        "note": dataset.note},
            "class_names": list(dataset.class_names), "metrics": metrics,
            "history": record["history"], "training": record["training"], "base": base}
    folder = write_checkpoint(model, unique_dir(out_dir, name), card)
    return {"checkpoint": str(folder), "metrics": metrics, "history": record["history"],
            "training": record["training"],
            "test_predictions": logits.argmax(-1).tolist() if logits is not None else []}


def _default_help(name: str) -> str:
    recipe = {"epochs": f"about {FT_TARGET_STEPS} steps' worth, {FT_IMAGE_BUDGET} images at most", "batch_size": "scaled to the data (16-128)",
              "learning_rate": f"{FT_LEARNING_RATE}, or {FT_LEARNING_RATE_KNOWN} for classes the base knows",
              "weight_decay": str(FT_WEIGHT_DECAY)}
    new = getattr(TrainConfig, name)
    tuned = recipe.get(name, new)
    return f"{new} (with --base, the fine-tune recipe: {tuned})" if tuned != new else str(new)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m explorer.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="cifar-small", choices=sorted(PRESETS))
    p.add_argument("--variant", default="spt_lsa", choices=VARIANTS)
    p.add_argument("--tau-mode", default="layer", choices=("layer", "head"))
    p.add_argument("--base", help="checkpoint folder or Hub id to fine-tune instead of a fresh model")
    p.add_argument("--continue", dest="extend", action="store_true",
                   help="with --base: a second stage of the base's own training (same data and split); "
                        "the new checkpoint's history and epochs include the base's")
    p.add_argument("--dataset", default="cifar10",
                   help="cifar10, cifar100, a folder of class folders, or a zip of them")
    p.add_argument("--data-dir", help="folder holding the CIFAR pickles (else $EXPLORER_DATA_DIR, "
                                      "~/.keras/datasets, then a download)")
    p.add_argument("--out", default="checkpoints", help="where the checkpoint folder is written")
    p.add_argument("--name", help="checkpoint folder name (default: <dataset>-<variant>)")
    p.add_argument("--epochs", type=int, help="default: " + _default_help("epochs"))
    p.add_argument("--batch-size", type=int, help="default: " + _default_help("batch_size"))
    p.add_argument("--lr", type=float, help="default: " + _default_help("learning_rate"))
    p.add_argument("--weight-decay", type=float, help="default: " + _default_help("weight_decay"))
    p.add_argument("--warmup", type=float, help="default: " + _default_help("warmup_fraction"))
    p.add_argument("--label-smoothing", type=float, help="default: " + _default_help("label_smoothing"))
    p.add_argument("--val-fraction", type=float, help="default: " + _default_help("validation_fraction"))
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--mixup", type=float, default=0.0, metavar="ALPHA",
                   help="mixup with lam ~ Beta(ALPHA, ALPHA) (0 = off; 0.2-0.8 is usual)")
    p.add_argument("--cutmix", type=float, default=0.0, metavar="ALPHA",
                   help="CutMix with lam ~ Beta(ALPHA, ALPHA) (0 = off; 1.0 is usual); with --mixup too, "
                        "each mixed batch uses one of the two at random")
    p.add_argument("--mix-prob", type=float, default=1.0,
                   help="fraction of batches that are mixed when --mixup or --cutmix is on")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--subset", type=int, help="train on this many images only")
    p.add_argument("--test-subset", type=int, help="evaluate on this many test images only")
    p.add_argument("--max-seconds", type=float, help="stop after this much training time")
    p.add_argument("--max-steps", type=int, help="stop after this many optimizer steps")
    p.add_argument("--freeze-backbone", action="store_true")
    p.add_argument("--threads", type=int, help="CPU threads for TensorFlow (default: all)")
    p.add_argument("--distribute", action="store_true",
                   help="train data-parallel over every device Keras' JAX backend sees (KERAS_BACKEND=jax): "
                        "each batch split evenly between them, so the batch size must be a multiple of "
                        "their number")
    p.add_argument("--backup", metavar="DIR",
                   help="folder where the run's state is kept after every epoch: the same command run again "
                        "resumes from the last completed epoch (a backup of another run is refused); "
                        "removed once the checkpoint is written")
    p.add_argument("--verbose", type=int, default=1)
    args = p.parse_args(argv)
    if args.extend and not args.base:
        p.error("--continue needs --base: the checkpoint whose training it continues")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    # Only what was given on the command line; the rest comes from the recipe (TrainConfig's defaults, or
    # for a fine-tune the short recipe, which needs the dataset's size first).
    given = {k: v for k, v in dict(epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.lr,
                                   weight_decay=args.weight_decay, warmup_fraction=args.warmup,
                                   label_smoothing=args.label_smoothing,
                                   validation_fraction=args.val_fraction).items() if v is not None}
    given.update(augment=not args.no_augment, mixup_alpha=args.mixup, cutmix_alpha=args.cutmix,
                 mix_prob=args.mix_prob, seed=args.seed, max_seconds=args.max_seconds, max_steps=args.max_steps,
                 train_subset=args.subset, freeze_backbone=args.freeze_backbone)
    try:
        tc = TrainConfig(**given)  # refuses a bad recipe before anything is loaded
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
        try:
            import tensorflow as tf
            tf.config.threading.set_intra_op_parallelism_threads(args.threads)
            tf.config.threading.set_inter_op_parallelism_threads(args.threads)
        except ImportError:
            pass
    from explorer.backup import BackupError
    from explorer.checkpoints import CheckpointError
    try:
        devices = distribute_over_devices() if args.distribute else 1  # before any model is built
        if not args.base or args.batch_size:  # else the recipe picks the batch size once the data is read
            check_batch_split(tc.batch_size, devices)
        dataset = load_dataset(args.dataset, args.data_dir)
        if args.test_subset:
            dataset = dataset.subset(test=args.test_subset, seed=args.seed)
        print(f"dataset {dataset.name}: {len(dataset.x_train)} train / {len(dataset.x_test)} test images, "
              f"{dataset.num_classes} classes; device {device_name()}"
              + (f", data-parallel over {devices} devices" if args.distribute else ""), flush=True)
        if args.base and not args.extend:
            from explorer.checkpoints import read_card, resolve
            n = min(len(dataset.x_train), args.subset or len(dataset.x_train))
            base_classes = read_card(resolve(args.base)).get("class_names") or []  # the card; the model once
            tc = fine_tune_recipe(n, known_classes=base_rows(base_classes, dataset.class_names) is not None,
                                  **given)
            print(f"recipe: {tc.epochs} epochs of batch {tc.batch_size}, learning rate {tc.learning_rate}, "
                  f"head {tc.head_init}{', backbone frozen' if tc.freeze_backbone else ''}", flush=True)
        if args.base:
            result = fine_tune(args.base, dataset, tc, args.out, args.name, verbose=args.verbose,
                               backup=args.backup, extend=args.extend)
        else:
            config = get_preset(args.preset, variant=args.variant, tau_mode=args.tau_mode)
            result = train_new(config, args.preset, dataset, tc, args.out, args.name, verbose=args.verbose,
                               backup=args.backup)
    except (BackupError, CheckpointError, DatasetError, DistributionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    m = result["metrics"]
    print(f"wrote {result['checkpoint']}: test top-1 {m.get('test_top1', float('nan')):.4f}, "
          f"top-5 {m.get('test_top5', float('nan')):.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
