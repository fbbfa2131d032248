"""Where a source model is: a local folder or file, or a Hub repo (what to fetch of it); read by its format."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from explorer.checkpoints import hub
from explorer.convert.keras2 import read_savedmodel
from explorer.convert.keras3 import read_keras_archive
from explorer.convert.labels import LABEL_FILES
from explorer.convert.source import ConvertError, SourceModel

SAVEDMODEL_FILES = ("saved_model.pb", "keras_metadata.pb", "fingerprint.pb")
KERAS3_FILES = ("config.json", "metadata.json", "model.weights.h5")  # a Keras 3 save with zipped=False


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
