"""Keras layers of the small-dataset ViT: preprocessing, SPT, position encoding, LSA and stochastic depth.

Only `keras.ops` is used inside layers, so the same saved model runs on TensorFlow, JAX and PyTorch.
"""

from __future__ import annotations

import math

import keras
from keras import ops

SHIFTS = ("left-up", "left-down", "right-up", "right-down")
# (rows, cols) the content moves by, in units of half a patch: "left-up" moves it left and up.
SHIFT_DIRECTIONS = {"left-up": (-1, -1), "left-down": (1, -1), "right-up": (-1, 1), "right-down": (1, 1)}


def shift_images(images, mode: str, shift: int):
    """Moves image content diagonally by `shift` pixels, padding the uncovered border with zeros.

    Args:
        images: (batch, height, width, channels) tensor.
        mode: one of SHIFTS.
        shift: pixels to move along each axis (SPT uses half a patch).

    Returns:
        A tensor of the same shape: out[i, j] = images[i - dy, j - dx] where that is inside the image.
    """
    if mode not in SHIFT_DIRECTIONS:
        raise ValueError(f"mode must be one of {SHIFTS}, got {mode!r}")
    if shift == 0:
        return images
    dy, dx = (d * shift for d in SHIFT_DIRECTIONS[mode])
    height, width = images.shape[1], images.shape[2]
    cropped = images[:, max(-dy, 0):height - max(dy, 0), max(-dx, 0):width - max(dx, 0), :]
    return ops.pad(cropped, [[0, 0], [max(dy, 0), max(-dy, 0)], [max(dx, 0), max(-dx, 0)], [0, 0]])


def extract_patches(images, patch_size: int):
    """Non-overlapping square patches, row-major, each flattened as (row, col, channel).

    Identical to `ops.image.extract_patches(..., padding="valid")` followed by a reshape, but a plain
    reshape/transpose, which is cheaper on every backend.
    """
    _, height, width, channels = images.shape
    rows, cols = height // patch_size, width // patch_size
    x = ops.reshape(images, (-1, rows, patch_size, cols, patch_size, channels))
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (-1, rows * cols, patch_size * patch_size * channels))


@keras.saving.register_keras_serializable(package="explorer")
class ImagePreprocessing(keras.layers.Layer):
    """Turns raw 0-255 RGB images into normalised inputs of the model's working size.

    Args:
        input_size: side of the square image the rest of the model sees.
        mean: per-channel mean on the 0-255 scale.
        std: per-channel standard deviation on the 0-255 scale.

    Call arguments:
        images: (batch, height, width, 3) raw pixel values, any numeric dtype.

    Returns:
        (batch, input_size, input_size, 3) float tensor.
    """

    def __init__(self, input_size, mean, std, **kwargs):
        super().__init__(**kwargs)
        self.input_size = int(input_size)
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)

    def call(self, images):
        x = ops.cast(images, self.compute_dtype)
        if x.shape[1] != self.input_size or x.shape[2] != self.input_size:
            x = ops.image.resize(x, (self.input_size, self.input_size), interpolation="bilinear")
        mean = ops.convert_to_tensor(self.mean, dtype=self.compute_dtype)
        std = ops.convert_to_tensor(self.std, dtype=self.compute_dtype)
        return (x - mean) / std

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.input_size, self.input_size, input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(input_size=self.input_size, mean=list(self.mean), std=list(self.std))
        return config


