"""The keras.io example's own models -> our checkpoints: `python -m explorer.convert SOURCE [--out FOLDER]`.

SOURCE is a local folder or file, or a Hub id `owner/name[@revision]`, holding a model of the keras.io
example "Train a Vision Transformer on small datasets" (vit_small_ds), vanilla or SPT/LSA, at any of its
hyper-parameters:

- the 2022 (Keras 2) example saved as a TensorFlow SavedModel (saved_model.pb, keras_metadata.pb,
  variables/), as `push_to_hub_keras` published keras-io/vit_small_ds_v2. Its layers are read from the
  SavedModel's Keras metadata and its weights with TensorFlow's checkpoint reader: no tf-keras is needed;
- a `.keras` archive saved by the current (Keras 3) example, whose classes ShiftedPatchTokenization,
  PatchEncoder and MultiHeadAttentionLSA are registered nowhere: config.json and model.weights.h5 are read
  from the zip.

The model is rebuilt with explorer.models.build_vit and written with explorer.checkpoints.write_checkpoint;
the card's `source` says where it came from and what was mapped. Everything is checked before anything
is written: a model this cannot map exactly is refused with a ConvertError that names the layer or shape.

    python -m explorer.convert keras-io/vit_small_ds_v2 --out checkpoints
    python -m explorer.convert path/to/saved_model_folder --name my-vit
    python -m explorer.convert vit_small_ds.keras

The app's model slots take such a Hub id as they take a checkpoint's: `hub_checkpoint` converts it on first
use into the repo's snapshot in the Hugging Face cache, which keeps it from then on.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from explorer import hub
from explorer.config import ViTConfig

KIND = "keras-io-example"
KERAS2 = "keras2-savedmodel"
KERAS3 = "keras3-archive"

# The example trains on CIFAR-100; its models name no classes.
CIFAR100_CLASSES = (
    "apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle", "bottle", "bowl", "boy",
    "bridge", "bus", "butterfly", "camel", "can", "castle", "caterpillar", "cattle", "chair", "chimpanzee", "clock",
    "cloud", "cockroach", "couch", "crab", "crocodile", "cup", "dinosaur", "dolphin", "elephant", "flatfish",
    "forest", "fox", "girl", "hamster", "house", "kangaroo", "keyboard", "lamp", "lawn_mower", "leopard", "lion",
    "lizard", "lobster", "man", "maple_tree", "motorcycle", "mountain", "mouse", "mushroom", "oak_tree", "orange",
    "orchid", "otter", "palm_tree", "pear", "pickup_truck", "pine_tree", "plain", "plate", "poppy", "porcupine",
    "possum", "rabbit", "raccoon", "ray", "road", "rocket", "rose", "sea", "seal", "shark", "shrew", "skunk",
    "skyscraper", "snail", "snake", "spider", "squirrel", "streetcar", "sunflower", "sweet_pepper", "table",
    "tank", "telephone", "television", "tiger", "tractor", "train", "trout", "tulip", "turtle", "wardrobe",
    "whale", "willow_tree", "wolf", "woman", "worm")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

# Files a repo or folder may name its classes in: one name a line, a JSON list, or a JSON object.
LABEL_FILES = ("labels.txt", "classes.txt", "class_names.txt", "labels.json", "classes.json", "class_names.json",
               "config.json")
SAVEDMODEL_FILES = ("saved_model.pb", "keras_metadata.pb", "fingerprint.pb")
KERAS3_FILES = ("config.json", "metadata.json", "model.weights.h5")  # a Keras 3 save with zipped=False
# Where a model slot keeps the conversion of a Hub repo: inside the repo's cached snapshot, so that it is
# made once per commit, counted in the Hub cache's size and removed with the repo when the cache is pruned.
CONVERTED = "explorer-converted"

# Augmentation layers that are the identity at inference (RandomCrop is not: it centre-crops).
INACTIVE = {"RandomFlip", "RandomRotation", "RandomZoom", "RandomTranslation", "RandomContrast",
            "RandomBrightness"}
KERAS_EPSILON = 1e-7  # keras.backend.epsilon(): Normalization divides by max(sqrt(variance), epsilon)


class ConvertError(ValueError):
    """A source that is not a keras.io example model this can map exactly; the message says what differs."""


# ----------------------------------------------------------------------------------------------------------
# One reading of a source model, whatever its format.


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


# ----------------------------------------------------------------------------------------------------------
# Keras 2: a SavedModel with keras_metadata.pb, read with TensorFlow's protos and checkpoint reader.


def _tf():
    try:
        import tensorflow as tf
    except ImportError:
        raise ConvertError("reading a TensorFlow SavedModel needs TensorFlow (pip install tensorflow-cpu)") from None
    return tf


def _parse_proto(message, path: Path, what: str):
    from google.protobuf.message import DecodeError
    try:
        message.ParseFromString(path.read_bytes())
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ConvertError(f"{path.name} is truncated or corrupt ({what} does not parse: {e})") from None
    return message


class _Checkpoint:
    """The SavedModel's variables: checkpoint keys found through the object graph, from each layer's path."""

    def __init__(self, prefix: Path):
        tf = _tf()
        from tensorflow.core.protobuf import trackable_object_graph_pb2
        # What TensorFlow's reader raises for a damaged file varies (DataLossError, IndexError "Read less bytes
        # than requested", OutOfRangeError, ...): every failure of a read is the file's.
        self._errors = (tf.errors.OpError, ValueError, RuntimeError, IndexError, OSError, MemoryError)
        try:
            self.reader = tf.train.load_checkpoint(str(prefix))
            shapes = self.reader.get_variable_to_shape_map()
            graph_bytes = self.reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")
        except self._errors as e:
            raise ConvertError(f"the SavedModel's variables cannot be read (truncated or corrupt download?): "
                               f"{_first_line(e)}") from None
        self.graph = trackable_object_graph_pb2.TrackableObjectGraph()
        try:
            self.graph.ParseFromString(graph_bytes)
        except Exception as e:  # a DecodeError: the object graph itself is damaged
            raise ConvertError(f"the SavedModel's object graph is corrupt ({e})") from None
        # Every tensor is read once: the reader checks each one's checksum, so a cut or damaged shard is
        # refused here, whether or not the tensors it holds are the model's.
        for key in shapes:
            self.tensor(key)
        self.read: set[str] = set()

    def tensor(self, key: str) -> np.ndarray:
        try:
            return np.asarray(self.reader.get_tensor(key))
        except self._errors as e:
            raise ConvertError(f"variable {key} cannot be read (truncated or corrupt download?): "
                               f"{_first_line(e)}") from None

    def node(self, path: list[str]):
        node = 0
        for part in path:
            children = {c.local_name: c.node_id for c in self.graph.nodes[node].children}
            if part not in children:
                return None
            node = children[part]
        return node

    def variable(self, path: list[str]) -> np.ndarray | None:
        node = self.node(path)
        if node is None:
            return None
        for attribute in self.graph.nodes[node].attributes:
            if attribute.name == "VARIABLE_VALUE":
                self.read.add(attribute.checkpoint_key)
                return self.tensor(attribute.checkpoint_key)
        return None

    def variables_under(self, path: list[str]) -> set[str]:
        """Checkpoint keys of every variable reachable from the object at `path`."""
        start = self.node(path)
        if start is None:
            return set()
        keys, seen, stack = set(), {start}, [start]
        while stack:
            node = self.graph.nodes[stack.pop()]
            keys |= {a.checkpoint_key for a in node.attributes if a.name == "VARIABLE_VALUE"}
            for child in node.children:
                if child.node_id not in seen:
                    seen.add(child.node_id)
                    stack.append(child.node_id)
        return keys


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# Format-free name -> the attribute path(s) of the variable below the layer, first found wins (Keras 2).
_KERAS2_WEIGHTS = {
    "Normalization": {"mean": [["adapt_mean"], ["mean"]], "variance": [["adapt_variance"], ["variance"]]},
    "ShiftedPatchTokenization": {f"{sub}/{w}": [[sub, w]] for sub, ws in (("projection", ("kernel", "bias")),
                                                                         ("layer_norm", ("gamma", "beta")))
                                 for w in ws},
    "PatchEncoder": {"embeddings": [["position_embedding", "embeddings"]]},
    "LayerNormalization": {"gamma": [["gamma"]], "beta": [["beta"]]},
    "Dense": {"kernel": [["kernel"]], "bias": [["bias"]]},
    "MultiHeadAttention": {f"{part}/{w}": [[f"_{part}_dense", w]] for part in ("query", "key", "value", "output")
                           for w in ("kernel", "bias")},
}
_KERAS2_WEIGHTS["MultiHeadAttentionLSA"] = {**_KERAS2_WEIGHTS["MultiHeadAttention"], "tau": [["tau"]]}


def _keras2_inbound(config: dict, name: str) -> tuple[list[tuple[str, int]], np.ndarray | None]:
    nodes = config.get("inbound_nodes") or []
    if not nodes:
        return [], None
    if len(nodes) != 1:
        raise ConvertError(f"layer {name!r} is called {len(nodes)} times; the keras.io example calls each layer once")
    inputs, mask = [], None
    for entry in nodes[0]:
        inputs.append((entry[0], int(entry[2])))
        kwargs = entry[3] if len(entry) > 3 and isinstance(entry[3], dict) else {}
        for key in ("value", "key"):
            if isinstance(kwargs.get(key), list) and kwargs[key] and isinstance(kwargs[key][0], str):
                inputs.append((kwargs[key][0], int(kwargs[key][2])))
        if kwargs.get("attention_mask") is not None:
            mask = np.asarray(kwargs["attention_mask"])
    return inputs, mask


def read_savedmodel(folder: Path) -> SourceModel:
    """The layers and weights of a Keras 2 SavedModel folder."""
    folder = Path(folder)
    if not (folder / "saved_model.pb").is_file():
        raise ConvertError(f"{folder} is not a SavedModel: it has no saved_model.pb")
    if not (folder / "keras_metadata.pb").is_file():
        raise ConvertError(f"{folder} is a SavedModel without keras_metadata.pb (written by tf.saved_model.save, "
                           f"not by Keras' model.save): its layers are not recorded, so it cannot be mapped")
    if not (folder / "variables" / "variables.index").is_file():
        raise ConvertError(f"{folder} is an incomplete SavedModel: variables/variables.index is missing")
    tf = _tf()  # noqa: F841  (fails early and clearly without TensorFlow)
    from tensorflow.core.protobuf import saved_model_pb2
    try:
        from tensorflow.python.keras.protobuf import saved_metadata_pb2
    except ImportError:
        raise ConvertError("this TensorFlow has no Keras SavedModel metadata proto "
                           "(tensorflow.python.keras.protobuf.saved_metadata_pb2)") from None
    _parse_proto(saved_model_pb2.SavedModel(), folder / "saved_model.pb", "the SavedModel graph")
    metadata = _parse_proto(saved_metadata_pb2.SavedMetadata(), folder / "keras_metadata.pb", "the Keras metadata")
    nodes = {}
    for node in metadata.nodes:
        try:
            nodes[node.node_path] = _plain(json.loads(node.metadata))
        except json.JSONDecodeError as e:
            raise ConvertError(f"keras_metadata.pb is corrupt: node {node.node_path} is not JSON ({e})") from None
    root = nodes.get("root")
    if root is None:
        raise ConvertError("keras_metadata.pb describes no root model")
    if root.get("class_name") != "Functional" or not isinstance(root.get("config"), dict):
        raise ConvertError(f"the SavedModel holds a Keras {root.get('class_name')!r}, not the functional model "
                           f"the keras.io example builds")
    checkpoint = _Checkpoint(folder / "variables" / "variables")
    # Layer name -> its path in the object graph, for the top-level layers and one level below.
    paths = {}
    for node_path, meta in nodes.items():
        parts = node_path.split(".")[1:]
        if parts and len(parts) <= 2 and meta.get("name"):
            paths.setdefault((tuple(parts[:-1]), meta["name"]), parts)

    def layer(config: dict, parent: tuple = ()) -> SourceLayer:
        kind, name = config.get("class_name"), config.get("config", {}).get("name") or config.get("name")
        path = paths.get((parent, name))
        inputs, mask = _keras2_inbound(config, name)
        out = SourceLayer(name=name, kind=kind, config=config.get("config") or {}, inputs=inputs, mask=mask,
                          location=path)
        if kind == "Sequential" and path is not None:
            out.children = [layer(child, tuple(path)) for child in out.config.get("layers", [])
                            if child.get("class_name") != "InputLayer"]
        if path is None:
            return out
        for key, candidates in _KERAS2_WEIGHTS.get(kind, {}).items():
            for candidate in candidates:
                value = checkpoint.variable(path + candidate)
                if value is not None:
                    out.weights[key] = value
                    break
        for sub in ("layer_norm", "projection"):
            sub_meta = nodes.get(".".join(["root", *path, sub]))
            if sub_meta is not None:
                out.sub_configs[sub] = sub_meta.get("config") or {}
        return out

    config = root["config"]
    layers = [layer(c) for c in config.get("layers", [])]
    input_shape = next((tuple(lay.config.get("batch_input_shape") or ()) for lay in layers
                        if lay.kind == "InputLayer"), ())
    # Weights a layer holds that nothing above read: a sign of another architecture.
    ignorable = {"Normalization": {"count"}}
    unused = []
    for lay in layers:
        for item in [lay, *lay.children]:
            path = item.location
            if path is None or item.kind in INACTIVE or item.kind == "Sequential":
                continue
            skip = set()
            for attribute in ignorable.get(item.kind, ()):
                node = checkpoint.node(path + [attribute])
                skip |= checkpoint.variables_under(path + [attribute]) if node is not None else set()
            left = checkpoint.variables_under(path) - checkpoint.read - skip
            unused += [f"{item.name}: {key}" for key in sorted(left)]
    outputs = config.get("output_layers") or []
    return SourceModel(KERAS2, layers, input_shape, outputs[0][0] if outputs else "", unused)


# ----------------------------------------------------------------------------------------------------------
# Keras 3: a .keras zip with config.json and model.weights.h5.


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


# ----------------------------------------------------------------------------------------------------------
# The example's architecture, checked layer by layer, mapped onto ViTConfig and our weights.


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
    weights = {"tokenizer/projection/kernel": kernel,
               "tokenizer/projection/bias": _weight(tok, "projection/bias", (width,))}
    token_eps = None
    if shifted:
        weights["tokenizer/layer_norm/gamma"] = _weight(tok, "layer_norm/gamma", (patch_dim,))
        weights["tokenizer/layer_norm/beta"] = _weight(tok, "layer_norm/beta", (patch_dim,))
        sub = tok.sub_configs.get("layer_norm")
        token_eps = float(sub["epsilon"]) if sub and "epsilon" in sub else None
    num_patches = (input_size // patch) ** 2
    mapped.append(f"{tok.name} (ShiftedPatchTokenization, {'shifted' if shifted else 'vanilla'}, patch {patch}) -> "
                  f"tokenizer")

    enc = cursor.take("PatchEncoder", "patch encoder")
    _inputs(enc, [(tok.name, 0)], "patch encoder")
    weights["position/position_embedding"] = _weight(enc, "embeddings", (num_patches, width))
    mapped.append(f"{enc.name} (PatchEncoder, {num_patches} positions) -> position")

    encoded, epsilons, taus, lsa_flags, heads_seen = enc.name, [], [], [], set()
    mlp_units, dropouts, block = None, [], 0
    while (nxt := cursor.peek()) is not None and nxt.kind == "LayerNormalization" and _is_block(cursor):
        prefix = f"block{block}"
        norm1 = cursor.take("LayerNormalization", f"block {block} first LayerNormalization")
        _inputs(norm1, [(encoded, 0)], "block LayerNormalization")
        epsilons.append(_epsilon(norm1))
        weights[f"{prefix}_norm1/gamma"] = _weight(norm1, "gamma", (width,))
        weights[f"{prefix}_norm1/beta"] = _weight(norm1, "beta", (width,))
        att = cursor.take(("MultiHeadAttentionLSA", "MultiHeadAttention"), f"block {block} attention")
        is_lsa = att.kind == "MultiHeadAttentionLSA"
        _inputs(att, [(norm1.name, 0), (norm1.name, 0)], "self-attention (query and value)")
        heads, key_dim = _attention(att, width, num_patches, is_lsa, weights, f"{prefix}_attention")
        heads_seen.add((heads, key_dim))
        if is_lsa:
            taus.append(float(_weight(att, "tau", ()).reshape(())))
            weights[f"{prefix}_attention/tau"] = _weight(att, "tau", ()).reshape(())
        lsa_flags.append(is_lsa)
        if att.config.get("dropout") is not None:
            dropouts.append(float(att.config["dropout"]))
        add1 = cursor.take("Add", f"block {block} first residual Add")
        _inputs(add1, [(att.name, 0), (encoded, 0)], "first residual")
        norm2 = cursor.take("LayerNormalization", f"block {block} second LayerNormalization")
        _inputs(norm2, [(add1.name, 0)], "block LayerNormalization")
        epsilons.append(_epsilon(norm2))
        weights[f"{prefix}_norm2/gamma"] = _weight(norm2, "gamma", (width,))
        weights[f"{prefix}_norm2/beta"] = _weight(norm2, "beta", (width,))
        units, last, fan_in = [], norm2.name, width
        while (nxt := cursor.peek()) is not None and nxt.kind == "Dense":
            dense = cursor.take("Dense", "block MLP")
            _inputs(dense, [(last, 0)], "block MLP")
            k, b = _dense(dense, "gelu", fan_in)
            weights[f"{prefix}_mlp_dense{len(units)}/kernel"], weights[f"{prefix}_mlp_dense{len(units)}/bias"] = k, b
            drop = cursor.take("Dropout", "block MLP dropout")
            _inputs(drop, [(dense.name, 0)], "block MLP dropout")
            dropouts.append(float(drop.config.get("rate", 0.0)))
            units.append(int(k.shape[1]))
            last, fan_in = drop.name, int(k.shape[1])
        if not units or units[-1] != width:
            raise ConvertError(f"block {block}'s MLP has widths {units}; the example's ends with the token width "
                               f"{width}")
        if mlp_units is not None and tuple(units) != mlp_units:
            raise ConvertError(f"block {block}'s MLP has widths {units}, block 0's {list(mlp_units)}: explorer's "
                               f"blocks are all alike")
        mlp_units = tuple(units)
        add2 = cursor.take("Add", f"block {block} second residual Add")
        _inputs(add2, [(last, 0), (add1.name, 0)], "second residual")
        encoded, block = add2.name, block + 1
    if block == 0:
        raise ConvertError(f"{_describe(cursor.peek()) if cursor.peek() else 'the end of the model'} comes after "
                           f"the patch encoder; the keras.io example has its Transformer blocks there")
    if len(heads_seen) != 1:
        raise ConvertError(f"the blocks' attention layers differ in (heads, key_dim): {sorted(heads_seen)}")
    if len(set(lsa_flags)) != 1:
        raise ConvertError("some blocks use MultiHeadAttentionLSA and others MultiHeadAttention; the example uses one "
                           "kind throughout")
    heads, key_dim = heads_seen.pop()
    final = cursor.take("LayerNormalization", "final LayerNormalization")
    _inputs(final, [(encoded, 0)], "final LayerNormalization")
    epsilons.append(_epsilon(final))
    weights["final_norm/gamma"] = _weight(final, "gamma", (width,))
    weights["final_norm/beta"] = _weight(final, "beta", (width,))
    flat = cursor.take("Flatten", "Flatten of the tokens")
    _inputs(flat, [(final.name, 0)], "Flatten")
    drop = cursor.take("Dropout", "dropout before the MLP head")
    _inputs(drop, [(flat.name, 0)], "head dropout")
    head_dropout = float(drop.config.get("rate", 0.0))
    last, fan_in, head_units = drop.name, num_patches * width, []
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
    num_classes = int(k.shape[1])
    if cursor.peek() is not None:
        raise ConvertError(f"{_describe(cursor.peek())} follows the classifier; the keras.io example ends there")
    if source.output and source.output != logits.name:
        raise ConvertError(f"the model's output is {source.output!r}, not its last Dense layer {logits.name!r}")
    if source.unused:
        raise ConvertError(f"weights the keras.io example does not have: {', '.join(source.unused[:5])}"
                           f"{' ...' if len(source.unused) > 5 else ''}")
    eps_all = sorted(set(epsilons + ([token_eps] if token_eps is not None else [])))
    if len(eps_all) != 1:
        raise ConvertError(f"the LayerNormalization epsilons differ ({eps_all}); explorer uses one for all")
    if shifted and token_eps is None:
        mapped.append(f"tokenizer LayerNormalization epsilon: not saved in the {source.format}; taken as the block "
                      f"LayerNormalizations' {eps_all[0]:g} (the example's LAYER_NORM_EPS)")
    lsa = lsa_flags[0]
    variant = {(False, False): "vanilla", (True, False): "spt", (False, True): "lsa", (True, True): "spt_lsa"}[
        (shifted, lsa)]
    attention_dropout = dropouts[0] if dropouts else 0.0
    try:
        config = ViTConfig(image_size=image_size, input_size=input_size, patch_size=patch, num_layers=block,
                           projection_dim=width, num_heads=heads, key_dim=key_dim, mlp_units=mlp_units,
                           head="flatten", head_units=tuple(head_units), dropout=attention_dropout,
                           head_dropout=head_dropout, layer_norm_eps=eps_all[0], variant=variant, tau_mode="layer",
                           mean=mean, std=std)
    except ValueError as e:
        raise ConvertError(f"the model maps onto no explorer configuration: {e}") from None
    kind = "MultiHeadAttentionLSA" if lsa else "MultiHeadAttention"
    mapped.append(f"{block} blocks: LayerNormalization (epsilon {eps_all[0]:g}), {kind} ({heads} heads, key_dim "
                  f"{key_dim}{', one learned tau per layer, diagonal mask' if lsa else ''}), Add, "
                  f"LayerNormalization, MLP {list(mlp_units)} gelu, Add -> block0..{block - 1}")
    if lsa:
        mapped.append(f"tau per layer, as learned: {[round(t, 6) for t in taus]}")
    mapped.append(f"{final.name} (LayerNormalization), Flatten -> final_norm, flatten")
    mapped.append(f"MLP head {head_units} gelu -> head_mlp; {logits.name} (Dense {num_classes}) -> head")
    return Mapping(config, num_classes, weights, taus, mapped, dropped, source.format)


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


# ----------------------------------------------------------------------------------------------------------
# Sources: a folder, a file or a Hub repo; class names; the checkpoint.


def _hub_files(listed: dict[str, int | None], where: str) -> list[str]:
    """The files of a Hub repo holding an example model: a SavedModel or one .keras, and class-name files."""
    top = {name for name in listed if "/" not in name}
    labels = [name for name in LABEL_FILES if name in top]
    if {"saved_model.pb", "keras_metadata.pb"} <= top:
        variables = [name for name in listed if name.startswith("variables/variables.")]
        return [name for name in SAVEDMODEL_FILES if name in top] + sorted(variables) + labels
    if {"config.json", "model.weights.h5"} <= top and "explorer.json" not in top:  # Keras 3's save to hf://
        return [name for name in KERAS3_FILES if name in top] + [name for name in labels if name != "config.json"]
    archives = sorted(name for name in top if name.endswith(".keras"))
    if len(archives) == 1:
        return archives + labels
    if len(archives) > 1:
        raise hub.HubError(f"{where} holds several .keras files ({', '.join(archives)}); download the one to "
                           f"convert and pass its path")
    if "explorer.json" in top:
        raise hub.HubError(f"{where} is already an explorer checkpoint: load it as it is")
    if "saved_model.pb" in top:
        raise hub.HubError(f"{where} holds a SavedModel without keras_metadata.pb (not written by Keras' "
                           f"model.save): its layers are not recorded, so it cannot be mapped")
    h5 = sorted(name for name in top if name.endswith((".h5", ".hdf5")))
    if h5:
        raise hub.HubError(f"{where} holds a Keras 2 HDF5 model ({', '.join(h5)}); only SavedModels and Keras 3 "
                           f".keras archives of the keras.io example can be converted")
    raise hub.HubError(f"{where} holds no model this app reads: neither an explorer checkpoint (explorer.json) nor "
                       f"a keras.io example model (a SavedModel: saved_model.pb, keras_metadata.pb, variables/; or a "
                       f".keras archive)")


# Offline, the cache is asked for the files fetched whenever a repo has them (see hub.Selection): a
# SavedModel's. An archive, or a name file, fetched for one repo may sit unfetched beside a SavedModel in
# another; the readers check whatever is there.
_ALWAYS = ("saved_model.pb", "keras_metadata.pb", "variables/variables.*")
HUB_SELECTION = hub.Selection(_hub_files, _ALWAYS, "model files")


def _app_files(listed: dict[str, int | None], where: str) -> list[str]:
    """An explorer checkpoint's files when the repo is one, else those of a keras.io example model."""
    if hub.CHECKPOINT_FILES[0] in listed:
        return hub.checkpoint_files(listed, where)
    return _hub_files(listed, where)


