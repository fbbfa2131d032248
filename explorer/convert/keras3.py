"""Keras 3: a .keras zip with config.json and model.weights.h5 (or the folder of a save with zipped=False)."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import numpy as np

from explorer.convert.source import INACTIVE, KERAS3, ConvertError, SourceLayer, SourceModel


def _snake_case(name: str) -> str:
    """keras.src.utils.naming.to_snake_case: the h5 group a layer's weights are saved under comes from it."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


_KERAS3_WEIGHTS = {
    "Normalization": {"mean": "vars/0", "variance": "vars/1"},
    "ShiftedPatchTokenization": {"projection/kernel": "projection/vars/0", "projection/bias": "projection/vars/1",
                                 "layer_norm/gamma": "layer_norm/vars/0", "layer_norm/beta": "layer_norm/vars/1"},
    "PatchEncoder": {"embeddings": "position_embedding/vars/0"},
    "LayerNormalization": {"gamma": "vars/0", "beta": "vars/1"},
    "Dense": {"kernel": "vars/0", "bias": "vars/1"},
    "MultiHeadAttention": {f"{part}/{w}": f"{part}_dense/vars/{i}" for part in ("query", "key", "value", "output")
                           for i, w in enumerate(("kernel", "bias"))},
}
_KERAS3_WEIGHTS["MultiHeadAttentionLSA"] = {**_KERAS3_WEIGHTS["MultiHeadAttention"], "tau": "vars/0"}


def _keras3_inbound(config: dict, name: str) -> tuple[list[tuple[str, int]], np.ndarray | None]:
    nodes = config.get("inbound_nodes") or []
    if not nodes:
        return [], None
    if len(nodes) != 1:
        raise ConvertError(f"layer {name!r} is called {len(nodes)} times; the keras.io example calls each layer once")
    inputs = []

    def tensors(value):
        if isinstance(value, dict) and value.get("class_name") == "__keras_tensor__":
            history = value["config"]["keras_history"]
            inputs.append((history[0], int(history[2])))
        elif isinstance(value, (list, tuple)):
            for v in value:
                tensors(v)

    node = nodes[0]
    tensors(node.get("args", []))
    kwargs = node.get("kwargs") or {}
    for key in ("value", "key"):
        tensors(kwargs.get(key))
    mask = kwargs.get("attention_mask")
    if isinstance(mask, dict):
        mask = (mask.get("config") or {}).get("value")
    return inputs, (np.asarray(mask) if mask is not None else None)


def read_keras_archive(path: Path) -> SourceModel:
    """The layers and weights of a `.keras` archive saved by Keras 3 (or of its unzipped folder)."""
    path = Path(path)
    if path.is_dir():  # saved with zipped=False: the archive's files in a folder
        try:
            config = json.loads((path / "config.json").read_text())
            weights = (path / "model.weights.h5").read_bytes()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConvertError(f"{path.name}: config.json is not valid JSON ({e})") from None
        return _read_keras3(path.name, config, weights)
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "config.json" not in names or "model.weights.h5" not in names:
                raise ConvertError(f"{path.name} is a zip without config.json and model.weights.h5: not a Keras 3 "
                                   f"model archive")
            config = json.loads(archive.read("config.json"))
            weights = archive.read("model.weights.h5")  # checks the CRC: a damaged archive fails here
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as e:
        raise ConvertError(f"{path.name} is not a readable .keras archive (truncated or corrupt?): {e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConvertError(f"{path.name}: config.json is not valid JSON ({e})") from None
    return _read_keras3(path.name, config, weights)


def _read_keras3(label: str, config: dict, weights: bytes) -> SourceModel:
    import h5py

    if config.get("class_name") != "Functional" or not isinstance(config.get("config"), dict):
        raise ConvertError(f"{label} holds a Keras {config.get('class_name')!r}, not the functional model the "
                           f"keras.io example builds")
    try:
        h5 = h5py.File(io.BytesIO(weights), "r")
    except OSError as e:
        raise ConvertError(f"{label}: model.weights.h5 is not a readable HDF5 file ({e})") from None
    read: set[str] = set()

    def dataset(name: str) -> np.ndarray | None:
        item = h5.get(name)
        if not isinstance(item, h5py.Dataset):
            return None
        read.add(item.name)
        try:
            return np.asarray(item[()])
        except OSError as e:
            raise ConvertError(f"{label}: weight {name} cannot be read ({e})") from None

    def layer(item: dict, group: str) -> SourceLayer:
        kind, layer_config = item.get("class_name"), item.get("config") or {}
        name = layer_config.get("name") or item.get("name")
        inputs, mask = _keras3_inbound(item, name)
        out = SourceLayer(name=name, kind=kind, config=layer_config, inputs=inputs, mask=mask, location=group)
        if kind == "Sequential":
            out.children = layers_of(layer_config.get("layers", []), f"{group}/layers",
                                     skip_input=True)
        for key, where in _KERAS3_WEIGHTS.get(kind, {}).items():
            value = dataset(f"{group}/{where}")
            if value is not None:
                out.weights[key] = value
        return out

    def layers_of(items: list[dict], container: str, skip_input: bool = False) -> list[SourceLayer]:
        # Keras 3 saves a container's layers under names made from their classes, numbered in order.
        used, out = {}, []
        for item in items:
            if skip_input and item.get("class_name") == "InputLayer":
                continue
            base = _snake_case(str(item.get("class_name")))
            name = f"{base}_{used[base]}" if base in used else base
            used[base] = used.get(base, 0) + 1
            out.append(layer(item, f"{container}/{name}"))
        return out

    with h5:
        layers = layers_of(config["config"].get("layers", []), "layers")
        ignorable = {"Normalization": {"vars/2"}}  # the adapt count
        unused = []
        for lay in layers:
            for item in [lay, *lay.children]:
                group = h5.get(item.location)
                if group is None or item.kind in INACTIVE or item.kind == "Sequential":
                    continue
                found = []
                group.visititems(lambda name, obj, found=found: found.append(obj.name)
                                 if isinstance(obj, h5py.Dataset) else None)
                skip = {f"{group.name}/{s}" for s in ignorable.get(item.kind, ())}
                unused += [f"{item.name}: {n}" for n in found if n not in read and n not in skip]
    input_shape = next((tuple(lay.config.get("batch_shape") or lay.config.get("batch_input_shape") or ())
                        for lay in layers if lay.kind == "InputLayer"), ())
    outputs = config["config"].get("output_layers") or []
    if outputs and isinstance(outputs[0], str):
        outputs = [outputs]
    return SourceModel(KERAS3, layers, input_shape, outputs[0][0] if outputs else "", unused)
