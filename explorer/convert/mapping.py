"""The example's architecture, checked layer by layer, mapped onto ViTConfig and our weights."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from explorer.convert.source import INACTIVE, ConvertError, SourceLayer, SourceModel, _describe
from explorer.model.config import ViTConfig

KERAS_EPSILON = 1e-7  # keras.backend.epsilon(): Normalization divides by max(sqrt(variance), epsilon)


@dataclass
class Mapping:
    """What a source model becomes: our config, our weights by variable path, and the record of it."""

    config: ViTConfig
    num_classes: int
    weights: dict[str, np.ndarray]
    taus: list[float]
    mapped: list[str]
    dropped: list[str]
    format: str


class _Cursor:
    def __init__(self, layers: list[SourceLayer]):
        self.layers, self.i = layers, 0

    def peek(self) -> SourceLayer | None:
        return self.layers[self.i] if self.i < len(self.layers) else None

    def take(self, kinds: tuple[str, ...] | str, role: str) -> SourceLayer:
        kinds = (kinds,) if isinstance(kinds, str) else kinds
        layer = self.peek()
        if layer is None:
            raise ConvertError(f"the model ends where the keras.io example has its {role} ({' or '.join(kinds)})")
        if layer.kind not in kinds:
            raise ConvertError(f"{_describe(layer)} (layer {self.i} of the model) is where the keras.io example has "
                               f"its {role} ({' or '.join(kinds)}): not the example's architecture")
        self.i += 1
        return layer


def _inputs(layer: SourceLayer, expected: list[tuple[str, int]], role: str) -> None:
    if sorted(layer.inputs) != sorted(expected):
        shown = ", ".join(f"{n}[{i}]" if i else n for n, i in layer.inputs) or "nothing"
        want = ", ".join(f"{n}[{i}]" if i else n for n, i in expected)
        raise ConvertError(f"{_describe(layer)} takes {shown}; the keras.io example's {role} takes {want}")


def _weight(layer: SourceLayer, key: str, shape: tuple | None = None) -> np.ndarray:
    if key not in layer.weights:
        raise ConvertError(f"{_describe(layer)} has no {key} weight")
    value = layer.weights[key]
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise ConvertError(f"{_describe(layer)}: {key} has shape {tuple(value.shape)}, expected {tuple(shape)}")
    if not np.issubdtype(value.dtype, np.floating):
        raise ConvertError(f"{_describe(layer)}: {key} is {value.dtype}, not a float")
    return value.astype("float32")


def _dense(layer: SourceLayer, activation: str, inputs: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    config = layer.config
    if config.get("use_bias", True) is False:
        raise ConvertError(f"{_describe(layer)} has no bias; the keras.io example's Dense layers have one")
    got = config.get("activation", activation)
    if isinstance(got, dict):
        got = got.get("config", {}).get("name") or got.get("class_name")
    if got != activation:
        raise ConvertError(f"{_describe(layer)} uses activation {got!r}; the keras.io example's has {activation!r}")
    kernel = _weight(layer, "kernel")
    if kernel.ndim != 2 or (inputs is not None and kernel.shape[0] != inputs):
        raise ConvertError(f"{_describe(layer)}: kernel has shape {kernel.shape}, expected ({inputs}, units)")
    return kernel, _weight(layer, "bias", (kernel.shape[1],))


def _epsilon(layer: SourceLayer) -> float:
    config = layer.config
    axis = config.get("axis", -1)
    axis = axis if isinstance(axis, list) else [axis]
    if axis not in ([-1], [2]):
        raise ConvertError(f"{_describe(layer)} normalises over axis {axis}; the example normalises the last one")
    if config.get("center") is False or config.get("scale") is False:
        raise ConvertError(f"{_describe(layer)} has no beta or gamma; the example's LayerNormalization has both")
    return float(config.get("epsilon", 1e-3))


def _preprocessing(cursor: _Cursor, source: SourceModel, input_name: str, height: int):
    """The augmentation block (a Sequential, as in the example, or its layers inline): Normalization ->
    mean/std, Resizing -> input_size, the random layers dropped. Returns (mean, std, size, last name, notes)."""
    mean, std, size, dropped, mapped = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), height, [], []
    previous = input_name
    layers = []
    while (layer := cursor.peek()) is not None and (layer.kind == "Sequential" or layer.kind in INACTIVE
                                                     or layer.kind in ("Normalization", "Resizing")):
        cursor.i += 1
        _inputs(layer, [(previous, 0)], "data augmentation")
        previous = layer.name
        layers += layer.children if layer.kind == "Sequential" else [layer]
    normalizations = [lay for lay in layers if lay.kind == "Normalization"]
    resizings = [lay for lay in layers if lay.kind == "Resizing"]
    for lay in layers:
        if lay.kind in INACTIVE:
            dropped.append(f"{lay.name} ({lay.kind}): data augmentation, inactive at inference")
        elif lay.kind not in ("Normalization", "Resizing"):
            raise ConvertError(f"{_describe(lay)} in the data augmentation: the keras.io example has Normalization, "
                               f"Resizing and random flips, rotations and zooms there")
    if len(normalizations) > 1 or len(resizings) > 1:
        raise ConvertError("the data augmentation has more than one Normalization or Resizing; the example has one "
                           "of each")
    if normalizations:
        norm = normalizations[0]
        config = norm.config
        axis = config.get("axis", [-1])
        axis = axis if isinstance(axis, list) else [axis]
        if axis not in ([-1], [3]) or config.get("invert"):
            raise ConvertError(f"{_describe(norm)} normalises over axis {axis}"
                               f"{' and inverts' if config.get('invert') else ''}; the example normalises each "
                               f"channel")
        if config.get("mean") is not None and config.get("variance") is not None:
            m, v = np.asarray(config["mean"], "float32"), np.asarray(config["variance"], "float32")
            how = "given in its config"
        else:
            if "mean" not in norm.weights or "variance" not in norm.weights:
                raise ConvertError(f"{_describe(norm)} was never adapted: it has neither mean and variance weights "
                                   f"nor values in its config")
            m, v = norm.weights["mean"].astype("float32"), norm.weights["variance"].astype("float32")
            how = "adapted"
        m, v = m.reshape(-1), v.reshape(-1)
        if m.size == 1:
            m, v = np.repeat(m, 3), np.repeat(v, 3)
        if m.shape != (3,) or v.shape != (3,) or not (np.isfinite(m).all() and np.isfinite(v).all()) or (v < 0).any():
            raise ConvertError(f"{_describe(norm)}: mean {m.tolist()} and variance {v.tolist()} are not three finite "
                               f"channel statistics")
        # Keras divides by max(sqrt(variance), epsilon), in float32: the same float32 value here.
        s = np.maximum(np.sqrt(v), np.float32(KERAS_EPSILON)).astype("float32")
        mean, std = tuple(float(x) for x in m), tuple(float(x) for x in s)
        mapped.append(f"{norm.name} (Normalization, {how}): mean {[round(x, 3) for x in mean]}, variance "
                      f"{[round(float(x), 3) for x in v]} -> preprocess mean, std = max(sqrt(variance), 1e-7) on the "
                      f"0-255 scale")
    if resizings:
        resize = resizings[0]
        config = resize.config
        h, w = int(config.get("height", 0)), int(config.get("width", 0))
        problems = [f"{k}={config[k]!r}" for k, ok in (("interpolation", "bilinear"), ("crop_to_aspect_ratio", False),
                                                        ("pad_to_aspect_ratio", False), ("antialias", False))
                    if k in config and config[k] != ok]
        if h != w or h < 1 or problems:
            raise ConvertError(f"{_describe(resize)} resizes to {h}x{w}{', ' + ', '.join(problems) if problems else ''}"
                               f"; explorer resizes to a square with plain bilinear interpolation")
        size = h
        mapped.append(f"{resize.name} (Resizing {h}x{w}, bilinear) -> preprocess input_size {h}")
    return mean, std, size, previous, mapped, dropped


def map_example(source: SourceModel) -> Mapping:
    """Checks that `source` is the keras.io example's model and maps it onto ViTConfig and our weights."""
    layers = source.layers
    if not layers:
        raise ConvertError("the model has no layers")
    cursor = _Cursor(layers)
    inp = cursor.take("InputLayer", "input")
    shape = list(source.input_shape)
    if len(shape) != 4 or shape[1] != shape[2] or shape[3] != 3 or not shape[1]:
        raise ConvertError(f"the model takes inputs of shape {shape}; the keras.io example takes square RGB "
                           f"images (None, size, size, 3)")
    image_size = int(shape[1])
    mean, std, input_size, previous, mapped, dropped = _preprocessing(cursor, source, inp.name, image_size)
    walk = _Walk(cursor, mapped, dropped)
    tokens = _tokens(walk, previous, input_size)
    blocks = _blocks(walk, tokens)
    head = _head(walk, tokens, blocks.output)
    if cursor.peek() is not None:
        raise ConvertError(f"{_describe(cursor.peek())} follows the classifier; the keras.io example ends there")
    if source.output and source.output != head.classifier:
        raise ConvertError(f"the model's output is {source.output!r}, not its last Dense layer {head.classifier!r}")
    if source.unused:
        raise ConvertError(f"weights the keras.io example does not have: {', '.join(source.unused[:5])}"
                           f"{' ...' if len(source.unused) > 5 else ''}")
    epsilon = _one_epsilon(walk, tokens, source.format)
    variant = {(False, False): "vanilla", (True, False): "spt", (False, True): "lsa", (True, True): "spt_lsa"}[
        (tokens.shifted, blocks.lsa)]
    try:
        config = ViTConfig(image_size=image_size, input_size=input_size, patch_size=tokens.patch,
                           num_layers=blocks.count, projection_dim=tokens.width, num_heads=blocks.heads,
                           key_dim=blocks.key_dim, mlp_units=blocks.mlp_units, head="flatten",
                           head_units=tuple(head.units), dropout=blocks.dropouts[0] if blocks.dropouts else 0.0,
                           head_dropout=head.dropout, layer_norm_eps=epsilon, variant=variant, tau_mode="layer",
                           mean=mean, std=std)
    except ValueError as e:
        raise ConvertError(f"the model maps onto no explorer configuration: {e}") from None
    _record_blocks_and_head(walk, blocks, head, epsilon)
    return Mapping(config, head.num_classes, walk.weights, blocks.taus, walk.mapped, walk.dropped, source.format)