# What a model slot fetches. Offline, the cache is asked for a checkpoint's card and a SavedModel's files:
# an explorer checkpoint's other files may be a keras.io model's unfetched ones in another repo (and the
# README of a repo of the example's is never fetched).
APP_SELECTION = hub.Selection(_app_files, (hub.CHECKPOINT_FILES[0], *_ALWAYS), "model files")


def locate(source: str | os.PathLike, cache_dir: str | None = None,
           max_hub_bytes: int | None = None) -> tuple[Path, dict, Path | None]:
    """(the local model: a SavedModel folder or a .keras file; where it came from {source, revision}; the
    folder that may name its classes: the repo's snapshot or the folder given, None for a file)."""
    path = Path(source).expanduser()
    text = str(source)
    if path.exists():
        return _model_path(path), {"source": str(path.resolve()), "revision": None}, path if path.is_dir() else None
    if text.startswith("hf://") or hub.looks_like_repo_id(text):
        try:
            folder = hub.download(text, cache_dir=cache_dir, max_bytes=max_hub_bytes, selection=HUB_SELECTION)
        except hub.HubError as e:
            raise ConvertError(str(e)) from None
        repo_id, revision = hub.parse_ref(text)
        origin = {"source": repo_id, "revision": folder.name}
        if revision and revision != folder.name:
            origin["requested_revision"] = revision
        return _model_path(folder), origin, folder
    raise ConvertError(f"{text!r} is neither a local file or folder nor a Hub id (owner/name[@revision])")


