"""One compiled probe per model: logits, every layer's per-head attention and the patches in one call.

A second compiled probe, the what-if probe, runs the same weights with LSA's two mechanisms changed per
image (tau scaled by a factor, the diagonal mask on or off). Everything else here is numpy on the probes'
output: attention from a query patch, attention received, rollout, mean attention distance, entropy, and
the learned temperatures.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import keras
import numpy as np

from explorer.model.compiled import forward
from explorer.model.config import ViTConfig
from explorer.model.layers import attention_what_if
from explorer.model.models import TOKENIZER, attention_layers, tau_values

TAU_FACTORS = (0.25, 4.0)  # the what-if range of the temperature factor


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities over the last axis, stable for large logits."""
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@dataclass
class ProbeResult:
    """What one probe call returns for a batch of B images.

    Attributes:
        logits: (B, classes).
        attention: (B, layers, heads, N, N) attention probabilities, rows over keys.
        patches: (B, N, patch_dim) the tokenizer's flattened (normalised) patches.
    """

    logits: np.ndarray
    attention: np.ndarray
    patches: np.ndarray

    @property
    def probabilities(self) -> np.ndarray:
        return softmax(self.logits)


class Probe:
    """Wraps a loaded ViT in a second functional model whose outputs are the logits, every attention
    layer's scores and the tokenizer's patches; called through Keras' compiled predict function.

    Args:
        model: a model built by `explorer.model.models.build_vit` (or loaded from a checkpoint of ours).
        config: its ViTConfig (for the geometry: grid size, pixels per patch, initial tau).
    """

    def __init__(self, model, config: ViTConfig):
        self.model = model
        self.config = config
        layers = attention_layers(model)
        if not layers:
            raise ValueError(f"model {model.name!r} has no block attention layers; not an explorer ViT")
        scores = [layer.output[1] for layer in layers]
        patches = model.get_layer(TOKENIZER).output[1]
        self.num_layers = len(layers)
        self._probe = keras.Model(model.inputs, [model.outputs[0], patches, *scores],
                                  name=f"{model.name}_probe")

    @property
    def grid_size(self) -> int:
        return self.config.grid_size

    def __call__(self, images: np.ndarray) -> ProbeResult:
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[None]
        size = self.config.image_size
        if images.shape[1:] != (size, size, 3):
            raise ValueError(f"the probe takes (batch, {size}, {size}, 3) images, got {images.shape}")
        outputs = forward(self._probe)(images.astype("float32"))
        logits, patches, *scores = (np.asarray(o) for o in outputs)
        return ProbeResult(logits=logits, attention=np.stack(scores, axis=1), patches=patches)

    def tau(self) -> list[list[float]]:
        return tau_values(self.model)

    @cached_property
    def diagonal_mask(self) -> bool:
        """Whether the model masks the diagonal itself (LSA does, a vanilla ViT does not): fixed when it is
        built, so looked up once (every query click asks)."""
        return bool(getattr(attention_layers(self.model)[0], "diagonal_mask", False))


def _what_if_graph(probe_model, names: set[str]):
    """A Keras model over `probe_model`'s own layers whose attention nodes run `attention_what_if`.

    Built as a subclass that replays the probe's graph at call time: it adds no node to the shared layers
    and assigns nothing, so the learned model is exactly as it was.
    """
    class WhatIfGraph(keras.Model):
        def __init__(self):
            super().__init__(name=f"{probe_model.name}_what_if")
            self.graph = probe_model

        def call(self, inputs):
            images, factor, diagonal = inputs

            def swap(op):
                if op.name not in names:
                    return op
                return lambda query, value, *args, **kwargs: attention_what_if(op, query, factor, diagonal)

            return self.graph._run_through_graph(images, operation_fn=swap)

    return WhatIfGraph()


class WhatIfProbe:
    """The probe's outputs with every layer's tau multiplied by a factor and the diagonal mask switched,
    per image, from the same weights; one compiled forward pass, built once per model.

    Args:
        probe: the model's `Probe`.
    """

    def __init__(self, probe: Probe):
        self.probe = probe
        names = {layer.name for layer in attention_layers(probe.model)}
        self._graph = _what_if_graph(probe._probe, names)

    def __call__(self, images: np.ndarray, factor: float, diagonal_mask: bool) -> ProbeResult:
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[None]
        size = self.probe.config.image_size
        if images.shape[1:] != (size, size, 3):
            raise ValueError(f"the probe takes (batch, {size}, {size}, 3) images, got {images.shape}")
        low, high = TAU_FACTORS
        if not (np.isfinite(factor) and low <= factor <= high):
            raise ValueError(f"the tau factor must be between {low} and {high}, got {factor}")
        batch = len(images)
        outputs = self._graph.predict_on_batch([images.astype("float32"),
                                                np.full((batch,), factor, "float32"),
                                                np.full((batch,), float(bool(diagonal_mask)), "float32")])
        logits, patches, *scores = (np.asarray(o) for o in outputs)
        return ProbeResult(logits=logits, attention=np.stack(scores, axis=1), patches=patches)


