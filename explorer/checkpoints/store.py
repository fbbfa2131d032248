"""The checkpoint format: a folder with the Keras unzipped save, a card and a model card.

    <name>/
      config.json, metadata.json, model.weights.h5   Keras 3 unzipped save (keras.saving, zipped=False) of
                                                     the model alone: its weights, no optimizer state
      explorer.json                                  the card (explorer.core.card.Card): variant, config, data,
                                                     metrics, history, training
      README.md                                      Hugging Face model card with front matter

The same layout is used locally and on the Hub, so a snapshot of a Hub repo is loaded like a folder
(`resolve` is the one place a reference becomes a folder; explorer.checkpoints.hub only moves folders).
Folders are written under a temporary name and renamed into place: a reader never sees half of one.
Training backups (explorer.training.backup) keep the optimizer's state; a checkpoint does not, as serving never reads
it and fine-tuning compiles the model afresh. `lean` rewrites a folder saved with its optimizer to this form.

    python -m explorer.checkpoints push checkpoints/cifar10-spt_lsa owner/vit-spt-lsa-cifar10
    python -m explorer.checkpoints pull owner/vit-spt-lsa-cifar10@main
    python -m explorer.checkpoints lean checkpoints ablation
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import importlib.metadata as _metadata
import json
import os
import re
import sys
from pathlib import Path

import keras

import explorer.model.layers  # noqa: F401  (registers the custom layers)
from explorer.checkpoints import hub
from explorer.checkpoints.held_out import HELD_OUT
from explorer.checkpoints.model_card import model_card
from explorer.core import atomic
from explorer.core.atomic import clean_stale
from explorer.core.card import CARD, Card

MODEL_FILES = ("config.json", "metadata.json", "model.weights.h5")
# The top-level group of model.weights.h5 that Keras fills with a compiled model's optimizer variables.
OPTIMIZER_GROUP = "optimizer"
FORMAT = "explorer-vit-checkpoint"
FORMAT_VERSION = 1
# A checkpoint's folder name (the Hub's limit for a repository's name): the one rule for every name a
# checkpoint gets, typed (a run's name), derived (a base's name and the data's) or made unique (-2, -3).
NAME_MAX = 96
_NAME = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{NAME_MAX - 1}}}$")

# Layer classes a checkpoint of ours may contain; anything else is refused before Keras builds it.
_OUR_LAYERS = {"ImagePreprocessing", "ShiftedPatchTokenization", "PatchEncoder", "LocalitySelfAttention",
               "DropPath"}
_KERAS_LAYERS = {"InputLayer", "LayerNormalization", "MultiHeadAttention", "Add", "Dense", "Dropout",
                 "Flatten", "GlobalAveragePooling1D"}


class CheckpointError(ValueError):
    """A folder that is not a loadable checkpoint of ours; the message says which file and why."""


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


def versions() -> dict:
    """Keras, its backend and the backend library's version (jax and jaxlib on JAX), read from the installed
    packages' metadata, so a JAX worker never imports TensorFlow to write its card."""
    backend = keras.backend.backend()
    out = {"keras": keras.__version__, "backend": backend}
    packages = {"tensorflow": ["tensorflow", "tensorflow-cpu"], "jax": ["jax", "jaxlib"], "torch": ["torch"]}
    for package in packages.get(backend, []):
        try:
            out[package.replace("-cpu", "")] = _metadata.version(package)
        except _metadata.PackageNotFoundError:
            continue
    return out


def validate_name(name: str, room: int = 0) -> str:
    """`name` if it is a checkpoint's name with `room` characters to spare (for a suffix such as -A)."""
    if (not isinstance(name, str) or not _NAME.match(name) or ".." in name
            or len(name) > NAME_MAX - room):
        raise CheckpointError(f"checkpoint name {name!r} must be 1-{NAME_MAX - room} letters, digits, '.', '_' "
                              f"or '-', starting with a letter or digit")
    return name


def name_within(name: str, suffix: str = "") -> str:
    """`name` + `suffix`, `name` cut so that the whole is within NAME_MAX (for names made from others)."""
    return name[:NAME_MAX - len(suffix)].rstrip("-._") + suffix