def _model_path(path: Path) -> Path:
    if path.is_file():
        if path.suffix in (".h5", ".hdf5"):
            raise ConvertError(f"{path.name} is a Keras 2 HDF5 file; only SavedModels and Keras 3 .keras archives of "
                               f"the keras.io example can be converted (in Keras 2: model.save(folder) writes a "
                               f"SavedModel)")
        if path.suffix == ".keras" or zipfile.is_zipfile(path):
            return path
        if path.name in ("saved_model.pb", "keras_metadata.pb"):
            return path.parent
        raise ConvertError(f"{path.name} is neither a .keras archive nor part of a SavedModel")
    if (path / "saved_model.pb").is_file() or (path / "keras_metadata.pb").is_file():
        return path
    if (path / "config.json").is_file() and (path / "model.weights.h5").is_file() \
            and not (path / "explorer.json").is_file():
        return path  # a Keras 3 save with zipped=False
    archives = sorted(path.glob("*.keras"))
    if len(archives) == 1:
        return archives[0]
    if len(archives) > 1:
        raise ConvertError(f"{path} holds several .keras files ({', '.join(a.name for a in archives)}); pass one")
    if (path / "explorer.json").is_file():
        raise ConvertError(f"{path} is already an explorer checkpoint: load it as it is")
    h5 = sorted(p.name for p in path.glob("*.h5"))
    if h5:
        raise ConvertError(f"{path} holds a Keras 2 HDF5 model ({', '.join(h5)}); only SavedModels and Keras 3 "
                           f".keras archives of the keras.io example can be converted")
    raise ConvertError(f"{path} holds no Keras model: neither a SavedModel (saved_model.pb, keras_metadata.pb, "
                       f"variables/) nor a .keras archive")


