"""Tests of explorer.analysis.evidence: occlusion evidence and shift/flip robustness, on tiny real models."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from explorer.analysis import evidence as ev
from explorer.analysis import robustness as rb
from explorer.model.models import build_vit
from explorer.model.probe import Probe, softmax
from tests.helpers import tiny_config

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def probes():
    """Untrained tiny models: 32 px images, a 4 x 4 grid of 8-pixel patches on the raw image."""
    out = {}
    for variant in ("vanilla", "spt_lsa"):
        config = tiny_config(variant=variant)
        out[variant] = Probe(build_vit(config, 10), config)
    return out


def half_constant_image(size: int = 32, value: int = 128) -> np.ndarray:
    """Left half `value` everywhere; right half random pixels whose mean is exactly `value` per channel,
    so the image's per-channel mean is exactly `value` and a mean-filled left patch is the image itself."""
    half = size // 2
    d = RNG.integers(1, 128, size=(size * half // 2, 3))
    right = np.concatenate([value + d, value - d])                  # pairs around value: mean exactly value
    right = np.stack([RNG.permutation(right[:, c]) for c in range(3)], axis=-1).reshape(size, half, 3)
    image = np.full((size, size, 3), value, np.uint8)
    image[:, half:] = right
    assert (image.reshape(-1, 3).mean(0) == value).all()
    return image


# --- occlusion -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["vanilla", "spt_lsa"])
def test_occluding_a_constant_region_changes_nothing(probes, variant):
    probe = probes[variant]
    image = half_constant_image()
    result = ev.occlusion(probe, image, fill="mean")
    assert result.drop.shape == (4, 4)
    # Mean-filling a patch of the constant half leaves the image bit-identical: its drop is exactly 0.
    np.testing.assert_array_equal(result.drop[:, :2], 0.0)
    # The other half carries signal, so the test would notice a map that is zero everywhere.
    assert np.abs(result.drop[:, 2:]).max() > 1e-4
    assert result.clean_probability == pytest.approx(softmax(probe(image).logits)[0].max(), abs=1e-5)


@pytest.mark.parametrize("fill", ["mean", "blur"])
def test_a_constant_image_has_no_evidence_and_no_nan(probes, fill):
    result = ev.occlusion(probes["spt_lsa"], np.full((32, 32, 3), 77, np.uint8), fill=fill, window=2)
    np.testing.assert_array_equal(result.drop, 0.0)
    c = result.concentration
    assert not result.has_evidence and c.share is None and c.spread is None and c.centre is None
    assert np.isfinite([c.total, c.uniform_share, c.uniform_spread]).all()


def test_the_whole_image_window_is_the_mean_image(probes):
    """window = grid: one window, the whole image replaced by its mean; every patch gets its drop."""
    probe = probes["vanilla"]
    image = RNG.integers(0, 256, size=(32, 32, 3)).astype(np.uint8)
    result = ev.occlusion(probe, image, window=4)
    clean = softmax(probe(image).logits)[0]
    mean_image = np.broadcast_to(image.reshape(-1, 3).mean(0), image.shape).astype(np.float32)
    occluded = softmax(probe(mean_image).logits)[0]
    t = result.target
    assert t == clean.argmax() and result.windows.shape == (1, 1)
    np.testing.assert_allclose(result.drop, np.full((4, 4), clean[t] - occluded[t]), atol=1e-5)


def test_blur_fill_is_the_blurred_image_in_the_window():
    image = RNG.integers(0, 256, size=(16, 16, 3)).astype(np.float32)
    blurred = ev.fill_image(image, "blur", sigma=2.0)
    assert blurred.shape == image.shape and blurred.std() < image.std()
    np.testing.assert_allclose(blurred.mean((0, 1)), image.mean((0, 1)), rtol=0.05)
    np.testing.assert_array_equal(ev.fill_image(np.full((8, 8, 3), 9.0), "blur", 3.0), 9.0)
    with pytest.raises(ValueError, match="fill must be one of"):
        ev.fill_image(image, "noise")


def synthetic_task(count: int, rng: np.random.Generator, patch=(1, 3)) -> tuple[np.ndarray, np.ndarray]:
    """16 px noise images; class 1 has a bright square filling patch `patch` of the 4 x 4 grid."""
    x = rng.integers(0, 150, size=(count, 16, 16, 3)).astype(np.uint8)
    y = rng.integers(0, 2, size=count)
    r, c = patch
    x[y == 1, 4 * r:4 * r + 4, 4 * c:4 * c + 4] = 255
    return x, y


@pytest.fixture(scope="module")
def one_patch_model():
    """A tiny SPT/LSA ViT trained for a few seconds on the synthetic task; it must learn it."""
    import keras
    keras.utils.set_random_seed(0)
    config = tiny_config(image_size=16, input_size=16, variant="spt_lsa")
    model = build_vit(config, 2)
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    x, y = synthetic_task(1024, np.random.default_rng(1))
    model.fit(x.astype("float32"), y, batch_size=64, epochs=6, verbose=0)
    probe = Probe(model, config)
    test_x, test_y = synthetic_task(128, np.random.default_rng(2))
    accuracy = (probe(test_x).logits.argmax(-1) == test_y).mean()
    assert accuracy > 0.95, f"the tiny model did not learn the synthetic task ({accuracy:.2f})"
    return probe, test_x, test_y


def test_the_deciding_patch_carries_the_evidence(one_patch_model):
    probe, x, y = one_patch_model
    bright = x[y == 1][:8]
    for fill in ("mean", "blur"):
        results = ev.occlusion_batch(probe, bright, target="label", labels=np.ones(len(bright), int), fill=fill)
        for r in results:
            assert r.target == 1 and r.target_rule == "label"
            assert np.unravel_index(r.drop.argmax(), r.drop.shape) == (1, 3), (fill, r.drop.round(3))
            assert np.clip(r.drop, 0, None)[1, 3] / r.concentration.total > 0.5
            assert r.concentration.share > 0.5
            # The centre of mass lies in that patch (rows 4-8, columns 12-16 of the 16 px image).
            cy, cx = r.concentration.centre
            assert 4 <= cy <= 8 and 12 <= cx <= 16


def test_batch_and_single_image_occlusion_agree(probes, images):
    probe = probes["spt_lsa"]
    # 17 copies per image, at most 40 per call: two images per forward call, three calls.
    batch = ev.occlusion_batch(probe, images[:5], window=1, fill="blur", max_batch=40)
    for image, together in zip(images[:5], batch, strict=True):
        alone = ev.occlusion(probe, image, window=1, fill="blur")
        assert alone.target == together.target
        np.testing.assert_allclose(alone.drop, together.drop, atol=1e-5)
        assert alone.concentration.share == pytest.approx(together.concentration.share, abs=1e-3)


def test_target_rules(probes, images):
    a, b = probes["vanilla"], probes["spt_lsa"]
    pair = ev.occlusion_pair([a, b], images[0])
    for probe, r in zip((a, b), pair.results, strict=True):
        assert r.target_rule == "top1" and r.target == r.top1 == softmax(probe(images[0]).logits)[0].argmax()
    assert pair.vmax == pytest.approx(max(r.drop.max() for r in pair.results))
    by_label = ev.occlusion_pair([a, b], images[0], target="label", label=7)
    assert [r.target for r in by_label.results] == [7, 7]
    assert all(r.target_name == "class 7" and r.target_rule == "label" for r in by_label.results)
    chosen = ev.occlusion(a, images[0], target=3, window=2)
    assert chosen.target == 3 and chosen.target_rule == "chosen" and chosen.windows.shape == (3, 3)
    with pytest.raises(ValueError, match="needs the images' true labels"):
        ev.occlusion(a, images[0], target="label")
    with pytest.raises(ValueError, match="class 10 is outside this model's 10 classes"):
        ev.occlusion(a, images[0], target=10)
    with pytest.raises(ValueError, match=r"takes \(32, 32, 3\) images, got \(1, 16, 16, 3\)"):
        ev.occlusion(a, np.zeros((16, 16, 3), np.uint8))
    with pytest.raises(ValueError, match="window must be a whole number of patches from 1 to 4"):
        ev.occlusion(a, images[0], window=5)


def test_a_bare_keras_model_gets_its_geometry_from_its_graph(probes):
    for variant, probe in probes.items():
        assert ev.geometry(probe.model) == ev.geometry(probe) == ev.Geometry.of(32, 4), variant


def test_occlusion_picture_shows_both_maps(probes, images):
    pair = ev.occlusion_pair([probes["vanilla"], probes["spt_lsa"]], images[1])
    picture = ev.occlusion_picture(pair, images[1], ["model A", "model B"], size=160)
    assert picture.dtype == np.uint8 and picture.shape[1] > 2 * 160
    assert "evidence" in ev.occlusion_caption(pair.results[0])


# --- geometry and concentration, by hand --------------------------------------------------------------


def test_patch_edges_round_when_patches_are_not_whole_pixels():
    geo = ev.Geometry.of(30, 4)
    assert geo.edges == (0, 8, 15, 22, 30)
    masks = ev.window_masks(geo, 1)
    assert masks.shape == (16, 30, 30)
    np.testing.assert_array_equal(masks.sum(0), 1)  # every pixel in exactly one patch
    assert masks[5].nonzero()[0].min() == 8 and masks[5].nonzero()[1].max() == 14  # patch (1, 1)
    assert ev.window_masks(geo, 3).shape == (4, 30, 30)


def test_window_drops_spread_to_the_patches_they_cover():
    windows = np.array([[1.0, 0.0], [0.0, 0.0]])   # 3 x 3 grid, 2 x 2 windows
    drop = ev.spread_to_patches(windows, 2)
    np.testing.assert_allclose(drop, [[1, 0.5, 0], [0.5, 0.25, 0], [0, 0, 0]])


def test_concentration_by_hand():
    geo = ev.Geometry.of(32, 8)  # 4 px patches, centres at 2, 6, 10, ...
    one = np.zeros((8, 8))
    one[2, 5] = 0.3
    one[0, 0] = -0.2  # a raise is not evidence
    c = ev.concentration(one, geo)
    assert c.top_k == 6 and c.share == 1.0 and c.spread == 0.0 and c.centre == (10.0, 22.0)
    assert c.total == pytest.approx(0.3) and c.uniform_share == 6 / 64
    two = np.zeros((8, 8))
    two[0, 0] = two[0, 2] = 0.1
    c = ev.concentration(two, geo)
    assert c.centre == pytest.approx((2.0, 6.0)) and c.spread == pytest.approx(4.0)
    c = ev.concentration(np.ones((8, 8)), geo)
    assert c.share == pytest.approx(6 / 64) and c.spread == pytest.approx(c.uniform_spread)
    none = ev.concentration(-np.ones((8, 8)), geo)
    assert not none.has_evidence and none.share is None and none.total == 0.0
    summary = ev.mean_concentration([SimpleNamespace(has_evidence=True, concentration=ev.concentration(one, geo)),
                                     SimpleNamespace(has_evidence=False, concentration=none)])
    assert summary["with_evidence"] == 1 and summary["images"] == 2 and summary["share"] == 1.0


# --- shifts and flips ---------------------------------------------------------------------------------


def test_shift_moves_the_content_as_documented():
    image = RNG.integers(1, 256, size=(6, 7, 3)).astype(np.uint8)  # no zeros: padding shows
    right = rb.shift(image, 0, 2, "zero")
    np.testing.assert_array_equal(right[:, 2:], image[:, :-2])
    assert (right[:, :2] == 0).all()
    up = rb.shift(image, -1, 0, "edge")
    np.testing.assert_array_equal(up[:-1], image[1:])
    np.testing.assert_array_equal(up[-1], image[-1])
    corner = rb.shift(image, 1, -3, "edge")
    np.testing.assert_array_equal(corner[1:, :-3], image[:-1, 3:])
    np.testing.assert_array_equal(corner[0, :-3], image[0, 3:])
    np.testing.assert_array_equal(rb.shift(image, 0, 0), image)
    batch = np.stack([image, image[::-1]])
    np.testing.assert_array_equal(rb.shift(batch, 0, 2)[1], rb.shift(image[::-1], 0, 2))
    np.testing.assert_array_equal(rb.flip(image), image[:, ::-1])
    with pytest.raises(ValueError, match="padding must be one of"):
        rb.shift(image, 1, 0, "wrap")


@pytest.mark.parametrize("padding", ["zero", "edge"])
def test_shift_zero_gives_the_unshifted_predictions_exactly(probes, cifar10, padding):
    probe = probes["spt_lsa"]
    x, y = cifar10.x_test[:12], cifar10.y_test[:12]
    r = rb.shift_robustness(probe, x, y, max_shift=2, padding=padding, batch_size=30)
    plain = probe.model.predict(x.astype("float32"), verbose=0).argmax(-1)
    assert r.top1.shape == (4, 3, 12)
    for d in range(4):
        np.testing.assert_array_equal(r.top1[d, 0], plain)
    assert r.unchanged[0] == 1.0 and (r.unchanged_by_direction[:, 0] == 1.0).all()
    assert r.accuracy[0] == (plain == y).mean()
    assert r.accuracy.shape == (3,) and r.accuracy_by_direction.shape == (4, 3)
    # Untrained, the model's answers do move with the image: the test can see a change.
    assert r.unchanged[1:].min() < 1.0 or r.flip_unchanged < 1.0


def test_a_mirror_symmetric_image_keeps_its_answer_under_flip(probes):
    half = RNG.integers(0, 256, size=(6, 32, 16, 3)).astype(np.uint8)
    symmetric = np.concatenate([half, half[:, :, ::-1]], axis=2)
    random = RNG.integers(0, 256, size=(6, 32, 32, 3)).astype(np.uint8)
    for probe in probes.values():
        r = rb.shift_robustness(probe, symmetric, max_shift=1)
        assert r.flip_unchanged == 1.0 and r.accuracy is None and r.flip_accuracy is None
        # On images that are not symmetric, the flip's answers are those of the explicit mirror images.
        mirrored = probe.model.predict(random[:, :, ::-1].astype("float32"), verbose=0).argmax(-1)
        np.testing.assert_array_equal(rb.shift_robustness(probe, random, max_shift=0).flip_top1, mirrored)


def test_batch_and_single_image_robustness_and_strip_agree(probes, images):
    a, b = probes["vanilla"], probes["spt_lsa"]
    together = rb.robustness_pair([a, b], images[:5], max_shift=2, batch_size=20)  # 2 images per call
    for i, image in enumerate(images[:5]):
        strip = rb.shift_strip([a, b], image, max_shift=2)
        assert strip.labels == ["-2 px", "-1 px", "0 px", "+1 px", "+2 px", "flip"] and strip.centre == 2
        for model, robust, answers in zip((a, b), together, strip.answers, strict=True):
            alone = rb.shift_robustness(model, image, max_shift=2)
            np.testing.assert_array_equal(alone.top1[..., 0], robust.top1[..., i])
            assert alone.flip_top1[0] == robust.flip_top1[i] == answers.top1[-1]
            right, left = robust.directions.index("right"), robust.directions.index("left")
            np.testing.assert_array_equal(answers.top1[2:5], robust.top1[right, :, i])
            np.testing.assert_array_equal(answers.top1[2::-1], robust.top1[left, :, i])
            np.testing.assert_allclose(answers.probability, softmax(model(strip.images).logits).max(-1), atol=1e-5)


def test_strip_shows_the_copies_the_models_saw(probes, images):
    strip = rb.shift_strip([probes["vanilla"]], images[2], max_shift=3, padding="edge", axis="vertical",
                           with_flip=False)
    assert strip.images.shape == (7, 32, 32, 3) and strip.images.dtype == np.uint8
    np.testing.assert_array_equal(strip.images[3], images[2])
    np.testing.assert_array_equal(strip.images[6], rb.shift(images[2], 3, 0, "edge"))
    picture = rb.strip_picture(strip, "A", cell=64)
    assert picture.shape[1] == 7 * 64 + 6 * 4
    with pytest.raises(ValueError, match="axis must be one of"):
        rb.shift_strip([probes["vanilla"]], images[2], axis="diagonal")


def test_robustness_rejects_bad_settings(probes, images):
    with pytest.raises(ValueError, match="max_shift must be a whole number"):
        rb.shift_robustness(probes["vanilla"], images[:2], max_shift=-1)
    with pytest.raises(ValueError, match="directions must be some of"):
        rb.shift_robustness(probes["vanilla"], images[:2], directions=("sideways",))
    with pytest.raises(ValueError, match="2 images but 3 labels"):
        rb.shift_robustness(probes["vanilla"], images[:2], labels=[0, 1, 2])
