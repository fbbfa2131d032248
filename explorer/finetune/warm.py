"""The models a long-lived worker process keeps between jobs, each with its compiled steps: a repeat run of
the same shape loads nothing and compiles nothing, and starts from the base's own weights every time."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np

from explorer.checkpoints.store import checkpoint_identity, load_checkpoint
from explorer.model.models import HEAD, features_model, freeze_backbone, replace_head


class WarmModel:
    """One base checkpoint, loaded and shaped for a number of classes (its own head, or a new one of that
    size) and frozen or not, as a long-lived worker keeps it: `model` keeps its compiled steps from run to
    run, `restore()` puts the base's weights back before each run, so nothing of an earlier run (its data,
    its trained weights, its optimizer state) reaches the next."""

    def __init__(self, base: str | Path, num_classes: int, frozen: bool):
        model, self.card = load_checkpoint(base)
        head = model.get_layer(HEAD)
        self.base_head = tuple(np.asarray(w) for w in head.get_weights())
        if model.output_shape[-1] != num_classes:
            model = replace_head(model, num_classes)
        self.model = freeze_backbone(model, frozen)
        self.features = features_model(model)
        head_weights = {id(v) for v in self.model.get_layer(HEAD).weights}
        self._backbone = [v for v in self.model.weights if id(v) not in head_weights]
        self._saved = [np.asarray(v.numpy()) for v in self._backbone]

    def restore(self) -> None:
        for variable, value in zip(self._backbone, self._saved, strict=True):
            variable.assign(value)


class WarmModels:
    """The models a long-lived fine-tuning worker keeps between runs (serve.py): one
    WarmModel per (base checkpoint as it is on disk, number of classes, frozen backbone), the least recently
    used dropped beyond `size`. A repeat run of the same shape then loads nothing and compiles nothing."""

    def __init__(self, size: int = 4):
        self.size = size
        self._models: OrderedDict = OrderedDict()
        self.loads = 0

    @staticmethod
    def _key(base: str | Path, num_classes: int, frozen: bool) -> tuple:
        return checkpoint_identity(base), int(num_classes), bool(frozen)  # the app's caches name a checkpoint so too

    def get(self, base: str | Path, num_classes: int, frozen: bool) -> WarmModel:
        key = self._key(base, num_classes, frozen)
        warm = self._models.pop(key, None)
        if warm is None:
            warm = WarmModel(base, num_classes, frozen)
            self.loads += 1
        else:
            warm.restore()
        self._models[key] = warm
        while len(self._models) > self.size:
            self._models.popitem(last=False)
        return warm
