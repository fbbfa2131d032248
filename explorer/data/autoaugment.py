"""AutoAugment's CIFAR-10 policy (Cubuk et al. 2019) as a Keras layer that runs inside the compiled training
step, image by image, on TensorFlow and JAX alike: the augmentation the authors' code trains with
(aanna0701/SPT_LSA_ViT, main.py: `CIFAR10Policy()` from DeepVoltaire/AutoAugment, after crop and flip).

Each image draws one of the policy's 25 sub-policies; each of its two operations then applies with its own
probability at its fixed magnitude, the second after the first, with a random sign where the reference draws one
(shear, translation, colour, contrast, brightness, sharpness; rotation turns counter-clockwise only, as there).
The operations follow PIL's as the reference calls them, on 0-255 images, rounded to whole levels after each
one as PIL's uint8 images are: the colour operations match PIL's to the level (sharpness to within one), the
geometric ones up to interpolation (shear is bilinear here, bicubic there), with the reference's grey fill
(128). Keras has no AutoAugment; its RandAugment, which stood in for it, draws far stronger geometric
operations (rotations up to 180 degrees, translations up to half the image) for a whole batch at a time.

Every operation is computed for the whole batch and each image keeps the one it drew: on a GPU that is a few
hundred element-wise passes over 32 x 32 images, and no step depends on the images' data for its shape.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

# The policy (DeepVoltaire/AutoAugment's CIFAR10Policy): (probability, operation, magnitude level) twice.
POLICY = (
    (0.1, "invert", 7, 0.2, "contrast", 6), (0.7, "rotate", 2, 0.3, "translateX", 9),
    (0.8, "sharpness", 1, 0.9, "sharpness", 3), (0.5, "shearY", 8, 0.7, "translateY", 9),
    (0.5, "autocontrast", 8, 0.9, "equalize", 2), (0.2, "shearY", 7, 0.3, "posterize", 7),
    (0.4, "color", 3, 0.6, "brightness", 7), (0.3, "sharpness", 9, 0.7, "brightness", 9),
    (0.6, "equalize", 5, 0.5, "equalize", 1), (0.6, "contrast", 7, 0.6, "sharpness", 5),
    (0.7, "color", 7, 0.5, "translateX", 8), (0.3, "equalize", 7, 0.4, "autocontrast", 8),
    (0.4, "translateY", 3, 0.2, "sharpness", 6), (0.9, "brightness", 6, 0.2, "color", 8),
    (0.5, "solarize", 2, 0.0, "invert", 3), (0.2, "equalize", 0, 0.6, "autocontrast", 0),
    (0.2, "equalize", 8, 0.6, "equalize", 4), (0.9, "color", 9, 0.6, "equalize", 6),
    (0.8, "autocontrast", 4, 0.2, "solarize", 8), (0.1, "brightness", 3, 0.7, "color", 0),
    (0.4, "solarize", 5, 0.9, "autocontrast", 3), (0.9, "translateY", 9, 0.7, "translateY", 9),
    (0.9, "autocontrast", 2, 0.8, "solarize", 3), (0.8, "equalize", 8, 0.1, "invert", 3),
    (0.7, "translateY", 9, 0.9, "autocontrast", 1),
)
# Each operation's magnitude at levels 0-9 (the reference's `ranges`); translations as a fraction of the side.
RANGES = {"shearX": np.linspace(0, 0.3, 10), "shearY": np.linspace(0, 0.3, 10),
          "translateX": np.linspace(0, 150 / 331, 10), "translateY": np.linspace(0, 150 / 331, 10),
          "rotate": np.linspace(0, 30, 10), "color": np.linspace(0.0, 0.9, 10),
          "posterize": np.round(np.linspace(8, 4, 10), 0), "solarize": np.linspace(256, 0, 10),
          "contrast": np.linspace(0.0, 0.9, 10), "sharpness": np.linspace(0.0, 0.9, 10),
          "brightness": np.linspace(0.0, 0.9, 10), "autocontrast": np.zeros(10), "equalize": np.zeros(10),
          "invert": np.zeros(10)}
OPERATIONS = tuple(RANGES)
GEOMETRIC = ("shearX", "shearY", "translateX", "translateY", "rotate")
FILL = 128.0  # the reference's fill colour, grey


def _table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(operation index, probability, magnitude), each (25, 2): the policy as arrays."""
    op = np.array([[OPERATIONS.index(p[1]), OPERATIONS.index(p[4])] for p in POLICY], "int32")
    prob = np.array([[p[0], p[3]] for p in POLICY], "float32")
    mag = np.array([[RANGES[p[1]][p[2]], RANGES[p[4]][p[5]]] for p in POLICY], "float32")
    return op, prob, mag


def _level(x):
    """PIL's uint8 result of a float computation: clipped to 0-255, then truncated."""
    return ops.floor(ops.clip(x, 0.0, 255.0))