@dataclass
class _Walk:
    """The walk through the source's layers in order, and what it gathers on the way: our weights by variable
    path, the card's record of what was mapped and dropped, and each LayerNormalization's epsilon."""

    cursor: _Cursor
    mapped: list[str]
    dropped: list[str]
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    epsilons: list[float] = field(default_factory=list)

    def layer_norm(self, layer: SourceLayer, ours: str, width: int) -> None:
        self.epsilons.append(_epsilon(layer))
        self.weights[f"{ours}/gamma"] = _weight(layer, "gamma", (width,))
        self.weights[f"{ours}/beta"] = _weight(layer, "beta", (width,))


@dataclass
class _Tokens:
    """The tokenizer and the patch encoder as mapped: what the blocks and the head are checked against."""

    patch: int
    width: int
    shifted: bool
    num_patches: int
    epsilon: float | None  # the tokenizer LayerNormalization's, where the source saved it
    output: str  # the patch encoder's name: the first block's input


def _tokens(walk: _Walk, previous: str, input_size: int) -> _Tokens:
    """ShiftedPatchTokenization (shifted or vanilla, as its weights say) and PatchEncoder -> tokenizer, position."""
    cursor, weights = walk.cursor, walk.weights
    tok = cursor.take("ShiftedPatchTokenization", "Shifted Patch Tokenization")
    _inputs(tok, [(previous, 0)], "Shifted Patch Tokenization")
    kernel = _weight(tok, "projection/kernel")
    if kernel.ndim != 2:
        raise ConvertError(f"{_describe(tok)}: projection kernel has shape {kernel.shape}")
    patch_dim, width = kernel.shape
    shifted = "layer_norm/gamma" in tok.weights
    if "vanilla" in tok.config and bool(tok.config["vanilla"]) == shifted:
        raise ConvertError(f"{_describe(tok)}: its config says vanilla={tok.config['vanilla']} but it "
                           f"{'has' if shifted else 'has no'} the shifted tokenizer's LayerNormalization weights")
    channels = 3 * (5 if shifted else 1)
    patch = math.isqrt(patch_dim // channels)
    if patch * patch * channels != patch_dim:
        raise ConvertError(f"{_describe(tok)}: a projection from {patch_dim} inputs is not patch_size^2 x {channels} "
                           f"channels")
    for key, ours in (("patch_size", patch), ("image_size", input_size), ("projection_dim", width)):
        if key in tok.config and tok.config[key] != ours:
            raise ConvertError(f"{_describe(tok)}: its config says {key}={tok.config[key]}, its weights and "
                               f"preprocessing give {ours}")
    if input_size % patch:
        raise ConvertError(f"the model resizes to {input_size} px, not a multiple of its {patch} px patches: the "
                           f"example then drops the last {input_size % patch} rows and columns, which explorer's "
                           f"tokenizer does not do")
    weights["tokenizer/projection/kernel"] = kernel
    weights["tokenizer/projection/bias"] = _weight(tok, "projection/bias", (width,))
    token_eps = None
    if shifted:
        weights["tokenizer/layer_norm/gamma"] = _weight(tok, "layer_norm/gamma", (patch_dim,))
        weights["tokenizer/layer_norm/beta"] = _weight(tok, "layer_norm/beta", (patch_dim,))
        sub = tok.sub_configs.get("layer_norm")
        token_eps = float(sub["epsilon"]) if sub and "epsilon" in sub else None
    num_patches = (input_size // patch) ** 2
    walk.mapped.append(f"{tok.name} (ShiftedPatchTokenization, {'shifted' if shifted else 'vanilla'}, patch {patch}) "
                       f"-> tokenizer")

    enc = cursor.take("PatchEncoder", "patch encoder")
    _inputs(enc, [(tok.name, 0)], "patch encoder")
    weights["position/position_embedding"] = _weight(enc, "embeddings", (num_patches, width))
    walk.mapped.append(f"{enc.name} (PatchEncoder, {num_patches} positions) -> position")
    return _Tokens(patch, width, shifted, num_patches, token_eps, enc.name)


@dataclass
class _Blocks:
    """The Transformer blocks as the walk finds them, one after another; explorer's are all alike."""

    output: str  # the last block's second Add (before the first block, the patch encoder): the next input
    count: int = 0
    shapes: set[tuple[int, int]] = field(default_factory=set)  # each attention's (heads, key_dim)
    lsa_flags: list[bool] = field(default_factory=list)
    taus: list[float] = field(default_factory=list)
    dropouts: list[float] = field(default_factory=list)  # attention dropouts and MLP dropout rates, in order
    mlp_units: tuple[int, ...] | None = None
    heads: int = 0  # the one (heads, key_dim), once every block is read
    key_dim: int = 0

    @property
    def lsa(self) -> bool:
        return self.lsa_flags[0]


def _blocks(walk: _Walk, tokens: _Tokens) -> _Blocks:
    """Each (LayerNormalization, attention, Add, LayerNormalization, MLP, Add) -> block0, block1, ..."""
    cursor, blocks = walk.cursor, _Blocks(output=tokens.output)
    while (nxt := cursor.peek()) is not None and nxt.kind == "LayerNormalization" and _is_block(cursor):
        _block(walk, blocks, tokens)
    if blocks.count == 0:
        raise ConvertError(f"{_describe(cursor.peek()) if cursor.peek() else 'the end of the model'} comes after "
                           f"the patch encoder; the keras.io example has its Transformer blocks there")
    if len(blocks.shapes) != 1:
        raise ConvertError(f"the blocks' attention layers differ in (heads, key_dim): {sorted(blocks.shapes)}")
    if len(set(blocks.lsa_flags)) != 1:
        raise ConvertError("some blocks use MultiHeadAttentionLSA and others MultiHeadAttention; the example uses one "
                           "kind throughout")
    blocks.heads, blocks.key_dim = next(iter(blocks.shapes))
    return blocks


def _block(walk: _Walk, blocks: _Blocks, tokens: _Tokens) -> None:
    """The next block, mapped onto block{i}_norm1, _attention, _norm2 and _mlp_dense0, 1, ..."""
    cursor, weights, width = walk.cursor, walk.weights, tokens.width
    block, encoded = blocks.count, blocks.output
    prefix = f"block{block}"
    norm1 = cursor.take("LayerNormalization", f"block {block} first LayerNormalization")
    _inputs(norm1, [(encoded, 0)], "block LayerNormalization")
    walk.layer_norm(norm1, f"{prefix}_norm1", width)
    att = cursor.take(("MultiHeadAttentionLSA", "MultiHeadAttention"), f"block {block} attention")
    is_lsa = att.kind == "MultiHeadAttentionLSA"
    _inputs(att, [(norm1.name, 0), (norm1.name, 0)], "self-attention (query and value)")
    heads, key_dim = _attention(att, width, tokens.num_patches, is_lsa, weights, f"{prefix}_attention")
    blocks.shapes.add((heads, key_dim))
    if is_lsa:
        blocks.taus.append(float(_weight(att, "tau", ()).reshape(())))
        weights[f"{prefix}_attention/tau"] = _weight(att, "tau", ()).reshape(())
    blocks.lsa_flags.append(is_lsa)
    if att.config.get("dropout") is not None:
        blocks.dropouts.append(float(att.config["dropout"]))
    add1 = cursor.take("Add", f"block {block} first residual Add")
    _inputs(add1, [(att.name, 0), (encoded, 0)], "first residual")
    norm2 = cursor.take("LayerNormalization", f"block {block} second LayerNormalization")
    _inputs(norm2, [(add1.name, 0)], "block LayerNormalization")
    walk.layer_norm(norm2, f"{prefix}_norm2", width)
    units, last = _mlp(walk, blocks, prefix, norm2.name, width)
    if not units or units[-1] != width:
        raise ConvertError(f"block {block}'s MLP has widths {units}; the example's ends with the token width "
                           f"{width}")
    if blocks.mlp_units is not None and tuple(units) != blocks.mlp_units:
        raise ConvertError(f"block {block}'s MLP has widths {units}, block 0's {list(blocks.mlp_units)}: explorer's "
                           f"blocks are all alike")
    blocks.mlp_units = tuple(units)
    add2 = cursor.take("Add", f"block {block} second residual Add")
    _inputs(add2, [(last, 0), (add1.name, 0)], "second residual")
    blocks.output, blocks.count = add2.name, block + 1


def _mlp(walk: _Walk, blocks: _Blocks, prefix: str, last: str, fan_in: int) -> tuple[list[int], str]:
    """A block's MLP, (Dense gelu, Dropout) after `last` -> {prefix}_mlp_dense0, 1, ...: (its widths, its end)."""
    cursor, units = walk.cursor, []
    while (nxt := cursor.peek()) is not None and nxt.kind == "Dense":
        dense = cursor.take("Dense", "block MLP")
        _inputs(dense, [(last, 0)], "block MLP")
        k, b = _dense(dense, "gelu", fan_in)
        walk.weights[f"{prefix}_mlp_dense{len(units)}/kernel"] = k
        walk.weights[f"{prefix}_mlp_dense{len(units)}/bias"] = b
        drop = cursor.take("Dropout", "block MLP dropout")
        _inputs(drop, [(dense.name, 0)], "block MLP dropout")
        blocks.dropouts.append(float(drop.config.get("rate", 0.0)))
        units.append(int(k.shape[1]))
        last, fan_in = drop.name, int(k.shape[1])
    return units, last


@dataclass
class _Head:
    """The final LayerNormalization, the MLP head and the classifier as mapped."""

    final: str  # the final LayerNormalization's name
    dropout: float  # the Dropout's between Flatten and the MLP head
    units: list[int]
    classifier: str
    num_classes: int


def _head(walk: _Walk, tokens: _Tokens, encoded: str) -> _Head:
    """LayerNormalization, Flatten, Dropout, (Dense gelu, Dropout)..., Dense -> final_norm, head_mlp, head."""
    cursor, weights, layers = walk.cursor, walk.weights, walk.cursor.layers
    final = cursor.take("LayerNormalization", "final LayerNormalization")
    _inputs(final, [(encoded, 0)], "final LayerNormalization")
    walk.layer_norm(final, "final_norm", tokens.width)
    flat = cursor.take("Flatten", "Flatten of the tokens")
    _inputs(flat, [(final.name, 0)], "Flatten")
    drop = cursor.take("Dropout", "dropout before the MLP head")
    _inputs(drop, [(flat.name, 0)], "head dropout")
    head_dropout = float(drop.config.get("rate", 0.0))
    last, fan_in, head_units = drop.name, tokens.num_patches * tokens.width, []
    while (nxt := cursor.peek()) is not None and nxt.kind == "Dense" and cursor.i + 1 < len(layers) \
            and layers[cursor.i + 1].kind == "Dropout":
        dense = cursor.take("Dense", "MLP head")
        _inputs(dense, [(last, 0)], "MLP head")
        k, b = _dense(dense, "gelu", fan_in)
        weights[f"head_mlp_dense{len(head_units)}/kernel"], weights[f"head_mlp_dense{len(head_units)}/bias"] = k, b
        hdrop = cursor.take("Dropout", "MLP head dropout")
        _inputs(hdrop, [(dense.name, 0)], "MLP head dropout")
        head_units.append(int(k.shape[1]))
        last, fan_in = hdrop.name, int(k.shape[1])
    logits = cursor.take("Dense", "classifier")
    _inputs(logits, [(last, 0)], "classifier")
    k, b = _dense(logits, "linear", fan_in)
    weights["head/kernel"], weights["head/bias"] = k, b
    return _Head(final.name, head_dropout, head_units, logits.name, int(k.shape[1]))


def _one_epsilon(walk: _Walk, tokens: _Tokens, source_format: str) -> float:
    """The one epsilon of every LayerNormalization (explorer has one for all)."""
    eps_all = sorted(set(walk.epsilons + ([tokens.epsilon] if tokens.epsilon is not None else [])))
    if len(eps_all) != 1:
        raise ConvertError(f"the LayerNormalization epsilons differ ({eps_all}); explorer uses one for all")
    if tokens.shifted and tokens.epsilon is None:
        walk.mapped.append(f"tokenizer LayerNormalization epsilon: not saved in the {source_format}; taken as the "
                           f"block LayerNormalizations' {eps_all[0]:g} (the example's LAYER_NORM_EPS)")
    return eps_all[0]


def _record_blocks_and_head(walk: _Walk, blocks: _Blocks, head: _Head, epsilon: float) -> None:
    """The card's lines for the blocks, their taus and the head, once the whole model has mapped."""
    kind = "MultiHeadAttentionLSA" if blocks.lsa else "MultiHeadAttention"
    walk.mapped.append(f"{blocks.count} blocks: LayerNormalization (epsilon {epsilon:g}), {kind} ({blocks.heads} "
                       f"heads, key_dim {blocks.key_dim}"
                       f"{', one learned tau per layer, diagonal mask' if blocks.lsa else ''}), Add, "
                       f"LayerNormalization, MLP {list(blocks.mlp_units)} gelu, Add -> block0..{blocks.count - 1}")
    if blocks.lsa:
        walk.mapped.append(f"tau per layer, as learned: {[round(t, 6) for t in blocks.taus]}")
    walk.mapped.append(f"{head.final} (LayerNormalization), Flatten -> final_norm, flatten")
    walk.mapped.append(f"MLP head {head.units} gelu -> head_mlp; {head.classifier} (Dense {head.num_classes}) -> head")


def _is_block(cursor: _Cursor) -> bool:
    """A LayerNormalization followed by attention starts a block; one followed by Flatten is the final one."""
    nxt = cursor.layers[cursor.i + 1] if cursor.i + 1 < len(cursor.layers) else None
    return nxt is not None and nxt.kind in ("MultiHeadAttention", "MultiHeadAttentionLSA")


def _attention(att: SourceLayer, width: int, num_patches: int, is_lsa: bool, weights: dict, ours: str):
    config = att.config
    query = _weight(att, "query/kernel")
    if query.ndim != 3 or query.shape[0] != width:
        raise ConvertError(f"{_describe(att)}: query kernel has shape {query.shape}, expected "
                           f"({width}, heads, key_dim)")
    _, heads, key_dim = query.shape
    for key, want in (("num_heads", heads), ("key_dim", key_dim), ("value_dim", key_dim)):
        if config.get(key) is not None and int(config[key]) != want:
            raise ConvertError(f"{_describe(att)}: {key}={config[key]}, explorer's attention needs {want} "
                               f"(value_dim = key_dim, from its query kernel {query.shape})")
    for key, want in (("use_bias", True), ("output_shape", None), ("use_gate", False), ("sliding_window", None)):
        if key in config and config[key] != want and not (key == "output_shape" and config[key] in ([], ())):
            raise ConvertError(f"{_describe(att)}: {key}={config[key]!r}; the example's attention has {want!r}")
    if config.get("attention_axes") not in (None, [1], 1):
        raise ConvertError(f"{_describe(att)} attends over axes {config['attention_axes']}; the example over tokens")
    names = {"query": "query", "key": "key", "value": "value", "output": "attention_output"}
    for part, name in names.items():
        kshape = (heads, key_dim, width) if part == "output" else (width, heads, key_dim)
        bshape = (width,) if part == "output" else (heads, key_dim)
        weights[f"{ours}/{name}/kernel"] = _weight(att, f"{part}/kernel", kshape)
        weights[f"{ours}/{name}/bias"] = _weight(att, f"{part}/bias", bshape)
    mask = att.mask
    if is_lsa:
        diagonal = 1 - np.eye(num_patches)
        if mask is None:
            raise ConvertError(f"{_describe(att)} is called without the diagonal attention mask; explorer's LSA "
                               f"always masks the diagonal, as the example does")
        if mask.reshape(-1).size != diagonal.size or not np.array_equal(mask.reshape(diagonal.shape) != 0,
                                                                          diagonal != 0):
            raise ConvertError(f"{_describe(att)} is called with an attention mask that is not the example's "
                               f"diagonal mask (1 - eye({num_patches}))")
    elif mask is not None:
        raise ConvertError(f"{_describe(att)} is called with an attention mask; the example's vanilla attention has "
                           f"none")
    return int(heads), int(key_dim)
