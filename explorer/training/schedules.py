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


@keras.saving.register_keras_serializable(package="explorer")
class ScheduledAdamW(keras.optimizers.AdamW):
    """AdamW with WarmUpCosine's schedule held in its own variables, so that one compiled train step serves run
    after run: `restart` sets a new peak, length and warmup and clears the moments and the step count, as a
    new optimizer would start, without tracing or compiling anything again (a schedule object's numbers are
    constants of the compiled step; variables are its inputs).

    Args:
        peak: the learning rate reached at the end of the warmup.
        total_steps: the step at which the rate reaches 0.
        warmup_steps: steps of linear warmup from 0 (0 = none).
        **kwargs: keras.optimizers.AdamW's arguments (weight_decay, beta_1, ...), but not learning_rate.
    """

    def __init__(self, peak=1e-3, total_steps=1, warmup_steps=0, **kwargs):
        kwargs.pop("learning_rate", None)
        super().__init__(learning_rate=float(peak), **kwargs)
        self._total_steps = self.add_variable((), keras.initializers.Constant(float(total_steps)), "float32",
                                              name="total_steps")
        self._warmup_steps = self.add_variable((), keras.initializers.Constant(float(warmup_steps)), "float32",
                                               name="warmup_steps")

    def restart(self, peak: float, total_steps: int, warmup_steps: int) -> None:
        """A new run: the schedule's numbers set, every moment and the step count back to 0."""
        for variable in self.variables:
            variable.assign(ops.zeros(variable.shape, variable.dtype))
        self._learning_rate.assign(float(peak))
        self._total_steps.assign(float(total_steps))
        self._warmup_steps.assign(float(warmup_steps))

    def _get_current_learning_rate(self):
        step = ops.cast(self._iterations, "float32")
        peak, warm = self._learning_rate, self._warmup_steps
        progress = ops.clip((step - warm) / ops.maximum(self._total_steps - warm, 1.0), 0.0, 1.0)
        cosine = 0.5 * peak * (1.0 + ops.cos(math.pi * progress))
        return ops.where(step < warm, peak * step / ops.maximum(warm, 1.0), cosine)

    def get_config(self):
        config = super().get_config()
        config.pop("learning_rate", None)
        return {**config, "peak": float(ops.convert_to_numpy(self._learning_rate)),
                "total_steps": int(ops.convert_to_numpy(self._total_steps)),
                "warmup_steps": int(ops.convert_to_numpy(self._warmup_steps))}