@keras.saving.register_keras_serializable(package="explorer")
class ShiftedPatchTokenization(keras.layers.Layer):
    """Shifted Patch Tokenization: patches of the image and its four diagonal half-patch shifts.

    With `shifted=False` it is the vanilla ViT tokenizer (patches, then a linear projection).

    Args:
        patch_size: side of a square patch in pixels.
        projection_dim: width of the output tokens.
        shifted: concatenate the four shifted copies (SPT); otherwise plain patches.
        layer_norm_eps: epsilon of the LayerNormalization SPT applies before projecting.

    Call arguments:
        images: (batch, size, size, channels) float tensor.

    Returns:
        A tuple `(tokens, patches)`: tokens (batch, num_patches, projection_dim) and the flattened
        patches (batch, num_patches, patch_size * patch_size * channels * (5 if shifted else 1)); the
        channels of a shifted patch are ordered original, left-up, left-down, right-up, right-down.

    Reference:
        Lee, Lee & Song, "Vision Transformer for Small-Size Datasets", https://arxiv.org/abs/2112.13492
    """

    def __init__(self, patch_size, projection_dim, shifted=True, layer_norm_eps=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = int(patch_size)
        self.projection_dim = int(projection_dim)
        self.shifted = bool(shifted)
        self.layer_norm_eps = float(layer_norm_eps)

    def build(self, input_shape):
        channels = input_shape[-1] * (1 + len(SHIFTS) if self.shifted else 1)
        patch_dim = self.patch_size * self.patch_size * channels
        if self.shifted:
            self.layer_norm = keras.layers.LayerNormalization(
                epsilon=self.layer_norm_eps, dtype=self.dtype_policy, name="layer_norm")
            self.layer_norm.build((None, None, patch_dim))
        self.projection = keras.layers.Dense(
            self.projection_dim, dtype=self.dtype_policy, name="projection")
        self.projection.build((None, None, patch_dim))

    def call(self, images):
        if self.shifted:
            half = self.patch_size // 2
            images = ops.concatenate(
                [images] + [shift_images(images, mode, half) for mode in SHIFTS], axis=-1)
        patches = extract_patches(images, self.patch_size)
        tokens = self.layer_norm(patches) if self.shifted else patches
        return self.projection(tokens), patches

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        num_patches = (height // self.patch_size) * (width // self.patch_size)
        channels = channels * (1 + len(SHIFTS) if self.shifted else 1)
        return ((batch, num_patches, self.projection_dim),
                (batch, num_patches, self.patch_size * self.patch_size * channels))

    def get_config(self):
        config = super().get_config()
        config.update(patch_size=self.patch_size, projection_dim=self.projection_dim,
                      shifted=self.shifted, layer_norm_eps=self.layer_norm_eps)
        return config


@keras.saving.register_keras_serializable(package="explorer")
class PatchEncoder(keras.layers.Layer):
    """Adds a learned position embedding to every token.

    Args:
        num_patches: sequence length.
        projection_dim: token width.

    Call arguments:
        tokens: (batch, num_patches, projection_dim).

    Returns:
        Tokens plus position embeddings, same shape.
    """

    def __init__(self, num_patches, projection_dim, **kwargs):
        super().__init__(**kwargs)
        self.num_patches = int(num_patches)
        self.projection_dim = int(projection_dim)

    def build(self, input_shape):
        self.position_embedding = self.add_weight(
            name="position_embedding", shape=(self.num_patches, self.projection_dim),
            initializer=keras.initializers.RandomUniform(-0.05, 0.05))

    def call(self, tokens):
        return tokens + ops.cast(self.position_embedding, tokens.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(num_patches=self.num_patches, projection_dim=self.projection_dim)
        return config


@keras.saving.register_keras_serializable(package="explorer")
class DropPath(keras.layers.Layer):
    """Stochastic depth: in training, drops a residual branch for whole images at random.

    Each image's branch output is zeroed with probability `rate` and the kept ones are scaled by
    1 / (1 - rate), so the expected output is unchanged; at inference the layer is the identity.

    Args:
        rate: probability of dropping the branch of an image, in [0, 1).
        seed: seed of the layer's random generator (None: drawn from Keras' global seed).

    Call arguments:
        x: (batch, ...) the output of a residual branch, before it is added to the skip connection.
        training: drop only when true.

    Returns:
        A tensor of the shape of `x`.

    Reference:
        Huang, Sun, Liu, Sedra & Weinberger, "Deep Networks with Stochastic Depth",
        https://arxiv.org/abs/1603.09382
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not (isinstance(rate, (int, float)) and 0.0 <= rate < 1.0):
            raise ValueError(f"rate must be in [0, 1), got {rate!r}")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, x, training=None):
        if not training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        # One draw per image, broadcast over its tokens and channels.
        shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
        kept = ops.floor(keep + keras.random.uniform(shape, dtype=x.dtype, seed=self.seed_generator))
        return x * (kept / keep)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(rate=self.rate, seed=self.seed)
        return config


def inverse_temperature(layer, dtype):
    """What an attention layer multiplies its queries by before the dot product with the keys: 1 / tau for
    an LSA layer's learned temperature (one per head with tau_mode "head", shaped to broadcast over the
    query's (batch, queries, heads, key_dim)), else 1 / sqrt(key_dim) (tau_mode None, or a plain
    MultiHeadAttention)."""
    tau = getattr(layer, "tau", None) if getattr(layer, "tau_mode", None) is not None else None
    if tau is None:
        return ops.cast(1.0 / math.sqrt(float(layer._key_dim)), dtype)
    if layer.tau_mode == "head":
        return ops.reshape(ops.cast(1.0 / tau, dtype), (layer._num_heads, 1))
    return ops.cast(1.0 / tau, dtype)


@keras.saving.register_keras_serializable(package="explorer")
class LocalitySelfAttention(keras.layers.MultiHeadAttention):
    """Multi-head self-attention with a learnable temperature and a masked diagonal (LSA).

    The diagonal mask is built from the sequence length, so callers pass no mask. With
    `tau_mode=None` and `diagonal_mask=False` the layer computes exactly what MultiHeadAttention does.

    Args:
        tau_mode: "layer" (one temperature for all heads, keras.io), "head" (one per head, the paper's
            code) or None (fixed scaling 1/sqrt(key_dim)).
        diagonal_mask: forbid each token from attending to itself.
        **kwargs: MultiHeadAttention arguments (num_heads, key_dim, dropout, ...).

    Call arguments:
        As MultiHeadAttention; `return_attention_scores=True` returns the per-head attention
        probabilities (batch, heads, queries, keys) as well.

    Returns:
        The attention output, and the scores when asked for.

    Reference:
        Lee, Lee & Song, "Vision Transformer for Small-Size Datasets", https://arxiv.org/abs/2112.13492
    """

    def __init__(self, tau_mode="layer", diagonal_mask=True, **kwargs):
        super().__init__(**kwargs)
        if tau_mode not in ("layer", "head", None):
            raise ValueError(f"tau_mode must be 'layer', 'head' or None, got {tau_mode!r}")
        self.tau_mode = tau_mode
        self.diagonal_mask = bool(diagonal_mask)

    def build(self, query_shape, value_shape, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        if self.tau_mode is not None:
            shape = () if self.tau_mode == "layer" else (self.num_heads,)
            # autocast=False: under a mixed policy the temperature and its reciprocal stay float32.
            self.tau = self.add_weight(
                name="tau", shape=shape, trainable=True, autocast=False,
                initializer=keras.initializers.Constant(math.sqrt(float(self.key_dim))))
        if self.compute_dtype != "float32":
            # Under a mixed policy the attention probabilities are computed in float32.
            self._float32_softmax = keras.layers.Softmax(axis=-1, dtype="float32")

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False, use_causal_mask=False):
        if use_causal_mask:
            causal = self._compute_causal_mask(query, value)
            attention_mask = causal if attention_mask is None else ops.logical_and(
                ops.cast(attention_mask, "bool"), causal)
        if self.diagonal_mask:
            queries, keys = query.shape[1], key.shape[1]
            off_diagonal = ops.logical_not(ops.eye(queries, keys, dtype="bool"))
            attention_mask = off_diagonal if attention_mask is None else ops.logical_and(
                ops.cast(attention_mask, "bool"), off_diagonal)
        scaled = ops.multiply(query, inverse_temperature(self, query.dtype))
        scores = ops.einsum(self._dot_product_equation, key, scaled)
        if self.compute_dtype != "float32":
            if attention_mask is not None:  # as _masked_softmax expands it, up to the heads' axis
                for _ in range(len(scores.shape) - len(attention_mask.shape)):
                    attention_mask = ops.expand_dims(attention_mask, axis=-3)
            scores = self._float32_softmax(ops.cast(scores, "float32"), mask=attention_mask)
            dropped = self._dropout_layer(scores, training=training) if self.dropout > 0 else scores
            output = ops.einsum(self._combine_equation, ops.cast(dropped, value.dtype), value)
            return output, scores
        scores = self._masked_softmax(scores, attention_mask)
        dropped = self._dropout_layer(scores, training=training) if self.dropout > 0 else scores
        output = ops.einsum(self._combine_equation, dropped, value)
        return output, scores

    def get_config(self):
        config = super().get_config()
        config.update(tau_mode=self.tau_mode, diagonal_mask=self.diagonal_mask)
        return config


def attention_what_if(layer, x, temperature_factor, diagonal_mask):
    """Self-attention of `layer` on `x` with LSA's two mechanisms changed per image, the layer untouched.

    Runs the layer's own projections and weights, but divides the attention logits by
    `temperature_factor * tau` (tau = the learned temperature of an LSA layer, sqrt(key_dim) for a plain
    MultiHeadAttention) and masks the diagonal where `diagonal_mask` is on. With a factor of 1 and the
    layer's own mask setting it computes what the layer computes. Nothing is assigned to the layer, so
    concurrent callers with different settings never see each other's.

    Args:
        layer: a built `LocalitySelfAttention` or `keras.layers.MultiHeadAttention` (no gate, no dropout
            at inference).
        x: (batch, tokens, width) the layer's query and value input.
        temperature_factor: (batch,) multiplies tau.
        diagonal_mask: (batch,) > 0.5 forbids each token from attending to itself.

    Returns:
        `(output, scores)`: the attention output (batch, tokens, width) and the per-head attention
        probabilities (batch, heads, tokens, tokens).
    """
    if getattr(layer, "_use_gate", False):
        raise ValueError(f"{layer.name}: gated attention is not supported")
    query = layer._query_dense(x)
    key = layer._key_dense(x)
    value = layer._value_dense(x)
    factor = ops.reshape(ops.cast(temperature_factor, query.dtype), (-1, 1, 1, 1))
    scores = ops.einsum(layer._dot_product_equation, key,
                        ops.multiply(query, inverse_temperature(layer, query.dtype) / factor))
    tokens = query.shape[1]
    off_diagonal = ops.logical_not(ops.eye(tokens, tokens, dtype="bool"))
    masked = ops.reshape(ops.greater(ops.cast(diagonal_mask, "float32"), 0.5), (-1, 1, 1))
    allowed = ops.logical_or(off_diagonal[None], ops.logical_not(masked))
    scores = layer._masked_softmax(scores, allowed)
    output = layer._output_dense(ops.einsum(layer._combine_equation, scores, value))
    return output, scores


# Every checkpoint's config.json names its layers' module: explorer.layers, where these classes were first
# written. That path stays importable (explorer/layers.py) and new checkpoints keep writing it, so a checkpoint
# reads the same whichever version of this code wrote or loads it.
for _layer in (ImagePreprocessing, ShiftedPatchTokenization, PatchEncoder, DropPath, LocalitySelfAttention):
    _layer.__module__ = "explorer.layers"
