"""One reading of a source model, whatever its format: its layers, their configs, inputs and weights under
format-free names; and the error every refusal raises."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

KIND = "keras-io-example"
KERAS2 = "keras2-savedmodel"
KERAS3 = "keras3-archive"

# Augmentation layers that are the identity at inference (RandomCrop is not: it centre-crops).
INACTIVE = {"RandomFlip", "RandomRotation", "RandomZoom", "RandomTranslation", "RandomContrast",
            "RandomBrightness"}


class ConvertError(ValueError):
    """A source that is not a keras.io example model this can map exactly; the message says what differs."""


@dataclass
class SourceLayer:
    """A layer of the source model: its class, config, inputs and weights under format-free names
    ("kernel", "query/kernel", "projection/bias", "tau", "mean", ...)."""

    name: str
    kind: str
    config: dict
    inputs: list[tuple[str, int]] = field(default_factory=list)  # (layer name, output index), call order
    mask: np.ndarray | None = None  # a constant attention_mask the layer was called with
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    children: list[SourceLayer] = field(default_factory=list)  # a Sequential's layers
    sub_configs: dict[str, dict] = field(default_factory=dict)  # configs of sublayers, where saved
    location: object = None  # where its weights are in the file (object-graph path, h5 group)


@dataclass
class SourceModel:
    format: str
    layers: list[SourceLayer]
    input_shape: tuple
    output: str
    unused: list[str] = field(default_factory=list)  # weights in the file that no mapped layer holds


def _plain(value):
    """Keras 2 configs wrap tuples as {"class_name": "__tuple__", "items": [...]}: plain lists here."""
    if isinstance(value, dict):
        if value.get("class_name") == "__tuple__" and "items" in value:
            return [_plain(v) for v in value["items"]]
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _describe(layer: SourceLayer) -> str:
    return f"layer {layer.name!r} ({layer.kind})"
