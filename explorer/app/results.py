"""An image's probe results, computed once: per (model, image, what-if setting), so that moving the query or
the layer never reruns a model and a what-if costs one forward pass; and what the Compare tab reads of one."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict

import numpy as np

from explorer.app.models import LoadedModel
from explorer.model.config import ViTConfig
from explorer.model.probe import TAU_FACTORS, ProbeResult


def what_if_setting(loaded: LoadedModel, factor: float = 1.0, diagonal_mask: bool | None = None) -> tuple | None:
    """(factor, mask) when they change the model, None when they are its own (tau as learned, its mask).

    Raises ValueError for a factor outside TAU_FACTORS.
    """
    try:
        factor = float(factor)
    except (TypeError, ValueError):
        raise ValueError(f"the tau factor must be a number, got {factor!r}") from None
    low, high = TAU_FACTORS
    if not (np.isfinite(factor) and low <= factor <= high):
        raise ValueError(f"the tau factor must be between {low} and {high}, got {factor}")
    mask = loaded.probe.diagonal_mask if diagonal_mask is None else bool(diagonal_mask)
    return None if factor == 1.0 and mask == loaded.probe.diagonal_mask else (factor, mask)


class ResultCache:
    """Probe results per (model, image, what-if setting), so moving the query or the layer never reruns
    a model, and a what-if costs one forward pass per image and setting. A model is named by its identity:
    a checkpoint dropped by the store and loaded again finds its results, another model never does."""

    def __init__(self, capacity: int = 128):
        self.capacity = capacity
        self._items: OrderedDict[tuple, tuple[ProbeResult, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, loaded: LoadedModel, image: np.ndarray, factor: float = 1.0,
            diagonal_mask: bool | None = None) -> tuple[ProbeResult, float, bool]:
        """(result, seconds the model took (when it ran, for a cached result), whether it came from the cache).

        With the default factor and mask it is the learned model's probe; otherwise every layer's tau is
        multiplied by `factor` and the diagonal masked or not (None: as the model does), see WhatIfProbe.
        """
        setting = what_if_setting(loaded, factor, diagonal_mask)
        image_hash = hashlib.blake2b(np.ascontiguousarray(image).tobytes(), digest_size=16).digest()
        key = (loaded.identity, image_hash, setting)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return (*self._items[key], True)
        start = time.perf_counter()
        with loaded.lock:  # one call at a time per model; rendering happens outside
            result = loaded.probe(image[None]) if setting is None else loaded.what_if_probe()(image[None], *setting)
        elapsed = time.perf_counter() - start
        with self._lock:
            self._items[key] = (result, elapsed)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return result, elapsed, False


def top_k(loaded: LoadedModel, result: ProbeResult, k: int = 5) -> dict[str, float]:
    probs = result.probabilities[0]
    order = np.argsort(-probs)[:k]
    names = loaded.class_names
    return {names[i]: float(probs[i]) for i in order}


def query_patch(query_yx: tuple[float, float], config: ViTConfig) -> tuple[int, int]:
    """The (row, col) of the patch under pixel (y, x) of the model's raw input image."""
    y, x = query_yx
    grid = config.grid_size
    scale = grid / config.image_size
    row = int(np.clip(np.floor(float(y) * scale), 0, grid - 1))
    col = int(np.clip(np.floor(float(x) * scale), 0, grid - 1))
    return row, col
