"""The checkpoint format: a folder with the Keras unzipped save, a card and a model card.

    <name>/
      config.json, metadata.json, model.weights.h5   Keras 3 unzipped save (keras.saving, zipped=False)
      explorer.json                                  the card: variant, config, dataset, metrics, history
      README.md                                      Hugging Face model card with front matter

The same layout is used locally and on the Hub, so a snapshot of a Hub repo is loaded like a folder
(`resolve` is the one place a reference becomes a folder; explorer.hub only moves folders).
Folders are written under a temporary name and renamed into place: a reader never sees half of one.

    python -m explorer.checkpoints push checkpoints/cifar10-spt_lsa owner/vit-spt-lsa-cifar10
    python -m explorer.checkpoints pull owner/vit-spt-lsa-cifar10@main
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata as _metadata
import json
import os
import re
import shutil
import sys
import uuid
from pathlib import Path

from explorer import hub

CARD = "explorer.json"
MODEL_FILES = ("config.json", "metadata.json", "model.weights.h5")
FORMAT = "explorer-vit-checkpoint"
FORMAT_VERSION = 1
_TMP_PREFIX = ".tmp-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")

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
    import keras
    backend = keras.backend.backend()
    out = {"keras": keras.__version__, "backend": backend}
    packages = {"tensorflow": ["tensorflow", "tensorflow-cpu"], "jax": ["jax", "jaxlib"], "torch": ["torch"]}
    for package in packages.get(backend, []):
        try:
            out[package.replace("-cpu", "")] = _metadata.version(package)
        except _metadata.PackageNotFoundError:
            continue
    return out


def validate_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise CheckpointError(f"checkpoint name {name!r} must be 1-96 letters, digits, '.', '_' or '-', "
                              f"starting with a letter or digit")
    return name


def unique_dir(parent: str | os.PathLike, name: str) -> Path:
    """`parent/name`, or `parent/name-2`, `-3`, ... : a new checkpoint never replaces an old one."""
    parent, name = Path(parent), validate_name(name)
    candidate, n = parent / name, 1
    while candidate.exists():
        n += 1
        candidate = parent / f"{name}-{n}"
    return candidate


def _fsync_tree(folder: Path) -> None:
    for path in folder.iterdir():
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def model_card(card: dict) -> str:
    """README.md for the Hub: front matter, then what the model is and how it did."""
    metrics = card.get("metrics", {})
    dataset = card.get("dataset", {})
    training = card.get("training", {})
    lines = ["---", "library_name: keras", "license: apache-2.0", "pipeline_tag: image-classification",
             "tags:", "- vision-transformer", "- shifted-patch-tokenization",
             "- locality-self-attention", "- keras", f"datasets:\n- {dataset.get('name', 'unknown')}"]
    if "test_top1" in metrics:
        lines += ["model-index:", f"- name: {card.get('name')}", "  results:",
                  "  - task:", "      type: image-classification",
                  "    dataset:", f"      name: {dataset.get('name')}", f"      type: {dataset.get('name')}",
                  "    metrics:", "    - type: accuracy", f"      value: {metrics['test_top1']:.4f}",
                  "      name: test top-1"]
    lines += ["---", "", f"# {card.get('name')}", "",
              f"A **{card.get('variant')}** Vision Transformer (preset `{card.get('preset')}`) from the "
              "SPT/LSA ViT Explorer: Shifted Patch Tokenization and Locality Self-Attention "
              "([Lee, Lee & Song 2021](https://arxiv.org/abs/2112.13492)).", "",
              "| | |", "|---|---|",
              f"| dataset | {dataset.get('name')} ({dataset.get('num_classes')} classes) |"]
    if dataset.get("note"):
        lines.append(f"| data note | {dataset['note']} |")
    for key, label in (("test_top1", "test top-1"), ("test_top5", "test top-5"),
                       ("test_top1_flip", "test top-1, image + mirror averaged"),
                       ("val_top1", "validation top-1")):
        if key in metrics:
            lines.append(f"| {label} | {100 * metrics[key]:.2f} % |")
    for key, label, fmt in (("epochs", "epochs", "{}"), ("wall_time_s", "training wall time (s)", "{:.0f}"),
                            ("images_per_second", "training images/s", "{:.0f}"),
                            ("device", "device", "{}")):
        if training.get(key) is not None:
            lines.append(f"| {label} | {fmt.format(training[key])} |")
    lines.append(f"| parameters | {card.get('parameters')} |")
    recipe = training.get("recipe") or {}
    if recipe.get("name"):  # a named recipe of explorer.train (--recipe)
        lines.append(f"| training recipe | `{recipe['name']}`: augmentation {describe_augmentation(recipe)} |")
    base, start = card.get("base") or {}, training.get("start") or {}
    if base and not base.get("continued"):
        r = training.get("recipe") or {}
        at_start = (f" (validation top-1 {100 * start['val_top1']:.1f} % before any step)"
                    if isinstance(start.get("val_top1"), (int, float)) else "")
        kept = training.get("kept_epoch")
        lines += ["", "## Fine-tuning", "",
                  f"Fine-tuned from `{base.get('name')}`. The classifier head started from "
                  f"{start.get('head', 'the base')}{at_start}; then "
                  f"{'the head alone' if r.get('freeze_backbone') else 'the whole model'} trained for "
                  f"{training.get('planned_epochs')} epochs of batch {training.get('batch_size', r.get('batch_size'))} "
                  f"at a peak learning rate of {r.get('learning_rate')} (AdamW, weight decay {r.get('weight_decay')}, "
                  f"warmup + cosine), on {training.get('device')} at {training.get('images_per_second')} images/s"
                  + (f"; the epoch kept, by validation top-1, was {kept}"
                     + (" (the starting head)" if kept == 0 else "")
                     if r.get("keep_best") and kept is not None else "") + "."]
    stages = training.get("stages") or []
    if len(stages) > 1:
        lines += ["", "## Training stages", "",
                  "Each stage continued the previous one's weights on the same data and held-out split, "
                  "with a fresh optimizer and its own warmup + cosine schedule:", ""]
        for i, stage in enumerate(stages, 1):
            r = stage.get("recipe") or {}
            wall = stage.get("wall_time_s") or 0
            took = f"{wall / 60:.0f} min" if wall >= 60 else f"{wall:.0f} s"
            plural = "" if stage.get("epochs") == 1 else "s"
            augment = describe_augmentation(r)
            lines.append(f"- stage {i}: {stage.get('epochs')} epoch{plural}, "
                         f"peak learning rate {r.get('learning_rate')}, "
                         f"warmup {100 * (r.get('warmup_fraction') or 0):.0f} %, "
                         f"weight decay {r.get('weight_decay')}, batch {r.get('batch_size')}, "
                         f"label smoothing {r.get('label_smoothing')}, augmentation {augment}, "
                         f"seed {r.get('seed')}; {took} at {stage.get('images_per_second')} images/s")
    source = card.get("source") or {}
    if source.get("source"):  # a model converted by explorer.convert
        revision = f" at revision `{source['revision']}`" if source.get("revision") else ""
        names = ("assumed: " if source.get("class_names_assumed") else "from ") + str(source.get("class_names_from"))
        lines += ["", "## Source", "",
                  f"Converted by `python -m explorer.convert` from `{source['source']}`{revision} "
                  f"({source.get('format')}), a model of the keras.io example "
                  "[Train a Vision Transformer on small datasets](https://keras.io/examples/vision/vit_small_ds/). "
                  f"Class names {names}. What was mapped:", ""]
        lines += [f"- {item}" for item in source.get("mapped") or []]
        lines += [f"- dropped: {item}" for item in source.get("dropped") or []]
    history = card.get("history") or []
    if history:
        lines += ["", "## Training history", "",
                  "| epoch | loss | top-1 | val top-1 | learning rate | tau per layer |", "|---|---|---|---|---|---|"]
        for e in history:
            tau = "; ".join(", ".join(f"{v:.3f}" for v in layer) for layer in e.get("tau") or []) or "–"
            cells = [f"{e[k]:.4f}" if isinstance(e.get(k), (int, float)) else "–"
                     for k in ("loss", "top1", "val_top1")]
            lr = f"{e['learning_rate']:.2e}" if isinstance(e.get("learning_rate"), (int, float)) else "–"
            lines.append(f"| {e.get('epoch')} | {' | '.join(cells)} | {lr} | {tau} |")
    name = card.get("name") or "this-model"
    lines += ["", "## How to use", "",
              "Plain Keras loads this folder or its Hub repo once the SPT/LSA ViT Explorer's `explorer` "
              "package is importable (run from its repository, with its requirements.txt installed): "
              "`import explorer` registers the custom layers and the learning-rate schedule. The model "
              "takes raw 0-255 RGB pixels, "
              f"{(card.get('config') or {}).get('image_size', 32)} px square, and returns logits over "
              f"`class_names` in `{CARD}`:", "",
              "```python", "import explorer  # registers the layers and the schedule", "import keras", "",
              f'model = keras.saving.load_model("checkpoints/{name}")        # a local folder',
              f'model = keras.saving.load_model("hf://your-name/{name}")   # or its Hub repo',
              "logits = model.predict(images)  # uint8 or float, (N, H, W, 3), values 0-255", "```", "",
              "In the explorer app, type the Hub id into a model slot: `your-name/" + name + "`, or "
              "`your-name/" + name + "@<revision>` for a branch, tag or commit (`hf://your-name/" + name +
              "` works too). `explorer.checkpoints.load_checkpoint(ref)` takes the same references and "
              "returns the model with this card; it loads with `safe_mode=True` and refuses layers that "
              "are not the explorer's.", ""]
    return "\n".join(lines)


def write_checkpoint(model, folder: str | os.PathLike, card: dict) -> Path:
    """Saves `model` and its card as a new checkpoint folder, atomically; returns the final path.

    The folder must not exist yet. Everything is written to a hidden sibling first and renamed into
    place at the end, so an interrupted or failing write (full disk, killed process) leaves no
    checkpoint, and never a partial one.
    """
    import keras

    folder = Path(folder)
    validate_name(folder.name)
    if folder.exists():
        raise CheckpointError(f"{folder} already exists; checkpoints are never overwritten")
    folder.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(folder.parent)
    tmp = folder.parent / f"{_TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}-{folder.name}"
    card = {**card, "format": FORMAT, "format_version": FORMAT_VERSION, "name": folder.name,
            "parameters": int(model.count_params()), "versions": versions(),
            "created": card.get("created") or _now()}
    try:
        keras.saving.save_model(model, str(tmp), zipped=False)
        (tmp / CARD).write_text(json.dumps(card, indent=2, sort_keys=False))
        (tmp / "README.md").write_text(model_card(card))
        _fsync_tree(tmp)
        os.rename(tmp, folder)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"could not write checkpoint {folder.name}: {e.strerror or e}; nothing was "
                              f"saved") from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(parent: str | os.PathLike) -> list[Path]:
    """Removes temporary folders left by writers that died (killed mid-write); returns them."""
    removed = []
    parent = Path(parent)
    if not parent.is_dir():
        return removed
    for path in parent.glob(f"{_TMP_PREFIX}*"):
        pid = path.name[len(_TMP_PREFIX):].split("-", 1)[0]
        if path.is_dir() and pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def update_card(folder: str | os.PathLike, **changes) -> dict:
    """Merges `changes` into a checkpoint's card (and model card), replacing each file atomically."""
    folder = Path(folder)
    card = read_card(folder)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(card.get(key), dict):
            card[key] = {**card[key], **value}
        else:
            card[key] = value
    for name, text in ((CARD, json.dumps(card, indent=2)), ("README.md", model_card(card))):
        tmp = folder / f"{_TMP_PREFIX}{name}"
        tmp.write_text(text)
        os.replace(tmp, folder / name)
    return card


