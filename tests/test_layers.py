import json
import math
import re

import keras
import numpy as np
import pytest
from keras import ops

from explorer.model.layers import (
    SHIFTS,
    DropPath,
    ImagePreprocessing,
    LocalitySelfAttention,
    PatchEncoder,
    ShiftedPatchTokenization,
    extract_patches,
    shift_images,
)

RNG = np.random.default_rng(0)


def _round_trip(layer, *inputs, **call_kwargs):
    first = layer(*inputs, **call_kwargs)
    config = json.loads(json.dumps(keras.saving.serialize_keras_object(layer)))
    clone = keras.saving.deserialize_keras_object(config)
    clone(*inputs, **call_kwargs)
    clone.set_weights(layer.get_weights())
    assert clone.get_config() == layer.get_config()
    second = clone(*inputs, **call_kwargs)
    for a, b in zip(keras.tree.flatten(first), keras.tree.flatten(second), strict=True):
        np.testing.assert_array_equal(ops.convert_to_numpy(a), ops.convert_to_numpy(b))


@pytest.mark.parametrize("shifted", [True, False])
def test_tokenizer_config_round_trip(shifted):
    images = RNG.normal(size=(2, 16, 16, 3)).astype("float32")
    _round_trip(ShiftedPatchTokenization(4, 12, shifted=shifted, name="tok"), images)


def test_patch_encoder_and_preprocessing_round_trip():
    _round_trip(PatchEncoder(16, 8), RNG.normal(size=(2, 16, 8)).astype("float32"))
    _round_trip(ImagePreprocessing(16, (1.0, 2.0, 3.0), (4.0, 5.0, 6.0)),
                RNG.uniform(0, 255, size=(2, 32, 32, 3)).astype("float32"))


@pytest.mark.parametrize("tau_mode", ["layer", "head", None])
def test_lsa_config_round_trip(tau_mode):
    x = RNG.normal(size=(2, 9, 8)).astype("float32")
    _round_trip(LocalitySelfAttention(tau_mode=tau_mode, num_heads=2, key_dim=4), x, x,
                return_attention_scores=True)


def test_drop_path_config_round_trip():
    _round_trip(DropPath(0.2, seed=3, name="dp"), RNG.normal(size=(2, 5, 4)).astype("float32"))


def test_drop_path_is_the_identity_at_inference():
    x = RNG.normal(size=(64, 5, 4)).astype("float32")
    layer = DropPath(0.5, seed=1)
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(x)), x)
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(x, training=False)), x)


@pytest.mark.parametrize("rate", [0.1, 0.25, 0.5])
def test_drop_path_drops_whole_branches_per_image_at_its_rate(rate):
    n = 4000
    x = RNG.uniform(0.5, 1.5, size=(n, 6, 3)).astype("float32")
    out = ops.convert_to_numpy(DropPath(rate, seed=7)(x, training=True))
    dropped = (out == 0).all(axis=(1, 2))
    kept = np.isclose(out, x / (1 - rate), rtol=1e-6).all(axis=(1, 2))
    assert (dropped | kept).all()  # an image's whole branch goes, or all of it stays, scaled by 1 / (1 - rate)
    assert abs(dropped.mean() - rate) < 4 * math.sqrt(rate * (1 - rate) / n)
    # The same seed draws the same images; one layer draws anew at every call.
    np.testing.assert_array_equal(ops.convert_to_numpy(DropPath(rate, seed=7)(x, training=True)), out)
    layer = DropPath(rate, seed=7)
    first, second = (ops.convert_to_numpy(layer(x, training=True)) for _ in range(2))
    assert not np.array_equal(first == 0, second == 0)


@pytest.mark.parametrize("rate", [-0.1, 1.0, "0.1", None])
def test_drop_path_refuses_a_rate_outside_0_1(rate):
    with pytest.raises(ValueError, match=f"rate must be in \\[0, 1\\), got {re.escape(repr(rate))}"):
        DropPath(rate)


def test_lsa_without_mask_at_sqrt_dk_equals_multi_head_attention():
    x = RNG.normal(size=(3, 10, 16)).astype("float32")
    mha = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)
    expected, expected_scores = mha(x, x, return_attention_scores=True)
    for tau_mode in ("layer", "head"):
        lsa = LocalitySelfAttention(tau_mode=tau_mode, diagonal_mask=False, num_heads=4, key_dim=8)
        lsa(x, x)
        for name in ("query_dense", "key_dense", "value_dense", "output_dense"):
            getattr(lsa, name).set_weights(getattr(mha, name).get_weights())
        np.testing.assert_allclose(lsa.tau.numpy(), math.sqrt(8))
        out, scores = lsa(x, x, return_attention_scores=True)
        np.testing.assert_allclose(ops.convert_to_numpy(out), ops.convert_to_numpy(expected), atol=1e-5)
        np.testing.assert_allclose(ops.convert_to_numpy(scores), ops.convert_to_numpy(expected_scores),
                                   atol=1e-6)


def test_lsa_diagonal_is_exactly_zero_and_rows_sum_to_one():
    x = RNG.normal(size=(2, 12, 16)).astype("float32")
    lsa = LocalitySelfAttention(tau_mode="head", num_heads=4, key_dim=8)
    _, scores = lsa(x, x, return_attention_scores=True)
    scores = ops.convert_to_numpy(scores)
    assert scores.shape == (2, 4, 12, 12)
    diagonal = np.diagonal(scores, axis1=-2, axis2=-1)
    assert np.all(diagonal == 0.0)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-6)
    assert (scores[..., ~np.eye(12, dtype=bool)] > 0).all()


