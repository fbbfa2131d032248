"""A mapped source model built as ours and written as a checkpoint: the CLI's conversion and a model slot's."""

from __future__ import annotations

import os
import re
from pathlib import Path

from explorer.checkpoints import hub
from explorer.checkpoints.store import (
    CheckpointError,
    is_checkpoint,
    list_checkpoints,
    name_within,
    unique_dir,
    validate_name,
    write_checkpoint,
)
from explorer.convert.files import APP_SELECTION, _model_path, locate, read_source
from explorer.convert.labels import class_names_for
from explorer.convert.mapping import Mapping, map_example
from explorer.convert.source import KIND, ConvertError
from explorer.core.card import Card, Data, Source
from explorer.model.config import ViTConfig, get_preset
from explorer.model.models import build_vit

# Where a model slot keeps the conversion of a Hub repo: inside the repo's cached snapshot, so that it is
# made once per commit, counted in the Hub cache's size and removed with the repo when the cache is pruned.
CONVERTED = "explorer-converted"


def build_model(mapping: Mapping):
    """Our Keras model with the source's weights; every variable of ours gets exactly one source value."""
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
    return name_within(name)


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
    card = Card(variant=mapping.config.variant, preset=_preset(mapping.config), config=mapping.config.to_dict(),
                dataset=Data(name=dataset_name or "unknown", num_classes=mapping.num_classes, note=note),
                class_names=class_names,
                source=Source(kind=KIND, **origin, format=mapping.format, mapped=mapping.mapped,
                              dropped=mapping.dropped, tau=mapping.taus, class_names_assumed=assumed,
                              class_names_from=names_from))
    try:
        return write_checkpoint(model, Path(out_dir) / name if exact else unique_dir(out_dir, name), card)
    except CheckpointError as e:
        raise ConvertError(str(e)) from None


def hub_checkpoint(ref: str, cache_dir: str | None = None, max_hub_bytes: int | None = None) -> Path:
    """The checkpoint folder a model slot loads for a Hub id: the repo's snapshot when it is an explorer
    checkpoint; for a keras.io example model, its conversion, made on first use and kept in the snapshot
    (CONVERTED). The size cap counts the files fetched; every failure is a ConvertError."""
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
    same = get_preset("keras-io", variant=config.variant, mean=config.mean, std=config.std)
    return "keras-io" if config == same else "custom"