def unique_dir(parent: str | os.PathLike, name: str) -> Path:
    """`parent/name`, or `parent/name-2`, `-3`, ... : a new checkpoint never replaces an old one."""
    parent, name = Path(parent), validate_name(name)
    candidate, n = parent / name, 1
    while candidate.exists():
        n += 1
        candidate = parent / name_within(name, f"-{n}")
    return candidate


def _model_alone(model):
    """`model` without its optimizer and compile config: a new Functional over the same layers (so the same
    weights), which saves as the model alone while the caller's model stays compiled."""
    return keras.Model(model.input, model.output, name=model.name)


def write_checkpoint(model, folder: str | os.PathLike, card: Card) -> Path:
    """Saves `model` and its card as a new checkpoint folder, atomically; returns the final path. The card's
    format, name, parameters, versions and creation time are filled in here.

    The folder must not exist yet. Everything is written to a hidden sibling first and renamed into
    place at the end, so an interrupted or failing write (full disk, killed process) leaves no
    checkpoint, and never a partial one. Only the model is saved, never its optimizer's state.
    """
    folder = Path(folder)
    validate_name(folder.name)
    if folder.exists():
        raise CheckpointError(f"{folder} already exists; checkpoints are never overwritten")
    folder.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(folder.parent)
    card = dataclasses.replace(card, format=FORMAT, format_version=FORMAT_VERSION, name=folder.name,
                               parameters=int(model.count_params()), versions=versions(),
                               created=card.created or _now())
    try:
        with atomic.replacing(folder) as tmp:  # a folder: never replaces one already there
            keras.saving.save_model(_model_alone(model), str(tmp), zipped=False)
            (tmp / CARD).write_text(json.dumps(card.to_json(), indent=2, sort_keys=False))
            (tmp / "README.md").write_text(model_card(card))
    except OSError as e:
        raise CheckpointError(f"could not write checkpoint {folder.name}: {e.strerror or e}; nothing was "
                              f"saved") from e
    return folder


def write_card(folder: str | os.PathLike, card: Card) -> None:
    """Replaces a checkpoint's card and model card with `card`'s, each file atomically."""
    folder = Path(folder)
    for name, text in ((CARD, json.dumps(card.to_json(), indent=2)), ("README.md", model_card(card))):
        atomic.write_text(folder / name, text, durable=False)


def update_card(folder: str | os.PathLike, **changes) -> Card:
    """Merges `changes` (JSON, as the card holds it: `metrics={"test_top1": 0.8}` adds to the metrics) into a
    checkpoint's card and model card; returns the new card."""
    data = read_card(folder).to_json()
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    card = Card.from_json(data)
    write_card(folder, card)
    return card


def read_card(folder: str | os.PathLike) -> Card:
    folder = Path(folder)
    path = folder / CARD
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder")
    if not path.is_file():
        raise CheckpointError(f"{folder} is not an explorer checkpoint: it has no {CARD}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an explorer checkpoint card (format is not {FORMAT!r})")
    return Card.from_json(data)


def is_checkpoint(folder: str | os.PathLike) -> bool:
    folder = Path(folder)
    return (not folder.name.startswith(".") and (folder / CARD).is_file()
            and all((folder / f).is_file() for f in MODEL_FILES))


def list_checkpoints(root: str | os.PathLike) -> list[Path]:
    """Every checkpoint folder under `root` (any depth), sorted; temporary folders are skipped."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if is_checkpoint(dirpath):
            found.append(Path(dirpath))
            dirnames[:] = []
    return sorted(found)


def _read_config(folder: Path) -> dict:
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} is not a Keras model config (not a JSON object)")
    return config


def _check_files(folder: Path) -> Card:
    """The folder's card, once it is known to hold a card and every Keras file."""
    card = read_card(folder)
    missing = [f for f in MODEL_FILES if not (folder / f).is_file()]
    if missing:
        raise CheckpointError(f"{folder} is missing {', '.join(missing)}")
    return card


