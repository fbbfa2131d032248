"""AutoAugment's CIFAR-10 policy inside the training step (explorer.data.autoaugment) against the reference the
authors' code trains with: DeepVoltaire/AutoAugment's CIFAR10Policy on PIL images, written out here as the
oracle (its operations as that code calls PIL, with its ranges and grey fill)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from PIL import Image, ImageEnhance, ImageOps

from explorer.data import autoaugment
from explorer.data.autoaugment import OPERATIONS, POLICY, RANGES, AutoAugmentCIFAR10, apply_operation
from explorer.data.step_augment import Reseed, augmentation_block, seed_states

GREY = (128, 128, 128)


def pil_operation(image: np.ndarray, name: str, magnitude: float, sign: int) -> np.ndarray:
    """One operation of the reference's SubPolicy on a uint8 image, its random sign given."""
    img = Image.fromarray(image)
    if name == "shearX":
        out = img.transform(img.size, Image.AFFINE, (1, magnitude * sign, 0, 0, 1, 0), Image.BICUBIC, fillcolor=GREY)
    elif name == "shearY":
        out = img.transform(img.size, Image.AFFINE, (1, 0, 0, magnitude * sign, 1, 0), Image.BICUBIC, fillcolor=GREY)
    elif name == "translateX":
        out = img.transform(img.size, Image.AFFINE, (1, 0, magnitude * img.size[0] * sign, 0, 1, 0), fillcolor=GREY)
    elif name == "translateY":
        out = img.transform(img.size, Image.AFFINE, (1, 0, 0, 0, 1, magnitude * img.size[1] * sign), fillcolor=GREY)
    elif name == "rotate":  # rotate_with_fill: no sign drawn
        rot = img.convert("RGBA").rotate(magnitude)
        out = Image.composite(rot, Image.new("RGBA", rot.size, (128,) * 4), rot).convert(img.mode)
    elif name in ("color", "contrast", "sharpness", "brightness"):
        enhancer = {"color": ImageEnhance.Color, "contrast": ImageEnhance.Contrast,
                    "sharpness": ImageEnhance.Sharpness, "brightness": ImageEnhance.Brightness}[name]
        out = enhancer(img).enhance(1 + magnitude * sign)
    elif name == "posterize":
        out = ImageOps.posterize(img, int(magnitude))
    elif name == "solarize":
        out = ImageOps.solarize(img, magnitude)
    else:
        whole = {"autocontrast": ImageOps.autocontrast, "equalize": ImageOps.equalize, "invert": ImageOps.invert}
        out = whole[name](img)
    return np.asarray(out)


@pytest.fixture(scope="module")
def images():
    from explorer.data.datasets import sample_set
    return sample_set().x_test[:48]


@pytest.mark.parametrize("name", OPERATIONS)
def test_each_operation_is_pils(images, name):
    """Every operation at two levels and both signs on real images: the colour and lookup operations and the
    nearest-pixel geometric ones give PIL's levels exactly (autocontrast within one level, from PIL's float64
    arithmetic), shear is bilinear where PIL's is bicubic: the same grey fill, close in between."""
    n = len(images)
    for level in (3, 9):
        for sign in (1, -1):
            magnitude = float(RANGES[name][level])
            ref = np.stack([pil_operation(im, name, magnitude, sign) for im in images]).astype("float32")
            ours = keras.ops.convert_to_numpy(apply_operation(
                images.astype("float32"), np.full(n, OPERATIONS.index(name), "int32"),
                np.full(n, magnitude, "float32"), np.full(n, sign, "float32")))
            diff = np.abs(ours - ref)
            if name in ("shearX", "shearY"):
                assert np.mean(diff) < 4.0 and np.mean(diff == 0) > 0.2, (name, level, sign, np.mean(diff))
                # as much grey fill as PIL's, give or take the edge pixels bilinear blends with the fill
                assert abs(np.mean((ours == 128).all(-1)) - np.mean((ref == 128).all(-1))) < 0.03
            elif name == "autocontrast":
                assert diff.max() <= 1 and np.mean(diff) < 0.02, (level, sign)
            else:
                np.testing.assert_array_equal(ours, ref, err_msg=f"{name} level {level} sign {sign}")