def read_source(model_path: Path) -> SourceModel:
    """The SavedModel folder, .keras archive or unzipped Keras 3 folder `locate` found, read."""
    if model_path.is_dir() and not (model_path / "model.weights.h5").is_file():
        return read_savedmodel(model_path)
    return read_keras_archive(model_path)


def _names_from(path: Path) -> list[str] | None:
    if path.suffix == ".txt":
        names = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
        return names or None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(data, dict):
        for key in ("class_names", "labels", "classes", "id2label"):
            if key in data:
                data = data[key]
                break
        else:
            return None
    if isinstance(data, dict):  # {"0": "apple", ...}
        try:
            return [str(data[k]) for k in sorted(data, key=lambda k: int(k))]
        except ValueError:
            return None
    if isinstance(data, list) and all(isinstance(n, (str, int, float)) for n in data):
        return [str(n) for n in data]
    return None


def class_names_for(folder: Path | None, num_classes: int) -> tuple[list[str], bool, str]:
    """(class names, assumed?, where they came from): a labels file of the repo or folder, else CIFAR-100's or
    CIFAR-10's for 100 or 10 outputs, else "class i"."""
    if folder is not None:
        for name in LABEL_FILES:
            path = folder / name
            if path.is_file():
                names = _names_from(path)
                if names is None:
                    continue
                if len(names) != num_classes:
                    raise ConvertError(f"{name} names {len(names)} classes; the model has {num_classes} outputs")
                return names, False, name
    if num_classes == 100:
        return list(CIFAR100_CLASSES), True, "CIFAR-100's fine labels (the example's dataset)"
    if num_classes == 10:
        return list(CIFAR10_CLASSES), True, "CIFAR-10's labels"
    return [f"class {i}" for i in range(num_classes)], True, "numbered: the source names none"