def _check_architecture(folder: Path) -> None:
    path = folder / "config.json"
    config = _read_config(folder)
    if config.get("class_name") != "Functional":
        raise CheckpointError(f"{path}: the model is a {config.get('class_name')!r}, not one of ours "
                              f"(a Functional ViT)")
    layers = config.get("config", {}).get("layers", [])
    classes = {layer.get("class_name") for layer in layers}
    unknown = sorted(str(c) for c in classes - _OUR_LAYERS - _KERAS_LAYERS)
    if unknown:
        raise CheckpointError(f"{path}: layers {unknown} are not part of an explorer ViT; refusing to "
                              f"build it")
    if "ShiftedPatchTokenization" not in classes:
        raise CheckpointError(f"{path}: no ShiftedPatchTokenization layer; not an explorer ViT")


def load_folder(folder: str | os.PathLike):
    """(model, card) from a checkpoint folder; always `safe_mode=True`."""
    folder = Path(folder)
    card = _check_files(folder)
    _check_architecture(folder)
    try:
        model = keras.saving.load_model(str(folder), compile=False, safe_mode=True)
    except Exception as e:
        raise CheckpointError(f"cannot load the model in {folder}: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from None
    return model, card


@dataclasses.dataclass(frozen=True)
class CheckpointIdentity:
    """What names a checkpoint as it is on disk, for a cache of what its model computes: its folder (a Hub
    snapshot's names its revision) and each model and card file's size and modification time. A checkpoint
    written again in the same folder has another identity; the same files read again have the same one."""

    folder: str
    files: tuple[tuple[str, int, int], ...]


def checkpoint_identity(folder: str | os.PathLike) -> CheckpointIdentity:
    """The identity of the checkpoint in `folder`; a missing file is left out (load_folder says what is wrong)."""
    folder = Path(folder).resolve()
    # A Hub snapshot's files are links: stat follows them to their blobs.
    stats = [(name, (folder / name).stat()) for name in (*MODEL_FILES, CARD) if (folder / name).is_file()]
    return CheckpointIdentity(str(folder), tuple((name, st.st_size, st.st_mtime_ns) for name, st in stats))


def _has_optimizer(weights: Path) -> bool:
    import h5py
    try:
        with h5py.File(weights, "r") as f:
            return OPTIMIZER_GROUP in f
    except OSError as e:
        raise CheckpointError(f"{weights} is not a readable HDF5 file ({e})") from None


def _copy_without_optimizer(source: Path, target: Path) -> None:
    """Copies every group and attribute of a Keras weights file but the optimizer's; h5py copies each
    dataset's stored bytes, so every weight stays what it was, to the bit."""
    import h5py
    with h5py.File(source, "r") as old, h5py.File(target, "w") as new:
        for key, value in old.attrs.items():
            new.attrs[key] = value
        for name in old:
            if name != OPTIMIZER_GROUP:
                old.copy(old[name], new, name=name)


def make_lean(folder: str | os.PathLike) -> bool:
    """Rewrites a checkpoint saved with its optimizer in place as write_checkpoint writes one: config.json
    with an empty compile config (as Keras saves an uncompiled model), model.weights.h5 without the
    optimizer's group. Every weight is kept byte for byte; the card and README.md are not touched. Returns
    False, changing nothing, when the folder is lean already.

    Each file is replaced atomically, config.json first, so the folder is a complete checkpoint with the
    same weights at every moment (with an empty compile config Keras never reads the optimizer's group),
    and running again finishes a run that was interrupted between the two files.
    """
    folder = Path(folder)
    _check_files(folder)
    config, weights = _read_config(folder), folder / "model.weights.h5"
    compiled, fat = bool(config.get("compile_config")), _has_optimizer(weights)
    if not compiled and not fat:
        return False
    if compiled:
        # Keras writes config.json with json.dumps' defaults, so only the compile config's text changes.
        atomic.write_text(folder / "config.json", json.dumps({**config, "compile_config": {}}))
    if fat:
        with atomic.replacing(weights) as tmp:
            _copy_without_optimizer(weights, tmp)
    return True


def _checkpoints_in(paths) -> list[Path]:
    """The checkpoint folders that `paths` name: each one a checkpoint, or a folder holding some."""
    found = []
    for path in map(Path, paths):
        inside = [path] if is_checkpoint(path) else list_checkpoints(path)
        if not inside:
            raise CheckpointError(f"{path} is not a folder" if not path.is_dir() else
                                  f"{path} is not an explorer checkpoint (a folder with {CARD} and "
                                  f"{', '.join(MODEL_FILES)}) and holds none")
        found += [p for p in inside if p not in found]
    return found


def _mb(folder: Path) -> str:
    return f"{sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / 1e6:.2f} MB"


def resolve(ref: str | os.PathLike, cache_dir: str | None = None, max_hub_bytes: int | None = None) -> Path:
    """The checkpoint folder of a local path, `owner/name`, `owner/name@revision` or `hf://owner/name`
    (a Hub snapshot of the checkpoint's files, downloaded or from the cache; refused before any download
    when they exceed `max_hub_bytes`). Every failure is a CheckpointError."""
    path = Path(ref)
    if path.is_dir():
        return path
    text = str(ref)
    if text.startswith("hf://") or hub.looks_like_repo_id(text):
        try:
            folder = hub.download(text, cache_dir=cache_dir, max_bytes=max_hub_bytes)
        except hub.HubError as e:
            raise CheckpointError(str(e)) from None
        if not is_checkpoint(folder):
            raise CheckpointError(f"{text} is not an explorer checkpoint (it lacks {CARD} or the Keras "
                                  f"files {', '.join(MODEL_FILES)})")
        return folder
    if any(sep in text for sep in ("/", "\\")) or text.startswith("."):
        raise CheckpointError(f"{text} is not a folder")
    raise CheckpointError(f"{text!r} is neither a checkpoint folder nor a Hub id (owner/name[@revision])")


def load_checkpoint(ref: str | os.PathLike, cache_dir: str | None = None, max_hub_bytes: int | None = None):
    """(model, card) from a local folder, `owner/name`, `owner/name@revision` or `hf://owner/name`."""
    return load_folder(resolve(ref, cache_dir, max_hub_bytes))


def push(folder: str | os.PathLike, repo_id: str, private: bool = False, token: str | None = None) -> str:
    """Uploads a checkpoint folder to the Hub model repo `repo_id`; returns the commit URL. A fine-tuned
    checkpoint's held-out images (held_out.npz: the user's own pictures) stay behind: a push publishes the
    model, not the data it was judged on."""
    folder = Path(folder)
    if not is_checkpoint(folder):
        raise CheckpointError(f"{folder} is not an explorer checkpoint folder")
    card = read_card(folder)
    try:
        return hub.upload(folder, repo_id, private=private, token=token,
                          commit_message=f"Upload {card.name or folder.name}", leave_out=[HELD_OUT])
    except hub.HubError as e:
        raise CheckpointError(str(e)) from None


def main(argv=None) -> int:
    """`python -m explorer.checkpoints push|pull|lean`: checkpoints to and from the Hub; older folders
    rewritten without their optimizer state."""
    p = argparse.ArgumentParser(prog="python -m explorer.checkpoints", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    push_p = sub.add_parser("push", help="upload a checkpoint folder to a Hub model repo")
    push_p.add_argument("checkpoint")
    push_p.add_argument("repo_id")
    push_p.add_argument("--private", action="store_true")
    pull_p = sub.add_parser("pull", help="download a checkpoint into the HF cache and print its folder")
    pull_p.add_argument("ref", help="owner/name[@revision]")
    lean_p = sub.add_parser("lean", help="rewrite checkpoint folders in place without their optimizer state "
                                         "(weights unchanged to the bit)")
    lean_p.add_argument("folders", nargs="+", metavar="folder",
                        help="a checkpoint folder, or a folder holding checkpoints at any depth")
    args = p.parse_args(argv)
    try:
        if args.command == "push":
            print(push(args.checkpoint, args.repo_id, private=args.private))
        elif args.command == "lean":
            for folder in _checkpoints_in(args.folders):  # every name checked before any folder changes
                before = _mb(folder)
                print(f"{folder}: {before} -> {_mb(folder)}" if make_lean(folder) else f"{folder}: lean already")
        else:
            print(resolve("hf://" + args.ref.removeprefix("hf://")))  # always the Hub, never a local path
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
