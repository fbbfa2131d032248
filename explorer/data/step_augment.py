"""Augmentation inside the training step: Keras' own image layers (RandAugment, RandomErasing) in front of the
model being trained, so they run in the compiled step on TensorFlow and JAX alike.

The numpy batches (explorer.data.augment: crop, flip, then mixup or CutMix) come first; these layers then act on
each batch image by image. At inference they are the identity, and the checkpoint holds the model alone.
"""

from __future__ import annotations

import keras
import numpy as np

from explorer.data.autoaugment import AutoAugmentCIFAR10
from explorer.model.config import CIFAR_MEAN

# Random erasing as the authors' code draws it (utils/random_erasing.py): a box of 2-40 % of the image,
# filled with one colour; here the grey of CIFAR's mean (Keras takes a per-channel fill on TensorFlow only).
ERASED_AREA = (0.02, 0.4)
ERASED_FILL = round(sum(CIFAR_MEAN) / len(CIFAR_MEAN), 1)


def augmentation_block(randaugment: float = 0.0, random_erasing: float = 0.0,
                       fill: float = ERASED_FILL, autoaugment: bool = False) -> keras.Sequential | None:
    """The recipe's in-step augmentations on raw 0-255 images, or None when all are off.

    Args:
        randaugment: Keras RandAugment's `factor` (0 = off): two of its eleven operations per batch, each
            image at its own magnitude up to this fraction of the operation's range.
        random_erasing: probability (0 = off) that an image gets one box of ERASED_AREA erased.
        fill: the erased box's grey level on the 0-255 scale.
        autoaugment: AutoAugment's CIFAR-10 policy (explorer.data.autoaugment), each image its own
            sub-policy, before the erasing (in place of RandAugment).
    """
    layers = []
    if autoaugment:
        # float32 whatever the global policy: its levels are whole numbers, which bfloat16 does not keep
        layers.append(AutoAugmentCIFAR10(name="autoaugment", dtype="float32"))
    if randaugment:
        layers.append(keras.layers.RandAugment(value_range=(0, 255), factor=randaugment, name="randaugment"))
    if random_erasing:
        # A (p, p) factor: every image is erased with probability exactly p (a single number p would draw
        # each image's probability from [0, p]).
        layers.append(keras.layers.RandomErasing(factor=(random_erasing, random_erasing), scale=ERASED_AREA,
                                                 fill_value=float(fill), value_range=(0, 255),
                                                 name="random_erasing"))
    if not layers:
        return None
    block = keras.Sequential(layers, name="step_augmentation")
    if keras.backend.backend() == "jax":
        # Keras marks its rotation, translation and shear layers as not compilable (TensorFlow's projective
        # transform has no XLA kernel); on JAX they compile, and one such mark would make the whole training
        # step run eagerly, op by op.
        for layer in block._flatten_layers():
            layer.supports_jit = True
    return block


def with_augmentation(model: keras.Model, block: keras.Sequential) -> keras.Model:
    """`model` behind `block`, to be compiled and fitted in its place: it trains `model`'s own weights, and
    at inference it computes exactly what `model` does."""
    inputs = keras.Input(model.input_shape[1:], name="image")
    return keras.Model(inputs, model(block(inputs)), name=f"{model.name}_augmented")


def seed_states(layer: keras.layers.Layer) -> list:
    """The random-state variables (Keras SeedGenerators') of a layer or model, in a fixed order."""
    return [v for v in layer.non_trainable_variables if v.name == "seed_generator_state"]


class Reseed(keras.callbacks.Callback):
    """Sets the random states of the training step (its augmentation block's, stochastic depth's) at the
    start of every epoch from (seed, epoch): what they draw is then a function of the recipe's seed, the
    epoch and the step, as the numpy batches are, so a run resumed from a backup draws what the
    uninterrupted run drew.

    Args:
        layer: the model being fitted (or the block alone).
        seed: the recipe's seed.
    """

    def __init__(self, layer: keras.layers.Layer, seed: int):
        super().__init__()
        self.states = seed_states(layer)
        self.seed = int(seed)

    def on_epoch_begin(self, epoch, logs=None):
        for k, state in enumerate(self.states):
            start = np.random.default_rng([self.seed, epoch, k, 13]).integers(1, 2 ** 31)
            state.assign(np.array([start, 0], dtype=state.dtype))