def build_model(mapping: Mapping):
    """Our Keras model with the source's weights; every variable of ours gets exactly one source value."""
    from explorer.models import build_vit

    model = build_vit(mapping.config, mapping.num_classes)
    ours = {v.path: v for v in model.weights}
    missing = sorted(set(ours) - set(mapping.weights))
    extra = sorted(set(mapping.weights) - set(ours))
    if missing or extra:  # a bug here, not in the source: the mapping and build_vit disagree
        raise ConvertError(f"internal: weights not mapped {missing[:5]}, mapped to nothing {extra[:5]}")
    for path, variable in ours.items():
        value = mapping.weights[path]
        if tuple(variable.shape) != tuple(value.shape):
            raise ConvertError(f"internal: {path} has shape {tuple(variable.shape)}, the source {value.shape}")
        variable.assign(value)
    return model


def _default_name(origin: dict, model_path: Path) -> str:
    base = origin["source"].replace("/", "-") if origin.get("revision") else (
        model_path.stem if model_path.is_file() else model_path.name)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-._") or "keras-io-example"
    return name[:96]


def convert(source: str | os.PathLike, out_dir: str | os.PathLike = "checkpoints", name: str | None = None,
            cache_dir: str | None = None, max_hub_bytes: int | None = None) -> Path:
    """Converts a keras.io example model (local or on the Hub) into a new checkpoint folder under `out_dir`;
    returns it. Nothing is written unless everything maps."""
    model_path, origin, labels_dir = locate(source, cache_dir, max_hub_bytes)
    return _write(model_path, origin, labels_dir, out_dir, name or _default_name(origin, model_path))


