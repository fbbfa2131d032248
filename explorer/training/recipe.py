"""The training recipe: TrainConfig (its values, checked), the default fine-tune's numbers (FINE_TUNE), the
named recipes, and what a recipe compiles a model with (the warmup-cosine AdamW, the smoothed loss, top-1 and
top-5). explorer.training.fitting runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

import keras

from explorer.model.models import PRECISIONS
from explorer.training.schedules import ScheduledAdamW, WarmUpCosine

# How a fine-tune's classifier starts (see finetune.choose_head): "auto" keeps the base's head for the base's
# own classes, takes the base's rows when the new classes are some of the base's, else fits a linear probe.
HEAD_INITS = ("auto", "probe", "new")


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
    # Augmentation inside the training step (explorer.data.step_augment), after the numpy crop, flip and mix:
    # Keras' RandAugment at this factor and random erasing with this probability (0 = off).
    randaugment: float = 0.0
    random_erasing: float = 0.0
    # AutoAugment's CIFAR-10 policy (explorer.data.autoaugment) inside the step, in place of RandAugment: each
    # image its own sub-policy, as the authors' code trains.
    autoaugment: bool = False
    # Repeated augmentation: every epoch passes over the training images this many times, each pass in its
    # own order and every pass augmented anew (the authors' RASampler as their main.py calls it).
    repeats: int = 1
    # The named recipe (RECIPES) these values started from, for the card; None: TrainConfig's defaults.
    name: str | None = None
    # The fast path (explorer.data.device_batches; for a new model): the compute precision (models.PRECISIONS),
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
        if not isinstance(self.autoaugment, bool):
            raise ValueError(f"autoaugment must be True or False, got {self.autoaugment!r}")
        if self.autoaugment and self.randaugment:
            raise ValueError("autoaugment and randaugment are two augmentation policies: give one (randaugment 0 "
                             "turns RandAugment off; the recipe paper-autoaugment is the paper's with AutoAugment)")
        if not isinstance(self.repeats, int) or isinstance(self.repeats, bool) or self.repeats < 1:
            raise ValueError(f"repeats must be a positive integer, got {self.repeats!r}")
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


@dataclass(frozen=True)
class FineTuneRecipe:
    """The default fine-tune's numbers: its steps, images, learning rates and weight decay
    (explorer.training.tuning.fine_tune_recipe), and what its decision needs to keep a fine-tuned epoch
    (explorer.training.head.settle). The page's help and the command line's quote them from FINE_TUNE."""

    target_steps: int
    image_budget: int
    learning_rate: float
    learning_rate_known: float
    weight_decay: float
    margin_z: float
    min_validation_images: int


FINE_TUNE = FineTuneRecipe(
    # About this many optimizer steps in all, but no more than `image_budget` images, at a peak learning rate
    # that depends on whether the new classes are classes the base already knows. Since the run starts from the
    # better of the base's rows and the linear probe (LP-FT), 4,000 images keep it at or above the probe on both
    # zips of bench/finetune_quality.py (8,000 did not: 0.987 of the probe's accuracy on the known classes), in
    # half the time (bench/finetune_speed.py).
    target_steps=500,
    image_budget=4000,
    learning_rate=5e-4,        # a task the base never saw: its features have to move
    learning_rate_known=1e-4,  # the base's own classes: its features are already tuned for them
    weight_decay=0.05,
    # A fine-tuned epoch replaces the head it started from only when, on the same validation images, the images
    # it gains outnumber those it loses by this many standard errors (settle): a few hundred images judge a
    # choice between epochs to within several points, which is as large as the gains being chosen between.
    margin_z=1.0,
    # Fewer validation images than this cannot tell a fine-tuned model from its start: one image is then worth
    # more than 5 points, and a real gain of 10 points is under one standard error of the paired count
    # (McNemar's, with a fifth of the images answered differently). The tab says so before a Start; the decision
    # says so after it.
    min_validation_images=20,
)


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
    # The same with AutoAugment's CIFAR-10 policy itself (explorer.data.autoaugment, image by image) where
    # "paper" has Keras' RandAugment: the authors' augmentation. ("paper" keeps its meaning: the committed
    # models and states were trained with it, and a backup resumes only under the recipe it was written with.)
    "paper-autoaugment": dict(epochs=100, batch_size=128, learning_rate=1e-3, weight_decay=5e-2,
                              warmup_fraction=0.1, label_smoothing=0.1, augment=True, autoaugment=True,
                              random_erasing=0.25, mixup_alpha=1.0, cutmix_alpha=1.0, mix_prob=0.5, repeats=3),
}


def compile_for_run(model, recipe: TrainConfig, num_classes: int, total_steps: int, reuse: bool = False) -> bool:
    """Compiles `model` for a run of `total_steps` steps of the recipe; returns whether it compiled anew.

    With `reuse`, a model compiled before for the same loss, metrics, weight decay and trainable weights keeps
    its compiled steps: its optimizer (ScheduledAdamW, whose schedule lives in variables) only restarts, so a
    repeat run traces and compiles nothing."""
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
    # The optimizer's slots now, not in the first step: Keras (TensorFlow backend, no distribution) builds it
    # while tracing the train step, and a tf.function that creates variables is traced twice, so every new
    # run would trace its step twice (a tiny ViT's fit: 2 traces, 7.2 s; built here: 1).
    model.optimizer.build(model.trainable_variables)
    model._explorer_compiled = key if reuse else None
    return True