def test_an_image_that_draws_nothing_is_left_as_it_is(images):
    out = keras.ops.convert_to_numpy(apply_operation(images.astype("float32"), np.full(len(images), -1, "int32"),
                                                     np.full(len(images), 0.3, "float32"),
                                                     np.ones(len(images), "float32")))
    np.testing.assert_array_equal(out, images)


def test_the_layer_draws_a_sub_policy_per_image_at_the_policys_rates(images):
    """On many copies of the sample, the share of images left unchanged is the policy's (the mean over its 25
    sub-policies of the chance that neither operation applies, less the few whose operation changes nothing),
    every image is one of its sub-policy's outcomes, and at inference the layer is the identity."""
    x = np.tile(images[:8], (250, 1, 1, 1)).astype("float32")  # 2,000 images
    layer = AutoAugmentCIFAR10(seed=3)
    out = keras.ops.convert_to_numpy(layer(x, training=True))
    unchanged = np.all(out == x, axis=(1, 2, 3))
    neither = np.mean([(1 - p[0]) * (1 - p[3]) for p in POLICY])  # 0.184
    assert neither - 0.03 < unchanged.mean() < neither + 0.05, unchanged.mean()
    assert out.min() >= 0 and out.max() <= 255 and np.array_equal(out, np.round(out))
    # not one draw for the batch: copies of one image come out differently
    assert len({out[k].tobytes() for k in range(0, len(x), 8)}) > 50
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x, training=False)), x)


def test_the_paper_autoaugment_recipe_and_its_block():
    from explorer.checkpoints.model_card import describe_augmentation
    from explorer.training.recipe import RECIPES, TrainConfig
    recipe = TrainConfig(**RECIPES["paper-autoaugment"])
    assert recipe.autoaugment and recipe.randaugment == 0
    paper = {k: v for k, v in RECIPES["paper"].items() if k != "randaugment"}
    assert {k: v for k, v in RECIPES["paper-autoaugment"].items() if k != "autoaugment"} == paper
    with pytest.raises(ValueError, match="autoaugment and randaugment are two augmentation policies"):
        TrainConfig(autoaugment=True, randaugment=0.5)
    with pytest.raises(ValueError, match="randaugment 0 turns RandAugment off; the recipe paper-autoaugment"):
        TrainConfig(**{**RECIPES["paper"], "autoaugment": True})  # --recipe paper --autoaugment: says the way out
    block = augmentation_block(0.0, 0.25, autoaugment=True)
    assert [layer.name for layer in block.layers] == ["autoaugment", "random_erasing"]
    assert block.layers[0].dtype_policy.compute_dtype == "float32"
    assert "AutoAugment's CIFAR-10 policy" in describe_augmentation(RECIPES["paper-autoaugment"])


def test_reseed_sets_the_policys_draws(images):
    x = images[:16].astype("float32")

    def draw(seed, epoch):
        block = augmentation_block(0.0, 0.0, autoaugment=True)
        block.build(x.shape)
        Reseed(block, seed).on_epoch_begin(epoch)
        return keras.ops.convert_to_numpy(block(x, training=True))

    assert len(seed_states(augmentation_block(0.0, 0.0, autoaugment=True))) == 1
    np.testing.assert_array_equal(draw(0, 3), draw(0, 3))
    assert not np.array_equal(draw(0, 3), draw(0, 4))


def test_the_table_is_the_policy():
    op, prob, mag = autoaugment._table()
    assert op.shape == (25, 2) and OPERATIONS[op[1, 0]] == "rotate" and prob[1, 0] == pytest.approx(0.7)
    assert mag[1, 0] == pytest.approx(30 * 2 / 9) and mag[21, 0] == pytest.approx(150 / 331)