def _write(model_path: Path, origin: dict, labels_dir: Path | None, out_dir: str | os.PathLike, name: str,
           exact: bool = False) -> Path:
    """Reads, maps and writes one source model as the checkpoint `out_dir/name` (with `exact`; else the first
    free name like it)."""
    from explorer.checkpoints import CheckpointError, unique_dir, validate_name, write_checkpoint

    mapping = map_example(read_source(model_path))
    class_names, assumed, names_from = class_names_for(labels_dir, mapping.num_classes)
    try:
        validate_name(name)
    except CheckpointError as e:
        raise ConvertError(str(e)) from None
    model = build_model(mapping)
    dataset_name = {100: "cifar100", 10: "cifar10"}.get(mapping.num_classes) if assumed else None
    note = (f"converted from the keras.io example's model {origin['source']}; class names "
            f"{'assumed: ' if assumed else 'from '}{names_from}")
    card = {"variant": mapping.config.variant, "preset": _preset(mapping.config),
            "config": mapping.config.to_dict(),
            "dataset": {"name": dataset_name or "unknown", "num_classes": mapping.num_classes, "note": note},
            "class_names": class_names, "metrics": {}, "history": [], "training": {}, "base": None,
            "source": {"kind": KIND, **origin, "format": mapping.format, "mapped": mapping.mapped,
                       "dropped": mapping.dropped, "tau": mapping.taus, "class_names_assumed": assumed,
                       "class_names_from": names_from}}
    try:
        return write_checkpoint(model, Path(out_dir) / name if exact else unique_dir(out_dir, name), card)
    except CheckpointError as e:
        raise ConvertError(str(e)) from None


