"""A model's answers over many images and their accuracy: predict_logits in fixed-size batches (one compiled
shape per model, split evenly over the data-parallel devices), accuracy_metrics (an Accuracy) from the logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.core.devices import data_parallel_devices

# predict_logits' batch: every batch has this many images (the last topped up), so one compiled predict
# step serves any number of images.
PREDICT_BATCH = 256


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


@dataclass(frozen=True)
class Accuracy:
    """How often a model is right on labelled images: its top-1 and top-5 (the top-k with k = the number of
    classes, when under 5), top-1 per class (None for a class with no image) and the number of images."""

    top1: float
    top5: float
    per_class: list[float | None]
    count: int


def accuracy_metrics(logits: np.ndarray, y: np.ndarray) -> Accuracy:
    y = np.asarray(y)
    num_classes = logits.shape[-1]
    top1 = logits.argmax(-1) == y
    k = min(5, num_classes)
    topk = (np.argsort(-logits, axis=-1)[:, :k] == y[:, None]).any(-1)
    per_class = [float(top1[y == c].mean()) if (y == c).any() else None for c in range(num_classes)]
    return Accuracy(float(top1.mean()), float(topk.mean()), per_class, int(len(y)))
