"""Keras 2: a SavedModel with keras_metadata.pb, read with TensorFlow's protos and checkpoint reader."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from explorer.convert.source import INACTIVE, KERAS2, ConvertError, SourceLayer, SourceModel, _plain


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
    nodes = _keras2_metadata(folder)
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
    config = root["config"]
    layers = [_keras2_layer(c, (), paths, nodes, checkpoint) for c in config.get("layers", [])]
    input_shape = next((tuple(lay.config.get("batch_input_shape") or ()) for lay in layers
                        if lay.kind == "InputLayer"), ())
    unused = _keras2_unused(layers, checkpoint)
    outputs = config.get("output_layers") or []
    return SourceModel(KERAS2, layers, input_shape, outputs[0][0] if outputs else "", unused)


def _keras2_metadata(folder: Path) -> dict[str, dict]:
    """The Keras metadata of a SavedModel folder, checked whole: each node's path -> its plain JSON config."""
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
    return nodes


def _keras2_layer(config: dict, parent: tuple, paths: dict, nodes: dict[str, dict],
                  checkpoint: _Checkpoint) -> SourceLayer:
    """One layer (a Sequential with its layers) and its weights, found through its object-graph path."""
    kind, name = config.get("class_name"), config.get("config", {}).get("name") or config.get("name")
    path = paths.get((parent, name))
    inputs, mask = _keras2_inbound(config, name)
    out = SourceLayer(name=name, kind=kind, config=config.get("config") or {}, inputs=inputs, mask=mask,
                      location=path)
    if kind == "Sequential" and path is not None:
        out.children = [_keras2_layer(child, tuple(path), paths, nodes, checkpoint)
                        for child in out.config.get("layers", []) if child.get("class_name") != "InputLayer"]
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


def _keras2_unused(layers: list[SourceLayer], checkpoint: _Checkpoint) -> list[str]:
    """Weights a layer holds that nothing above read: a sign of another architecture."""
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
    return unused