def hub_checkpoint(ref: str, cache_dir: str | None = None, max_hub_bytes: int | None = None) -> Path:
    """The checkpoint folder a model slot loads for a Hub id: the repo's snapshot when it is an explorer
    checkpoint; for a keras.io example model, its conversion, made on first use and kept in the snapshot
    (CONVERTED). The size cap counts the files fetched; every failure is a ConvertError."""
    from explorer.checkpoints import is_checkpoint, list_checkpoints

    try:
        folder = hub.download(ref, cache_dir=cache_dir, max_bytes=max_hub_bytes, selection=APP_SELECTION)
        repo_id, revision = hub.parse_ref(ref)
    except hub.HubError as e:
        raise ConvertError(str(e)) from None
    if is_checkpoint(folder):
        return folder
    found = list_checkpoints(folder / CONVERTED)
    if found:
        return found[0]
    origin = {"source": repo_id, "revision": folder.name}
    if revision and revision != folder.name:
        origin["requested_revision"] = revision
    name = _default_name(origin, folder)
    try:
        return _write(_model_path(folder), origin, folder, folder / CONVERTED, name, exact=True)
    except ConvertError:
        if is_checkpoint(folder / CONVERTED / name):  # another process converted it meanwhile
            return folder / CONVERTED / name
        raise


