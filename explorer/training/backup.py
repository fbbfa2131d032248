"""Training that survives interruption: Keras' BackupAndRestore, written atomically, with our run state.

A backup folder holds one run's state after its last completed epoch:

    <dir>/run.json                   what run this is (model, data, recipe, base); another run is refused
    <dir>/training_metadata.json     Keras' epoch counter, plus the run's history, steps, wall time and
                                     best epoch (explorer.training.fit_state.BackupMetadata); written last, atomically
    <dir>/epoch-NNNN.weights.h5      model and optimizer weights after epoch NNNN (Keras save_weights)
    <dir>/best-NNNN.npz              the best validation epoch's weights, when the recipe keeps the best

A run killed at any moment (mid-epoch, mid-write) resumes from the last epoch whose files were complete
and ends with the same weights, history and metrics as if it had never stopped: the weights file is
renamed into place before the metadata that names it, and the metadata is replaced in one rename.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import keras
import numpy as np

from explorer.core import atomic
from explorer.training.fit_state import BackupMetadata, FitState

RUN = "run.json"
METADATA = "training_metadata.json"
# Recipe fields that do not change what is computed: a resumed run may stop at another time, the name of a
# recipe is only where its values came from, and how many steps go into one call changes no step.
_NOT_IDENTITY = ("max_seconds", "name", "time_limit", "steps_per_call")
# Recipe fields added after backups were first written, at their defaults: left out of the identity, so
# that a backup written before they existed still resumes.
_LATER_DEFAULTS = {"randaugment": 0.0, "random_erasing": 0.0, "repeats": 1, "precision": "float32",
                   "device_data": False, "autoaugment": False}


class BackupError(ValueError):
    """A backup folder that belongs to another run, or cannot be read; the message says why."""


def run_identity(model, dataset, recipe, base: dict | None = None) -> dict:
    """What makes two runs the same run: the architecture, the data and its split, the recipe, the base."""
    architecture = json.dumps(model.get_config(), sort_keys=True, default=str)
    classes = json.dumps(list(dataset.class_names))
    settings = {k: v for k, v in asdict(recipe).items()
              if k not in _NOT_IDENTITY and not (k in _LATER_DEFAULTS and v == _LATER_DEFAULTS[k])}
    return {"architecture": hashlib.sha256(architecture.encode()).hexdigest()[:16],
            "parameters": int(model.count_params()),
            "dataset": dataset.name, "train_images": int(len(dataset.x_train)),
            "classes": hashlib.sha256(classes.encode()).hexdigest()[:16],
            "recipe": settings, "base": base, "backend": keras.backend.backend()}


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key} was {a!r}, this run's is {b!r}")
    return out


def check(folder: str | os.PathLike, identity: dict) -> int:
    """The number of epochs a backup in `folder` has completed for the run `identity` (0 for an empty
    or new folder, which then belongs to this run). Raises BackupError for another run's backup."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise BackupError(f"backup {folder} is a file, not a folder")
    run = folder / RUN
    if not run.is_file():
        if folder.is_dir() and any(p.name.endswith(".weights.h5") for p in folder.iterdir()):
            raise BackupError(f"backup {folder} holds weights but no {RUN}: not a backup of this tool")
        folder.mkdir(parents=True, exist_ok=True)
        atomic.write_text(run, json.dumps(identity, indent=1))
        return 0
    try:
        saved = json.loads(run.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BackupError(f"backup {folder}: {RUN} cannot be read ({e})") from None
    problems = _differences(saved, json.loads(json.dumps(identity)))
    if problems:
        raise BackupError(f"backup {folder} is of a different run: " + "; ".join(problems)
                          + " (use another --backup folder, or delete this one to start over)")
    saved = read_metadata(folder)
    return saved.epoch if saved else 0


def read_metadata(folder: str | os.PathLike) -> BackupMetadata | None:
    """What a backup holds of its run after its last completed epoch, or None before one is complete."""
    path = Path(folder) / METADATA
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text())
        return BackupMetadata.from_json(meta) if meta else None
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise BackupError(f"backup {folder}: {METADATA} cannot be read ({type(e).__name__}: {e})") from None


class TrainingBackup(keras.callbacks.BackupAndRestore):
    """BackupAndRestore that writes each epoch's state atomically and restores the whole run with it.

    Args:
        backup_dir: the run's backup folder (checked with `check` first).
        batches: the training PyDataset (see batches.make_batches), whose batches are a function of (seed,
            epoch, index): told the epoch it resumes at, it draws the same order, crops, flips and mixes.
        history: the run's list of epoch records, extended in place on restore.
        state: the run's FitState (steps, wall time, best epoch), restored in place.

    Keras' own callback overwrites one weights file and then the metadata; a kill between the two, or
    during the first, leaves a backup that resumes from the wrong epoch or not at all. Here the weights
    go to a new file per epoch, renamed into place, and the metadata naming them is replaced last. The
    backup is kept when training ends (the caller removes it once the checkpoint is written).
    """

    def __init__(self, backup_dir, batches, history: list, state: FitState):
        super().__init__(str(backup_dir), save_freq="epoch", delete_checkpoint=False)
        self.folder = Path(backup_dir)
        self.batches, self.history, self.state = batches, history, state
        self.restored_epochs = 0
        self.batches_done = 0

    def _load_model(self):
        saved = read_metadata(self.folder)
        if saved is None:
            return
        self._weights_path = str(self.folder / saved.weights)
        super()._load_model()
        self.restored_epochs = saved.epoch
        self.history[:] = saved.history
        best_weights = None
        if saved.best is not None:
            with np.load(self.folder / saved.best_file) as arrays:
                best_weights = [arrays[f"w{i}"] for i in range(len(arrays.files))]
        self.state.restore(saved, best_weights)
        self.batches.begin(self.restored_epochs)

    def on_epoch_begin(self, epoch, logs=None):
        self.batches_done = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches_done += 1

    def _save_model(self):
        if self.batches_done < len(self.batches):
            return  # an epoch cut short (cancel, time budget) is not a completed epoch
        self.folder.mkdir(parents=True, exist_ok=True)
        epoch = self._current_epoch
        name = f"epoch-{epoch:04d}.weights.h5"
        with atomic.replacing(self.folder / name) as tmp:
            # Keras asks a weights file's name to end in .weights.h5
            self.model.save_weights(str(tmp), overwrite=True)
        wall = self.state.wall_before + time.perf_counter() - self.state.start
        best, best_name = self.state.best, None
        if best is not None:
            best_name = f"best-{best.epoch:04d}.npz"
            if not (self.folder / best_name).is_file():
                with atomic.replacing(self.folder / best_name) as tmp, open(tmp, "wb") as f:
                    np.savez(f, **{f"w{i}": w for i, w in enumerate(best.weights)})
        saved = BackupMetadata(epoch=epoch, weights=name, history=self.history, steps=self.state.steps,
                               wall_time_s=wall, best=best, best_file=best_name)
        atomic.write_text(self.folder / METADATA, json.dumps(saved.to_json(), indent=1))
        keep = {name, best_name}
        for path in self.folder.iterdir():
            if path.name.startswith(("epoch-", "best-", ".tmp-")) and path.name not in keep:
                path.unlink(missing_ok=True)


def remove(folder: str | os.PathLike) -> None:
    """Deletes a finished run's backup folder (its files only: a folder holding anything else is kept)."""
    folder = Path(folder)
    if not (folder / RUN).is_file():
        return
    for path in folder.iterdir():
        if path.name in (RUN, METADATA) or path.name.startswith(("epoch-", "best-", ".tmp-")):
            path.unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:
        pass
