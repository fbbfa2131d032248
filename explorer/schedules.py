"""The learning-rate schedule of the recipe, registered so a saved model's optimizer deserializes."""

from __future__ import annotations

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="explorer")
class WarmUpCosine(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to `peak`, then cosine decay to 0 at `total_steps` (keras.io vit_small_ds).

    Args:
        peak: the learning rate reached at the end of the warmup.
        total_steps: the step at which the rate reaches 0.
        warmup_steps: steps of linear warmup from 0 (0 = none).
    """

    def __init__(self, peak, total_steps, warmup_steps):
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warm = float(self.warmup_steps)
        progress = ops.clip((step - warm) / max(self.total_steps - warm, 1.0), 0.0, 1.0)
        cosine = 0.5 * self.peak * (1.0 + ops.cos(math.pi * progress))
        if not self.warmup_steps:
            return cosine
        return ops.where(step < warm, self.peak * step / warm, cosine)

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps, "warmup_steps": self.warmup_steps}
