"""LSA's two switches over a whole test set: the top-1 of an SPT + LSA model as trained, with its diagonal
mask off, with every head's temperature set back to sqrt(d_k), and both, on the same weights. Measured once
per shipped model by tools/make_lsa_switches.py into explorer/shipped/lsa_switches.json (keyed by the
weights' SHA-256); the Attention tab shows the row of a model in a slot."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import keras
import numpy as np

from explorer.analysis.corruptions import weights_digest
from explorer.core.atomic import write_text
from explorer.model.models import attention_layers
from explorer.model.probe import what_if_logits_model

SHIPPED = Path(__file__).resolve().parents[1] / "shipped" / "lsa_switches.json"
# (name, every head's tau set to sqrt(d_k), diagonal mask on): the four settings, as trained first.
SETTINGS = (("as trained", False, True), ("mask off", False, False), ("τ = √d_k", True, True),
            ("τ = √d_k, mask off", True, False))
BATCH = 250


@dataclass
class SwitchRow:
    """One model's top-1 under each of SETTINGS, on `count` images of `dataset`."""

    name: str
    weights: str                 # SHA-256 of its weights file (explorer.analysis.corruptions.weights_digest)
    dataset: str
    count: int
    top1: dict[str, float]       # setting name -> top-1
    tau_ratio: float             # the learned tau over sqrt(d_k), mean over layers and heads

    def to_json(self) -> dict:
        return {"name": self.name, "weights": self.weights, "dataset": self.dataset, "count": self.count,
                "top1": self.top1, "tau_ratio": self.tau_ratio}

    @classmethod
    def from_json(cls, data: dict) -> SwitchRow:
        return cls(str(data["name"]), str(data["weights"]), str(data["dataset"]), int(data["count"]),
                   {str(k): float(v) for k, v in data["top1"].items()}, float(data["tau_ratio"]))


def lsa_layers(model) -> list:
    """The model's attention layers that learn a temperature (LSA's); empty for a vanilla ViT."""
    return [layer for layer in attention_layers(model) if getattr(layer, "tau", None) is not None]


def measure(model, images: np.ndarray, labels: np.ndarray, batch: int = BATCH, progress=None) -> dict[str, float]:
    """Top-1 of `model` (an SPT + LSA ViT of ours) on uint8 `images` under each of SETTINGS.

    The switches run as the app's what-if probe runs them (explorer.model.layers.attention_what_if, the mask
    per image); tau = sqrt(d_k) is written into this model's own tau weights, which are put back at the end,
    so pass a model no one else is using (a checkpoint loaded for this). `progress(fraction, message)`."""
    layers = lsa_layers(model)
    if not layers:
        raise ValueError(f"{model.name} has no LSA layer: nothing to switch")
    graph = what_if_logits_model(model)
    learned = [keras.ops.convert_to_numpy(layer.tau) for layer in layers]
    labels = np.asarray(labels).reshape(-1)
    out = {}
    try:
        for i, (name, reset_tau, mask) in enumerate(SETTINGS):
            for layer, tau in zip(layers, learned, strict=True):
                layer.tau.assign(np.full_like(tau, math.sqrt(layer._key_dim)) if reset_tau else tau)
            right = 0
            for start in range(0, len(images), batch):
                x = images[start:start + batch].astype("float32")
                n = len(x)
                logits = graph.predict_on_batch([x, np.ones((n,), "float32"), np.full((n,), float(mask), "float32")])
                right += int((np.asarray(logits).argmax(-1) == labels[start:start + n]).sum())
                if progress:
                    progress((i + (start + n) / len(images)) / len(SETTINGS), f"{name}: {start + n:,} images")
            out[name] = right / len(images)
    finally:
        for layer, tau in zip(layers, learned, strict=True):
            layer.tau.assign(tau)
    return out


def tau_ratio(model) -> float:
    """The model's learned temperatures over sqrt(d_k), the mean over its layers and heads."""
    return float(np.mean([keras.ops.convert_to_numpy(layer.tau) / math.sqrt(layer._key_dim)
                          for layer in lsa_layers(model)]))


def read(path: str | Path = SHIPPED) -> list[SwitchRow]:
    """The shipped rows (none when the file is absent)."""
    path = Path(path)
    if not path.is_file():
        return []
    return [SwitchRow.from_json(row) for row in json.loads(path.read_text())["models"]]


def write(rows: list[SwitchRow], path: str | Path = SHIPPED) -> None:
    write_text(Path(path), json.dumps({"settings": [name for name, *_ in SETTINGS],
                                       "models": [r.to_json() for r in rows]}, indent=1) + "\n")


@functools.lru_cache(maxsize=32)
def _digest(folder: str, identity) -> str:
    return weights_digest(folder)


def shipped_row(folder: str | Path, identity=None, path: str | Path = SHIPPED) -> SwitchRow | None:
    """The shipped row of the checkpoint in `folder` (by its weights' SHA-256), None when it was not
    measured. `identity` names the folder's files as loaded (a rewritten checkpoint is hashed again)."""
    digest = _digest(str(folder), identity)
    return next((r for r in read(path) if digest and r.weights == digest), None)