def _preset(config: ViTConfig) -> str:
    from explorer.config import get_preset
    same = get_preset("keras-io", variant=config.variant, mean=config.mean, std=config.std)
    return "keras-io" if config == same else "custom"


def main(argv=None) -> int:
    """`python -m explorer.convert SOURCE [--out FOLDER] [--name NAME]`."""
    p = argparse.ArgumentParser(prog="python -m explorer.convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="a SavedModel folder, a .keras file, or a Hub id owner/name[@revision]")
    p.add_argument("--out", default="checkpoints", help="folder the new checkpoint goes in (default: checkpoints)")
    p.add_argument("--name", help="the checkpoint's name (default: from the source); never overwrites")
    p.add_argument("--max-mb", type=float, default=None,
                   help="refuse a Hub repo whose model files exceed this many MB (default: $EXPLORER_MAX_HUB_MB, "
                        "else no limit)")
    args = p.parse_args(argv)
    limit = args.max_mb
    if limit is None and os.environ.get("EXPLORER_MAX_HUB_MB"):
        try:
            limit = float(os.environ["EXPLORER_MAX_HUB_MB"])
        except ValueError:
            print(f"error: EXPLORER_MAX_HUB_MB={os.environ['EXPLORER_MAX_HUB_MB']!r} is not a number", file=sys.stderr)
            return 2
    try:
        folder = convert(args.source, args.out, args.name,
                         max_hub_bytes=int(limit * hub.MB) if limit is not None else None)
    except ConvertError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