def what_if_logits_model(model):
    """A Keras model of `model`'s own layers, called on `[images, factor, diagonal_mask]` (each per image),
    that returns only the logits with every attention layer run by `attention_what_if`: the what-if probe's
    switches without its attention maps, for answers over many images."""
    return _what_if_graph(model, {layer.name for layer in attention_layers(model)})


# --- derived quantities (numpy; any leading batch dims are allowed unless said otherwise) ----------


def query_attention(attention: np.ndarray, layer: int, query: int, grid: int) -> np.ndarray:
    """Attention of one query patch over all keys, per head: (heads, grid, grid).

    `attention` is one image's (layers, heads, N, N).
    """
    return attention[layer, :, query, :].reshape(-1, grid, grid)


def query_locality(attention: np.ndarray, layer: int, query: int, grid: int,
                   pixels_per_patch: float) -> tuple[np.ndarray, np.ndarray]:
    """For one query patch of one layer: each head's attention distance from it (input pixels: the measure
    mean_attention_distance averages over queries) and the share of its attention it gives its own patch
    (what LSA's diagonal mask sets to 0). `attention` is one image's (layers, heads, N, N); two (heads,)."""
    row = attention[layer, :, query, :]
    return (row * patch_distances(grid, pixels_per_patch)[query]).sum(-1), row[:, query]


def received_attention(attention: np.ndarray, grid: int) -> np.ndarray:
    """Mean attention each patch receives over all queries: (..., layers, heads, grid, grid)."""
    received = attention.mean(axis=-2)
    return received.reshape(*received.shape[:-1], grid, grid)


def rollout(attention: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Attention rollout for a model without a CLS token (Abnar & Zuidema 2020).

    Each layer's head-averaged attention gets the identity added for the residual path and is
    renormalised; the cumulative rollout multiplies them from the first layer up. For one image's
    (layers, heads, N, N) this returns `(per_layer, cumulative)`, both (layers, N, N) with rows summing
    to 1: cumulative[l] is how much each input token feeds each token after layer l.
    """
    mean = attention.mean(axis=-3)
    n = mean.shape[-1]
    joint = mean + np.eye(n, dtype=mean.dtype)
    joint = joint / joint.sum(-1, keepdims=True)
    cumulative = np.empty_like(joint)
    current = np.broadcast_to(np.eye(n, dtype=joint.dtype), joint.shape[:-3] + (n, n))
    for layer in range(joint.shape[-3]):
        current = joint[..., layer, :, :] @ current
        cumulative[..., layer, :, :] = current
    return joint, cumulative


def rollout_map(matrix: np.ndarray, grid: int) -> np.ndarray:
    """A rollout matrix (N, N) averaged over query tokens: how much each patch feeds the output."""
    return matrix.mean(axis=-2).reshape(*matrix.shape[:-2], grid, grid)


@lru_cache(maxsize=16)
def patch_distances(grid: int, pixels_per_patch: float) -> np.ndarray:
    """(N, N) Euclidean distances between patch centres, in pixels of the input image."""
    rows, cols = np.divmod(np.arange(grid * grid), grid)
    dy = rows[:, None] - rows[None, :]
    dx = cols[:, None] - cols[None, :]
    return np.sqrt(dy ** 2 + dx ** 2).astype("float64") * pixels_per_patch


def mean_attention_distance(attention: np.ndarray, grid: int, pixels_per_patch: float) -> np.ndarray:
    """Mean attention distance (Dosovitskiy et al. 2021, fig. 7) per layer and head, in input pixels.

    For each query: the attention-weighted distance to the keys; then averaged over queries and any
    batch dims. (..., layers, heads, N, N) -> (layers, heads).
    """
    per_query = (attention * patch_distances(grid, pixels_per_patch)).sum(-1)
    per_head = per_query.mean(-1)
    return per_head.reshape(-1, *per_head.shape[-2:]).mean(0)


def attention_entropy(attention: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each query's attention, averaged over queries and batch: (layers, heads)."""
    p = np.clip(attention, 1e-12, 1.0)
    per_query = -(attention * np.log(p)).sum(-1)
    per_head = per_query.mean(-1)
    return per_head.reshape(-1, *per_head.shape[-2:]).mean(0)


def tau_table(model, config: ViTConfig) -> list[dict]:
    """One row per LSA layer: the learned tau (per head when per-head) beside its initial sqrt(d_k), and each
    tau's ratio to it."""
    start = config.initial_tau
    return [{"layer": i, "tau": values, "mean_tau": float(np.mean(values)), "initial": start,
             "ratio": [float(v) / start for v in values]}
            for i, values in enumerate(tau_values(model))]