def test_lsa_combines_a_caller_mask_with_the_diagonal():
    x = RNG.normal(size=(1, 6, 8)).astype("float32")
    lsa = LocalitySelfAttention(num_heads=2, key_dim=4)
    mask = np.ones((1, 6, 6), bool)
    mask[:, :, 0] = False
    _, scores = lsa(x, x, attention_mask=mask, return_attention_scores=True)
    scores = ops.convert_to_numpy(scores)
    assert np.all(scores[..., 0] == 0) and np.all(np.diagonal(scores, axis1=-2, axis2=-1) == 0)


def test_tau_per_head_scales_each_head():
    # Its own generator and weights: with the module's generator, what it drew depended on which tests ran
    # before it in the same process (xdist's split), and a near-tie of two keys could blunt head 0's one-hot.
    x = np.random.default_rng(126).normal(size=(1, 8, 16)).astype("float32")
    lsa = LocalitySelfAttention(tau_mode="head", num_heads=2, key_dim=8,
                                kernel_initializer=keras.initializers.GlorotUniform(seed=126))
    lsa(x, x)
    assert lsa.tau.shape == (2,)
    lsa.tau.assign([1e-3, 1e3])  # head 0 nearly one-hot, head 1 nearly uniform
    _, scores = lsa(x, x, return_attention_scores=True)
    scores = ops.convert_to_numpy(scores)[0]
    assert scores[0].max(-1).min() > 0.99
    np.testing.assert_allclose(scores[1][~np.eye(8, dtype=bool)], 1 / 7, atol=1e-2)


@pytest.mark.usefixtures("eager_steps")
@pytest.mark.parametrize("tau_mode", ["layer", "head"])
def test_tau_is_trainable_and_changes_after_one_step(tau_mode):
    from explorer.model.models import attention_layers, build_vit
    from tests.helpers import tiny_config
    model = build_vit(tiny_config(variant="lsa", tau_mode=tau_mode), 10)
    taus = [layer.tau for layer in attention_layers(model)]
    trainable = {id(w) for w in model.trainable_weights}
    assert taus and all(id(t) in trainable for t in taus)
    before = [t.numpy().copy() for t in taus]
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.uniform(0, 255, size=(8, 32, 32, 3)).astype("float32")
    model.train_on_batch(x, RNG.integers(0, 10, 8))
    assert all(np.all(t.numpy() != b) for t, b in zip(taus, before, strict=True))


@pytest.mark.parametrize("mode", SHIFTS)
def test_shift_moves_content_half_a_patch_with_zero_padding(mode):
    image = RNG.integers(1, 256, size=(1, 12, 12, 3)).astype("float32")
    shifted = ops.convert_to_numpy(shift_images(image, mode, 2))[0]
    dy = 2 if "down" in mode else -2
    dx = 2 if "right" in mode else -2
    for i in range(12):
        for j in range(12):
            si, sj = i - dy, j - dx
            expected = image[0, si, sj] if 0 <= si < 12 and 0 <= sj < 12 else 0
            np.testing.assert_array_equal(shifted[i, j], expected)


def test_tokenizer_patches_hold_the_original_and_four_shifts_in_order():
    image = RNG.integers(1, 256, size=(1, 8, 8, 3)).astype("float32")
    tokenizer = ShiftedPatchTokenization(4, 8, shifted=True)
    _, patches = tokenizer(image)
    patches = ops.convert_to_numpy(patches).reshape(1, 2, 2, 4, 4, 5, 3)
    views = [image[0]] + [ops.convert_to_numpy(shift_images(image, m, 2))[0] for m in SHIFTS]
    for v, view in enumerate(views):
        for r in range(2):
            for c in range(2):
                np.testing.assert_array_equal(patches[0, r, c, :, :, v], view[r * 4:(r + 1) * 4,
                                                                             c * 4:(c + 1) * 4])


def test_extract_patches_matches_keras_image_extract_patches():
    images = RNG.normal(size=(2, 12, 12, 15)).astype("float32")
    expected = ops.reshape(ops.image.extract_patches(images, 4, padding="valid"), (2, 9, -1))
    np.testing.assert_array_equal(ops.convert_to_numpy(extract_patches(images, 4)),
                                  ops.convert_to_numpy(expected))


def test_preprocessing_resizes_and_normalises():
    layer = ImagePreprocessing(16, (100.0, 100.0, 100.0), (50.0, 50.0, 50.0))
    out = ops.convert_to_numpy(layer(np.full((1, 32, 32, 3), 150, "uint8")))
    assert out.shape == (1, 16, 16, 3)
    np.testing.assert_allclose(out, 1.0, atol=1e-6)


@pytest.mark.parametrize("mode", SHIFTS)
def test_render_draws_the_same_shifts_as_the_layer(mode):
    from explorer.analysis import render
    image = RNG.integers(0, 256, size=(16, 16, 3)).astype("float32")
    expected = ops.convert_to_numpy(shift_images(image[None], mode, 3))[0]
    np.testing.assert_array_equal(render.shift_image(image, mode, 3), expected)
