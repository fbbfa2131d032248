"""The recipe's augmentations inside the training step (RandAugment or AutoAugment, random erasing), on
TensorFlow here and on JAX in a subprocess (what a GPU machine trains with)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from explorer.data.step_augment import ERASED_FILL, Reseed, augmentation_block, seed_states, with_augmentation
from tests.helpers import run_on_jax, tiny_config


def _traced(x) -> bool:
    """Whether `x` is a tensor being traced into a compiled function (not an eager value)."""
    if keras.backend.backend() == "jax":
        import jax
        return isinstance(x, jax.core.Tracer)
    import tensorflow as tf
    return not tf.executing_eagerly()


def in_step_report() -> dict:
    """Two training steps of a tiny model through explorer.training.fitting.fit with the in-step augmentations, their
    layers spied on, beside the same two steps without them: where the layers ran, and what they changed."""
    from explorer.data.datasets import Dataset, sample_set
    from explorer.model.models import build_vit
    from explorer.training.fitting import fit
    from explorer.training.recipe import TrainConfig

    sample = sample_set()
    data = Dataset("sample", sample.x_test[:64], sample.y_test[:64], sample.x_test[:0], sample.y_test[:0],
                   sample.class_names)
    recipe = dict(epochs=1, batch_size=32, validation_fraction=0.0, augment=False)
    start = build_vit(tiny_config(), 10).get_weights()
    from explorer.data.autoaugment import AutoAugmentCIFAR10
    calls = []
    originals = {cls: cls.call for cls in (keras.layers.RandAugment, keras.layers.RandomErasing, AutoAugmentCIFAR10)}
    kind = None

    def spy(cls):
        def call(self, data, training=True):
            if not isinstance(data, keras.KerasTensor):  # not the wrapper's symbolic construction
                calls.append({"layer": cls.__name__, "training": bool(training), "traced": _traced(data),
                              "kind": kind})
            return originals[cls](self, data, training=training)
        return call

    weights, names = {}, {}
    for kind, extra in (("plain", {}), ("in_step", dict(randaugment=0.5, random_erasing=0.5)),
                        ("autoaugment", dict(autoaugment=True, random_erasing=0.5))):
        model = build_vit(tiny_config(), 10)
        model.set_weights(start)
        for cls in originals:
            cls.call = spy(cls)
        try:
            record = fit(model, data, TrainConfig(**recipe, **extra), verbose=0)
        finally:
            for cls, original in originals.items():
                cls.call = original
        weights[kind], names[kind] = model.get_weights(), [layer.name for layer in model.layers]
        assert record.training.steps == 2
    return {"backend": keras.backend.backend(), "calls": calls,
            "weights_differ": all(any(not np.array_equal(a, b) for a, b in zip(weights["plain"], weights[k],
                                                                                strict=True))
                                  for k in ("in_step", "autoaugment")),
            "same_layers": names["plain"] == names["in_step"] == names["autoaugment"]}


def check_in_step(report: dict) -> None:
    # Both layers augmented in training mode, only ever on tensors being traced into the compiled training
    # step (never eagerly, never in numpy), and what they did changed what the model learned. (Keras may
    # also trace them at inference, for shapes: they are the identity there.)
    training = [c for c in report["calls"] if c["training"]]
    assert {c["layer"] for c in training if c["kind"] == "in_step"} == {"RandAugment", "RandomErasing"}
    assert {c["layer"] for c in training if c["kind"] == "autoaugment"} == {"AutoAugmentCIFAR10", "RandomErasing"}
    assert all(c["traced"] for c in training), report["calls"]
    assert report["weights_differ"]
    assert report["same_layers"]  # the trained model is the model alone: nothing of the block is saved


@pytest.mark.slow  # about 10 s or more (pytest.ini)
def test_the_augmentations_run_inside_the_training_step_on_tensorflow():
    report = in_step_report()
    assert report["backend"] == "tensorflow"
    check_in_step(report)


@pytest.mark.slow
def test_the_augmentations_run_inside_the_training_step_on_jax():
    report = run_on_jax("tests.test_step_augment:in_step_report", timeout=600)
    assert report["backend"] == "jax"
    check_in_step(report)


def test_no_block_when_both_are_off():
    assert augmentation_block(0.0, 0.0) is None
    assert [layer.name for layer in augmentation_block(0.3, 0.0).layers] == ["randaugment"]
    assert [layer.name for layer in augmentation_block(0.0, 0.25).layers] == ["random_erasing"]


def test_random_erasing_erases_one_grey_box_in_that_share_of_the_images():
    x = np.random.default_rng(0).integers(0, 256, (2000, 32, 32, 3)).astype("float32")
    x[x == ERASED_FILL] = 0  # no pixel is the fill's grey before erasing
    out = keras.ops.convert_to_numpy(augmentation_block(0.0, 0.25)(x, training=True))
    erased = (out == ERASED_FILL).all(axis=-1)
    share = erased.any(axis=(1, 2))
    assert abs(share.mean() - 0.25) < 4 * np.sqrt(0.25 * 0.75 / len(x))
    area = erased[share].mean(axis=(1, 2))
    assert 0.015 < area.min() and area.max() < 0.45  # one box of 2-40 % of the image
    np.testing.assert_array_equal(out[~erased], x[~erased])  # the rest untouched
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(augmentation_block(0.0, 0.25)(x, training=False)),
                                  x)


def test_the_augmented_model_predicts_what_the_model_does():
    from explorer.model.models import build_vit
    model = build_vit(tiny_config(), 10)
    trainee = with_augmentation(model, augmentation_block(0.5, 0.5))
    x = np.random.default_rng(1).integers(0, 256, (4, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(trainee.predict_on_batch(x), model.predict_on_batch(x), rtol=1e-5, atol=1e-5)
    assert {id(w) for w in model.trainable_weights} == {id(w) for w in trainee.trainable_weights}


def test_reseed_makes_the_draws_a_function_of_seed_and_epoch():
    x = np.random.default_rng(2).integers(0, 256, (8, 32, 32, 3)).astype("float32")

    def draw(seed, epoch):
        block = augmentation_block(0.5, 0.5)
        block.build(x.shape)
        Reseed(block, seed).on_epoch_begin(epoch)
        return keras.ops.convert_to_numpy(block(x, training=True))

    assert len(seed_states(augmentation_block(0.5, 0.5))) >= 2
    np.testing.assert_array_equal(draw(0, 3), draw(0, 3))
    assert not np.array_equal(draw(0, 3), draw(0, 4)) and not np.array_equal(draw(0, 3), draw(1, 3))