def _blend(degenerate, image, factor):
    """PIL's Image.blend(degenerate, image, factor), as ImageEnhance calls it; factor per image."""
    return _level(degenerate + factor[:, None, None, None] * (image - degenerate))


def _grey(image):
    """PIL's convert("L") (ITU-R 601-2 luma, integer arithmetic), (B, H, W, 1)."""
    r, g, b = image[..., 0:1], image[..., 1:2], image[..., 2:3]
    return ops.floor((r * 19595.0 + g * 38470.0 + b * 7471.0 + 32768.0) / 65536.0)


def _smooth(image):
    """PIL's ImageFilter.SMOOTH (3 x 3: 1s around a 5, over 13), the border pixels left as they are."""
    kernel = np.ones((3, 3, 1, 1), "float32")
    kernel[1, 1] = 5.0
    channels = image.shape[-1]
    kernel = ops.convert_to_tensor(np.tile(kernel, (1, 1, channels, 1)) / 13.0)
    inner = ops.floor(ops.depthwise_conv(image, kernel, padding="valid") + 0.5)
    padded = ops.pad(inner, ((0, 0), (1, 1), (1, 1), (0, 0)))
    height, width = image.shape[1], image.shape[2]
    border = np.ones((1, height, width, 1), "float32")
    border[:, 1:-1, 1:-1] = 0.0
    border = ops.convert_to_tensor(border)
    return border * image + (1.0 - border) * padded


def _autocontrast(image):
    """PIL's ImageOps.autocontrast (no cutoff): each channel stretched from its lowest to its highest level."""
    low = ops.min(image, axis=(1, 2), keepdims=True)
    high = ops.max(image, axis=(1, 2), keepdims=True)
    flat = high <= low
    scale = 255.0 / ops.where(flat, 1.0, high - low)
    stretched = ops.clip(ops.trunc(image * scale - low * scale), 0.0, 255.0)
    return ops.where(flat, image, stretched)


def _equalize(image):
    """PIL's ImageOps.equalize: per image and channel, the histogram's cumulative counts as a lookup table."""
    batch, height, width, channels = image.shape[0], image.shape[1], image.shape[2], image.shape[3]
    batch = ops.shape(image)[0] if batch is None else batch
    levels = ops.cast(image, "int32")
    # one bin per (image, channel, level), counted with a segment sum
    base = (ops.arange(batch, dtype="int32")[:, None, None, None] * channels
            + ops.arange(channels, dtype="int32")[None, None, None, :]) * 256
    ids = ops.reshape(base + levels, (-1,))
    counts = ops.segment_sum(ops.ones_like(ids, dtype="float32"), ids, num_segments=batch * channels * 256)
    histogram = ops.reshape(counts, (batch, channels, 256))
    present = histogram > 0
    # the count of the highest level present
    last = ops.max(ops.where(present, ops.arange(256, dtype="int32")[None, None, :], -1), axis=-1, keepdims=True)
    last_count = ops.take_along_axis(histogram, ops.maximum(last, 0), axis=-1)
    step = ops.floor((float(height * width) - last_count) / 255.0)
    before = ops.cumsum(histogram, axis=-1) - histogram
    lut = ops.floor((ops.floor(step / 2.0) + before) / ops.maximum(step, 1.0))
    lut = ops.where(step > 0, ops.minimum(lut, 255.0), ops.arange(256, dtype="float32")[None, None, :])
    return ops.reshape(ops.take(ops.reshape(lut, (-1,)), ids), ops.shape(image))


def _affine(image, transforms, interpolation):
    """keras.ops.image.affine_transform with the reference's grey fill; `transforms` (B, 8), output to input."""
    return ops.image.affine_transform(image, transforms, interpolation=interpolation, fill_mode="constant",
                                      fill_value=FILL)