def read_card(folder: str | os.PathLike) -> dict:
    folder = Path(folder)
    path = folder / CARD
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder")
    if not path.is_file():
        raise CheckpointError(f"{folder} is not an explorer checkpoint: it has no {CARD}")
    try:
        card = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(card, dict) or card.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an explorer checkpoint card (format is not {FORMAT!r})")
    return card


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


def _check_architecture(folder: Path) -> None:
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e})") from None
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
    import keras

    import explorer.layers  # noqa: F401  (registers the custom layers)

    folder = Path(folder)
    card = read_card(folder)
    missing = [f for f in MODEL_FILES if not (folder / f).is_file()]
    if missing:
        raise CheckpointError(f"{folder} is missing {', '.join(missing)}")
    _check_architecture(folder)
    try:
        model = keras.saving.load_model(str(folder), compile=False, safe_mode=True)
    except Exception as e:
        raise CheckpointError(f"cannot load the model in {folder}: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from None
    return model, card


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
    """Uploads a checkpoint folder to the Hub model repo `repo_id`; returns the commit URL."""
    folder = Path(folder)
    if not is_checkpoint(folder):
        raise CheckpointError(f"{folder} is not an explorer checkpoint folder")
    card = read_card(folder)
    try:
        return hub.upload(folder, repo_id, private=private, token=token,
                          commit_message=f"Upload {card.get('name') or folder.name}")
    except hub.HubError as e:
        raise CheckpointError(str(e)) from None


def describe_augmentation(recipe: dict) -> str:
    """A training recipe's augmentation in words, e.g. "crop + flip, CutMix 1.0 / mixup 0.2 on 50 % of batches"."""
    parts = ["crop + flip"] if recipe.get("augment") else []
    mixes = [f"{name} {recipe[key]:g}" for name, key in (("CutMix", "cutmix_alpha"), ("mixup", "mixup_alpha"))
             if recipe.get(key)]
    if mixes:
        prob = recipe.get("mix_prob", 1.0)
        parts.append(" / ".join(mixes) + ("" if prob >= 1 else f" on {100 * prob:.0f} % of batches"))
    if recipe.get("randaugment"):
        parts.append(f"RandAugment {recipe['randaugment']:g}")
    if recipe.get("random_erasing"):
        parts.append(f"random erasing on {100 * recipe['random_erasing']:.0f} % of images")
    if (recipe.get("repeats") or 1) > 1:
        parts.append(f"each image {recipe['repeats']} times an epoch")
    return ", ".join(parts) or "none"



def main(argv=None) -> int:
    """`python -m explorer.checkpoints push|pull`: checkpoints to and from the Hub."""
    p = argparse.ArgumentParser(prog="python -m explorer.checkpoints", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    push_p = sub.add_parser("push", help="upload a checkpoint folder to a Hub model repo")
    push_p.add_argument("checkpoint")
    push_p.add_argument("repo_id")
    push_p.add_argument("--private", action="store_true")
    pull_p = sub.add_parser("pull", help="download a checkpoint into the HF cache and print its folder")
    pull_p.add_argument("ref", help="owner/name[@revision]")
    args = p.parse_args(argv)
    try:
        if args.command == "push":
            print(push(args.checkpoint, args.repo_id, private=args.private))
        else:
            print(resolve("hf://" + args.ref.removeprefix("hf://")))  # always the Hub, never a local path
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
