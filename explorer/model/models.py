"""Builds the vanilla / SPT / LSA / SPT+LSA Vision Transformers from a ViTConfig."""

from __future__ import annotations

import contextlib

import keras

from explorer.model.config import ViTConfig
from explorer.model.layers import (
    DropPath,
    ImagePreprocessing,
    LocalitySelfAttention,
    PatchEncoder,
    ShiftedPatchTokenization,
)

TOKENIZER = "tokenizer"
HEAD = "head"
# Training precisions: "mixed_bfloat16" computes in bfloat16 with float32 variables; LSA's temperatures, every
# softmax, the norms and the logits (hence the loss) stay float32. Checkpoints are always float32 models.
PRECISIONS = ("float32", "mixed_bfloat16")


def attention_layer_name(block: int) -> str:
    return f"block{block}_attention"


def drop_path_rates(config: ViTConfig) -> list[float]:
    """Stochastic depth of each block: linear from 0 at the first block to `config.drop_path` at the last,
    as timm's and DeiT's ViTs space it (torch.linspace(0, drop_path, depth))."""
    last = config.num_layers - 1
    return [config.drop_path * block / last if last else 0.0 for block in range(config.num_layers)]


def _mlp(x, units, dropout, prefix):
    for i, width in enumerate(units):
        x = keras.layers.Dense(width, activation="gelu", name=f"{prefix}_dense{i}")(x)
        x = keras.layers.Dropout(dropout, name=f"{prefix}_dropout{i}")(x)
    return x


@contextlib.contextmanager
def _dtype_policy(precision: str):
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def build_vit(config: ViTConfig, num_classes: int, name: str | None = None,
              precision: str = "float32") -> keras.Model:
    """A Keras functional ViT that takes raw (batch, image_size, image_size, 3) pixels, returns logits.

    Every attention layer is called with `return_attention_scores=True`, so the per-head attention
    of each block is a named node of the graph (`block{i}_attention`) that a probe model can expose
    without changing the weights or running anything twice. With `config.drop_path` > 0 each block's two
    residual branches pass a `DropPath` (`block{i}_drop_path1`, `_drop_path2`) before their addition; a
    block whose rate is 0 gets none, so a model without stochastic depth has exactly the layers it always had.

    With `precision="mixed_bfloat16"` (training on an accelerator) the layers compute in bfloat16; the
    vanilla model's attention is then a LocalitySelfAttention without temperature or mask (the same weights
    and function as MultiHeadAttention, with its softmax in float32), and the head computes in float32.
    `float32_copy` turns such a model into the float32 model a checkpoint holds.
    """
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    with _dtype_policy(precision):
        return _build(config, num_classes, name, mixed=precision != "float32")


def float32_copy(model: keras.Model, config: ViTConfig, num_classes: int) -> keras.Model:
    """The float32 model with `model`'s weights (the same values: the variables are float32 at any precision)."""
    if model.dtype_policy.name == "float32":
        return model
    copy = build_vit(config, num_classes, name=model.name)
    copy.set_weights(model.get_weights())
    return copy


def _build(config: ViTConfig, num_classes: int, name: str | None, mixed: bool) -> keras.Model:
    inputs = keras.Input((config.image_size, config.image_size, 3), name="image")
    x = ImagePreprocessing(config.input_size, config.mean, config.std, name="preprocess")(inputs)
    tokens, _ = ShiftedPatchTokenization(config.patch_size, config.projection_dim,
                                         shifted=config.use_spt, layer_norm_eps=config.layer_norm_eps,
                                         name=TOKENIZER)(x)
    encoded = PatchEncoder(config.num_patches, config.projection_dim, name="position")(tokens)
    for block, rate in enumerate(drop_path_rates(config)):
        prefix = f"block{block}"
        x1 = keras.layers.LayerNormalization(epsilon=config.layer_norm_eps, name=f"{prefix}_norm1")(encoded)
        attention_args = dict(num_heads=config.num_heads, key_dim=config.key_dim,
                              dropout=config.dropout, name=attention_layer_name(block))
        if config.use_lsa:
            attention = LocalitySelfAttention(tau_mode=config.tau_mode, diagonal_mask=True,
                                              **attention_args)
        elif mixed:
            attention = LocalitySelfAttention(tau_mode=None, diagonal_mask=False, **attention_args)
        else:
            attention = keras.layers.MultiHeadAttention(**attention_args)
        attended, _ = attention(x1, x1, return_attention_scores=True)
        if rate:
            attended = DropPath(rate, name=f"{prefix}_drop_path1")(attended)
        x2 = keras.layers.Add(name=f"{prefix}_add1")([attended, encoded])
        x3 = keras.layers.LayerNormalization(epsilon=config.layer_norm_eps, name=f"{prefix}_norm2")(x2)
        x3 = _mlp(x3, config.mlp_units, config.dropout, f"{prefix}_mlp")
        if rate:
            x3 = DropPath(rate, name=f"{prefix}_drop_path2")(x3)
        encoded = keras.layers.Add(name=f"{prefix}_add2")([x3, x2])
    x = keras.layers.LayerNormalization(epsilon=config.layer_norm_eps, name="final_norm")(encoded)
    if config.head == "flatten":
        x = keras.layers.Flatten(name="flatten")(x)
    else:
        x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    x = keras.layers.Dropout(config.head_dropout, name="head_dropout")(x)
    x = _mlp(x, config.head_units, config.head_dropout, "head_mlp")
    logits = keras.layers.Dense(num_classes, name=HEAD, dtype="float32" if mixed else None)(x)
    return keras.Model(inputs, logits, name=name or f"vit_{config.variant}")


def attention_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """The model's attention layers in block order."""
    layers, block = [], 0
    while True:
        try:
            layers.append(model.get_layer(attention_layer_name(block)))
        except ValueError:
            return layers
        block += 1


def tau_values(model: keras.Model) -> list[list[float]]:
    """Learned temperature of every LSA layer: one list per layer (one value, or one per head)."""
    result = []
    for layer in attention_layers(model):
        tau = getattr(layer, "tau", None)
        if tau is not None:
            result.append([float(v) for v in keras.ops.convert_to_numpy(tau).reshape(-1)])
    return result


def freeze_backbone(model: keras.Model, frozen: bool = True) -> keras.Model:
    """Makes every layer but the classifier head (un)trainable, in place."""
    for layer in model.layers:
        if layer.name != HEAD:
            layer.trainable = not frozen
    return model


def features_model(model: keras.Model) -> keras.Model:
    """The model up to its classifier head (sharing its weights): what the head sees, for one image a vector."""
    return keras.Model(model.inputs, model.get_layer(HEAD).input, name=f"{model.name}_features")


def replace_head(model: keras.Model, num_classes: int, freeze: bool = False) -> keras.Model:
    """The same backbone (shared weights) with a fresh classifier for `num_classes` classes."""
    logits = keras.layers.Dense(num_classes, name=HEAD)(model.get_layer(HEAD).input)
    return freeze_backbone(keras.Model(model.inputs, logits, name=model.name), freeze)