def _geometric(image, which, magnitude, sign, interpolation, names):
    """The geometric operations in `names` for the images that drew one of them (`which`, an operation index
    per image), the identity for every other; one affine transform per image, as PIL's AFFINE data and
    rotate() define them (pixel centres at the half-pixel, rotation about the image's centre)."""
    height, width = image.shape[1], image.shape[2]
    zero, one = ops.zeros_like(magnitude), ops.ones_like(magnitude)
    rows = {"a0": one, "a1": zero, "a2": zero, "b0": zero, "b1": one, "b2": zero}
    m = magnitude * sign
    for name in names:
        chosen = which == OPERATIONS.index(name)
        if name == "shearX":
            rows["a1"] = ops.where(chosen, m, rows["a1"])
            rows["a2"] = ops.where(chosen, m * 0.5, rows["a2"])  # PIL maps the centre of (x, y), at +0.5
        elif name == "shearY":
            rows["b0"] = ops.where(chosen, m, rows["b0"])
            rows["b2"] = ops.where(chosen, m * 0.5, rows["b2"])
        elif name == "translateX":
            rows["a2"] = ops.where(chosen, m * width, rows["a2"])
        elif name == "translateY":
            rows["b2"] = ops.where(chosen, m * height, rows["b2"])
        elif name == "rotate":  # counter-clockwise by `magnitude` degrees about the centre (no sign drawn)
            angle = magnitude * (np.pi / 180.0)
            cos, sin = ops.cos(angle), ops.sin(angle)
            cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
            rows["a0"] = ops.where(chosen, cos, rows["a0"])
            rows["a1"] = ops.where(chosen, -sin, rows["a1"])
            rows["a2"] = ops.where(chosen, cx - cos * cx + sin * cy, rows["a2"])
            rows["b0"] = ops.where(chosen, sin, rows["b0"])
            rows["b1"] = ops.where(chosen, cos, rows["b1"])
            rows["b2"] = ops.where(chosen, cy - sin * cx - cos * cy, rows["b2"])
    transforms = ops.stack([rows["a0"], rows["a1"], rows["a2"], rows["b0"], rows["b1"], rows["b2"], zero, zero],
                           axis=-1)
    return _affine(image, transforms, interpolation)


def apply_operation(image, which, magnitude, sign):
    """Each image of `image` (B, H, W, 3, whole levels 0-255) through the operation it drew: `which` its index in
    OPERATIONS (-1: none), `magnitude` its value, `sign` +1 or -1 where the operation takes one."""
    factor = 1.0 + magnitude * sign
    grey = _grey(image)
    # posterize's bits where it was drawn, 8 (the identity) elsewhere: no other magnitude reaches its division
    bits = ops.where(which == OPERATIONS.index("posterize"), magnitude, 8.0)[:, None, None, None]
    candidates = {
        "invert": 255.0 - image,
        "contrast": _blend(ops.floor(ops.mean(grey, axis=(1, 2, 3), keepdims=True) + 0.5)
                           * ops.ones_like(image), image, factor),
        "color": _blend(grey * ops.ones_like(image), image, factor),
        "brightness": _blend(ops.zeros_like(image), image, factor),
        "sharpness": _blend(_smooth(image), image, factor),
        "posterize": ops.floor(image / 2.0 ** (8.0 - bits)) * 2.0 ** (8.0 - bits),
        "solarize": ops.where(image < magnitude[:, None, None, None], image, 255.0 - image),
        "autocontrast": _autocontrast(image),
        "equalize": _equalize(image),
        # PIL: rotate() and a translation's transform() sample the nearest pixel; shear is bicubic there,
        # bilinear here (Keras' affine transform has no bicubic)
        "nearest": ops.round(_geometric(image, which, magnitude, sign, "nearest",
                                        ("translateX", "translateY", "rotate"))),
        "bilinear": _level(ops.round(_geometric(image, which, magnitude, sign, "bilinear", ("shearX", "shearY")))),
    }
    out = image
    for name in OPERATIONS:
        key = ("nearest" if name in ("translateX", "translateY", "rotate") else
               "bilinear" if name in ("shearX", "shearY") else name)
        out = ops.where((which == OPERATIONS.index(name))[:, None, None, None], candidates[key], out)
    return out


@keras.saving.register_keras_serializable(package="explorer")
class AutoAugmentCIFAR10(keras.layers.Layer):
    """AutoAugment's CIFAR-10 policy on a batch of 0-255 RGB images, each image its own sub-policy; the
    identity at inference. Its random state is a Keras SeedGenerator (explorer.data.step_augment.Reseed sets
    it per epoch)."""

    def __init__(self, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.seed = seed
        self.generator = keras.random.SeedGenerator(seed)
        self.supports_jit = True
        self._op, self._prob, self._mag = _table()

    def call(self, images, training=True):
        if not training:
            return images
        dtype = images.dtype
        x = ops.round(ops.clip(ops.cast(images, "float32"), 0.0, 255.0))  # PIL's images are whole levels
        batch = ops.shape(x)[0]
        policy = keras.random.randint((batch,), 0, len(POLICY), seed=self.generator)
        draws = keras.random.uniform((batch, 2), seed=self.generator)
        signs = ops.where(keras.random.uniform((batch, 2), seed=self.generator) < 0.5, -1.0, 1.0)
        table_op = ops.take(ops.convert_to_tensor(self._op), policy, axis=0)
        table_prob = ops.take(ops.convert_to_tensor(self._prob), policy, axis=0)
        table_mag = ops.take(ops.convert_to_tensor(self._mag), policy, axis=0)
        for k in range(2):
            which = ops.where(draws[:, k] < table_prob[:, k], table_op[:, k], -1)
            x = apply_operation(x, which, table_mag[:, k], signs[:, k])
        return ops.cast(x, dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "seed": self.seed}
