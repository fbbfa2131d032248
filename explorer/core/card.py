"""The checkpoint card (explorer.json) as typed sections, and the Hub model card (README.md) written from it.

    Card        what the model is (variant, preset, config, class names) and where it came from
      Data      the data it was trained and tested on
      Metrics   how it did: at its last (or kept) epoch, on the test set, on the check set
      Epoch     one row of the training history
      Training  how it was trained: the recipe, wall time, device, stages of a continued run
      Lineage   the checkpoint it was fine-tuned or continued from (`base`)
      Source    a model converted from the keras.io example (explorer.convert)
      Run       a fine-tune run of the app (shared mode: its id, owner and end time)

A card is built with keywords, section by section, or read with `Card.from_json`; `to_json()` gives back
exactly the JSON a card was read from, whatever version wrote it. A field a card lacks reads as its default
(None, an empty list or section) and is not written back; keys no section knows are kept as they came
(`extra`). The model's config and the training recipe stay the JSON of their own types (ViTConfig.to_dict,
TrainConfig as a dict): old cards hold old versions of both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

CARD = "explorer.json"


def _field(default=None, *, always: bool = False, section: type | None = None, factory=None):
    """A JSON field. `always`: a card built in code writes it even when None or empty (as the writers
    always have); `section`: its JSON (an object, or a list of objects) is read into that class."""
    meta = {"always": always, "section": section}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _section(cls: type, *, always: bool = False):
    return _field(always=always, section=cls, factory=cls)


def _optional(cls: type, *, always: bool = False):
    return _field(always=always, section=cls)


def _items(cls: type | None = None, *, always: bool = False):
    return _field(always=always, section=cls, factory=list)


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _read(f: dataclasses.Field, value):
    cls = f.metadata.get("section")
    if cls is None:
        return value
    if isinstance(value, dict):
        return cls.from_json(value)
    if isinstance(value, list):
        return [cls.from_json(v) if isinstance(v, dict) else v for v in value]
    return value  # null, or something an old card holds there: kept as it is


def _write(value):
    if isinstance(value, Section):
        return value.to_json()
    if isinstance(value, list):
        return [_write(v) for v in value]
    return value


@dataclass(kw_only=True)
class Section:
    """A JSON object with typed fields; what it does not know is kept in `extra`."""

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    # The keys of the JSON it was read from, in order (None: built in code); what is written back.
    _keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def _json_fields(cls) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(cls) if f.name not in ("extra", "_keys")}

    @classmethod
    def from_json(cls, data: dict):
        known = cls._json_fields()
        return cls(**{k: _read(known[k], v) for k, v in data.items() if k in known},
                   extra={k: v for k, v in data.items() if k not in known}, _keys=tuple(data))

    def _writes(self, f: dataclasses.Field) -> bool:
        if getattr(self, f.name) != _default(f):
            return True
        return f.name in self._keys if self._keys is not None else f.metadata.get("always", False)

    def to_json(self) -> dict:
        known = self._json_fields()
        out = {}
        for key in dict.fromkeys([*(self._keys or ()), *known, *self.extra]):
            if key in known:
                if self._writes(known[key]):
                    out[key] = _write(getattr(self, key))
            elif key in self.extra:
                out[key] = self.extra[key]
        return out


@dataclass(kw_only=True)
class Data(Section):
    """The data a model was trained and tested on: its name, where it came from, how many images each part held."""

    name: str | None = None
    num_classes: int | None = None
    source: str | None = None
    train_images: int | None = None
    validation_images: int | None = None
    test_images: int | None = None
    note: str | None = _field(always=True)


@dataclass(kw_only=True)
class Metrics(Section):
    """Top-1/top-5 and loss at the epoch kept (training and validation), on the test set, on the first
    test images (the check set anyone can verify quickly), with mirrored images averaged in, and on the
    very training images (the small-data study)."""

    top1: float | None = None
    top5: float | None = None
    loss: float | None = None
    val_top1: float | None = None
    val_top5: float | None = None
    val_loss: float | None = None
    test_top1: float | None = None
    test_top5: float | None = None
    test_per_class: list[float | None] | None = None
    test_count: int | None = None
    check_set: str | None = None
    check_top1: float | None = None
    check_top5: float | None = None
    test_top1_flip: float | None = None
    test_top5_flip: float | None = None
    train_top1: float | None = None


@dataclass(kw_only=True)
class Epoch(Section):
    """One epoch of training; `tau` holds each LSA layer's temperatures, `stage` the stage of a continued run."""

    epoch: int | None = None
    time_s: float | None = None
    learning_rate: float | None = None
    loss: float | None = None
    top1: float | None = None
    top5: float | None = None
    val_loss: float | None = None
    val_top1: float | None = None
    val_top5: float | None = None
    tau: list[list[float]] | None = None
    stage: int | None = None


@dataclass(kw_only=True)
class Start(Section):
    """The head a fine-tune started from, and how it scored before any step."""

    head: str | None = None
    val_top1: float | None = None
    val_top5: float | None = None
    # Why "auto" chose this head (a fine-tune's cross-validated decision).
    why: str | None = None


@dataclass(kw_only=True)
class Timing(Section):
    """Where a run's time went: the first step (tracing, compiling), all steps, validation, preparation."""

    first_step_s: float | None = None
    steps_s: float | None = None
    validation_s: float | None = None
    compiled: bool | None = None
    prepare_s: float | None = None


@dataclass(kw_only=True)
class Stage(Section):
    """One stage of a continued run; its recipe as that stage's TrainConfig wrote it."""

    epochs: int | None = None
    steps: int | None = None
    wall_time_s: float | None = None
    images_per_second: float | None = None
    device: str | None = None
    recipe: dict[str, Any] | None = None


@dataclass(kw_only=True)
class Window(Section):
    """One window of a run trained in short GPU windows (tools/window.py): where, when, how far, how fast."""

    window: int | None = None
    device: str | None = None
    started: str | None = None
    epochs_before: int | None = None
    epochs_after: int | None = None
    images_per_second: float | None = None
    wall_s: float | None = None


@dataclass(kw_only=True)
class Training(Section):
    """How the model was trained; `recipe` is the TrainConfig as a dict (the first stage's, when continued)."""

    epochs: int | None = None
    planned_epochs: int | None = None
    steps: int | None = None
    wall_time_s: float | None = None
    images_per_second: float | None = None
    train_images: int | None = None
    batch_size: int | None = None
    start: Start | None = _optional(Start)
    kept_epoch: int | None = None
    # A fine-tune's end: which model it kept (a fine-tuned epoch, the probe, the base's head or rows), and why.
    kept_model: str | None = None
    decision: str | None = None
    decision_detail: str | None = None
    # Epochs that ran; `epochs` are the kept model's (fewer when an earlier epoch or the start was kept).
    epochs_trained: int | None = None
    validation_images: int | None = None
    device: str | None = None
    devices: int | None = None
    recipe: dict[str, Any] = _field(factory=dict)
    stages: list[Stage] = _items(Stage)
    timing: Timing | None = _optional(Timing)
    windows: list[Window] = _items(Window)


@dataclass(kw_only=True)
class Lineage(Section):
    """The checkpoint this one was fine-tuned from, or continued from (`continued`, after its `epochs`)."""

    name: str | None = _field(always=True)
    source: str | None = _field(always=True)
    continued: bool | None = None
    epochs: int | None = None


@dataclass(kw_only=True)
class Source(Section):
    """Where a converted model came from, what was mapped and dropped, and where its class names came from."""

    kind: str | None = _field(always=True)
    source: str | None = _field(always=True)
    revision: str | None = _field(always=True)
    requested_revision: str | None = None
    format: str | None = _field(always=True)
    mapped: list[str] = _items(always=True)
    dropped: list[str] = _items(always=True)
    tau: list[float] = _items(always=True)
    class_names_assumed: bool | None = _field(always=True)
    class_names_from: str | None = _field(always=True)


@dataclass(kw_only=True)
class Run(Section):
    """The app's fine-tune run a checkpoint belongs to (what a shared Space prunes by)."""

    id: str | None = _field(always=True)
    owner: str | None = _field(always=True)
    ended: float | None = _field(always=True)


@dataclass(kw_only=True)
class Card(Section):
    """A checkpoint's card. `config` is the model's ViTConfig.to_dict(); `versions` the libraries that wrote
    it. explorer.checkpoints.store.write_checkpoint fills format, name, parameters, versions and created."""

    variant: str | None = _field(always=True)
    preset: str | None = _field(always=True)
    config: dict[str, Any] | None = _field(always=True)
    dataset: Data = _section(Data, always=True)
    class_names: list[str] = _items(always=True)
    metrics: Metrics = _section(Metrics, always=True)
    history: list[Epoch] = _items(Epoch, always=True)
    training: Training = _section(Training, always=True)
    base: Lineage | None = _optional(Lineage, always=True)
    source: Source | None = _optional(Source)
    format: str | None = None
    format_version: int | None = None
    name: str | None = None
    parameters: int | None = None
    versions: dict[str, str] = _field(factory=dict)
    created: str | None = None
    run: Run | None = _optional(Run)


# ---- the Hub's model card (README.md) -----------------------------------------------------------------

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
    if recipe.get("autoaugment"):
        parts.append("AutoAugment's CIFAR-10 policy")
    if recipe.get("random_erasing"):
        parts.append(f"random erasing on {100 * recipe['random_erasing']:.0f} % of images")
    if (recipe.get("repeats") or 1) > 1:
        parts.append(f"each image {recipe['repeats']} times an epoch")
    return ", ".join(parts) or "none"


def _front_matter(card: Card) -> list[str]:
    name = card.dataset.name
    lines = ["---", "library_name: keras", "license: apache-2.0", "pipeline_tag: image-classification",
             "tags:", "- vision-transformer", "- shifted-patch-tokenization",
             "- locality-self-attention", "- keras", f"datasets:\n- {'unknown' if name is None else name}"]
    if card.metrics.test_top1 is not None:
        lines += ["model-index:", f"- name: {card.name}", "  results:",
                  "  - task:", "      type: image-classification",
                  "    dataset:", f"      name: {name}", f"      type: {name}",
                  "    metrics:", "    - type: accuracy", f"      value: {card.metrics.test_top1:.4f}",
                  "      name: test top-1"]
    return lines + ["---"]


_SCORES = (("test_top1", "test top-1"), ("test_top5", "test top-5"),
           ("test_top1_flip", "test top-1, image + mirror averaged"), ("val_top1", "validation top-1"))
_RUN = (("epochs", "epochs", "{}"), ("epochs_trained", "epochs trained", "{}"),
        ("wall_time_s", "training wall time (s)", "{:.0f}"),
        ("images_per_second", "training images/s", "{:.0f}"), ("device", "device", "{}"))


def _summary(card: Card) -> list[str]:
    """The title, what the model is, and its table: data, scores, training run, size, recipe."""
    dataset, training = card.dataset, card.training
    lines = ["", f"# {card.name}", "",
             f"A **{card.variant}** Vision Transformer (preset `{card.preset}`) from the "
             "SPT/LSA ViT Explorer: Shifted Patch Tokenization and Locality Self-Attention "
             "([Lee, Lee & Song 2021](https://arxiv.org/abs/2112.13492)).", "",
             "| | |", "|---|---|",
             f"| dataset | {dataset.name} ({dataset.num_classes} classes) |"]
    if dataset.note:
        lines.append(f"| data note | {dataset.note} |")
    lines += [f"| {label} | {100 * getattr(card.metrics, key):.2f} % |" for key, label in _SCORES
              if getattr(card.metrics, key) is not None]
    lines += [f"| {label} | {fmt.format(getattr(training, key))} |" for key, label, fmt in _RUN
              if getattr(training, key) is not None]
    lines.append(f"| parameters | {card.parameters} |")
    recipe = training.recipe or {}
    if recipe.get("name"):  # a named recipe of explorer.train (--recipe)
        lines.append(f"| training recipe | `{recipe['name']}`: augmentation {describe_augmentation(recipe)} |")
    return lines


def _fine_tuning(card: Card) -> list[str]:
    """How a fine-tuned model was trained from its base (nothing for a continued or a new model)."""
    base, training = card.base, card.training
    if base is None or base.continued:
        return []
    r, start = training.recipe or {}, training.start or Start()
    at_start = (f" (validation top-1 {100 * start.val_top1:.1f} % before any step)"
                if isinstance(start.val_top1, (int, float)) else "")
    kept = training.kept_epoch
    batch = training.batch_size if training.batch_size is not None else r.get("batch_size")
    kept_text = (f"; the epoch kept, by validation top-1, was {kept}" + (" (the starting head)" if kept == 0 else "")
                 if r.get("keep_best") and kept is not None else "")
    if training.kept_model:
        kept_text = (f". {training.decision}" + (f" ({training.decision_detail})" if training.decision_detail else "")
                     ).rstrip(".")
    return ["", "## Fine-tuning", "",
            f"Fine-tuned from `{base.name}`. The classifier head started from "
            f"{'the base' if start.head is None else start.head}{at_start}; then "
            f"{'the head alone' if r.get('freeze_backbone') else 'the whole model'} trained for "
            f"{training.planned_epochs} epochs of batch {batch} "
            f"at a peak learning rate of {r.get('learning_rate')} (AdamW, weight decay {r.get('weight_decay')}, "
            f"warmup + cosine), on {training.device} at {training.images_per_second} images/s" + kept_text + "."]


def _stage_line(i: int, stage: Stage) -> str:
    r = stage.recipe or {}
    wall = stage.wall_time_s or 0
    took = f"{wall / 60:.0f} min" if wall >= 60 else f"{wall:.0f} s"
    plural = "" if stage.epochs == 1 else "s"
    return (f"- stage {i}: {stage.epochs} epoch{plural}, "
            f"peak learning rate {r.get('learning_rate')}, "
            f"warmup {100 * (r.get('warmup_fraction') or 0):.0f} %, "
            f"weight decay {r.get('weight_decay')}, batch {r.get('batch_size')}, "
            f"label smoothing {r.get('label_smoothing')}, augmentation {describe_augmentation(r)}, "
            f"seed {r.get('seed')}; {took} at {stage.images_per_second} images/s")


def _stages(card: Card) -> list[str]:
    """The stages of a run continued from its own checkpoints (nothing for a run of one stage)."""
    stages = card.training.stages or []
    if len(stages) <= 1:
        return []
    return ["", "## Training stages", "",
            "Each stage continued the previous one's weights on the same data and held-out split, "
            "with a fresh optimizer and its own warmup + cosine schedule:", "",
            *(_stage_line(i, stage) for i, stage in enumerate(stages, 1))]


def _windows(card: Card) -> list[str]:
    """The windows of a run trained in short GPU windows (nothing for a run of one process)."""
    windows = card.training.windows or []
    if not windows:
        return []
    devices = list(dict.fromkeys(w.device for w in windows if w.device))
    wall = sum(w.wall_s or 0 for w in windows)
    lines = ["", "## Training windows", "",
             f"Trained in {len(windows)} windows of a lent GPU ({', '.join(devices)}), {wall / 60:.1f} min in all, "
             "each resuming the previous one's backup exactly (`tools/window.py`):", ""]
    for w in windows:
        speed = f"{w.images_per_second:,.0f}" if w.images_per_second is not None else "?"
        lines.append(f"- window {w.window} ({(w.started or '')[:10]}, {w.device}): epochs {w.epochs_before} → "
                     f"{w.epochs_after} in {w.wall_s or 0:.0f} s at {speed} images/s (its first epoch compiling)")
    return lines


def _source(card: Card) -> list[str]:
    """Where a converted model came from and what was mapped (nothing for a model trained here)."""
    source = card.source
    if source is None or not source.source:
        return []
    revision = f" at revision `{source.revision}`" if source.revision else ""
    names = ("assumed: " if source.class_names_assumed else "from ") + str(source.class_names_from)
    return ["", "## Source", "",
            f"Converted by `python -m explorer.convert` from `{source.source}`{revision} "
            f"({source.format}), a model of the keras.io example "
            "[Train a Vision Transformer on small datasets](https://keras.io/examples/vision/vit_small_ds/). "
            f"Class names {names}. What was mapped:", "",
            *(f"- {item}" for item in source.mapped or []),
            *(f"- dropped: {item}" for item in source.dropped or [])]


def _number(value, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) else "–"


def _history(card: Card) -> list[str]:
    """One table row per epoch: loss, top-1, validation top-1, learning rate and tau per layer."""
    if not card.history:
        return []
    lines = ["", "## Training history", "",
             "| epoch | loss | top-1 | val top-1 | learning rate | tau per layer |", "|---|---|---|---|---|---|"]
    for e in card.history:
        tau = "; ".join(", ".join(f"{v:.3f}" for v in layer) for layer in e.tau or []) or "–"
        cells = " | ".join(_number(v, ".4f") for v in (e.loss, e.top1, e.val_top1))
        lines.append(f"| {e.epoch} | {cells} | {_number(e.learning_rate, '.2e')} | {tau} |")
    return lines


def _how_to_use(card: Card) -> list[str]:
    name = card.name or "this-model"
    return ["", "## How to use", "",
            "Plain Keras loads this folder or its Hub repo once the SPT/LSA ViT Explorer's `explorer` "
            "package is importable (run from its repository, with its requirements.txt installed): "
            "`import explorer` registers the custom layers and the learning-rate schedule. The model "
            "takes raw 0-255 RGB pixels, "
            f"{(card.config or {}).get('image_size', 32)} px square, and returns logits over "
            f"`class_names` in `{CARD}`:", "",
            "```python", "import explorer  # registers the layers and the schedule", "import keras", "",
            f'model = keras.saving.load_model("checkpoints/{name}")        # a local folder',
            f'model = keras.saving.load_model("hf://your-name/{name}")   # or its Hub repo',
            "logits = model.predict(images)  # uint8 or float, (N, H, W, 3), values 0-255", "```", "",
            "In the explorer app, type the Hub id into a model slot: `your-name/" + name + "`, or "
            "`your-name/" + name + "@<revision>` for a branch, tag or commit (`hf://your-name/" + name +
            "` works too). `explorer.checkpoints.store.load_checkpoint(ref)` takes the same references and "
            "returns the model with this card; it loads with `safe_mode=True` and refuses layers that "
            "are not the explorer's.", ""]


def model_card(card: Card) -> str:
    """README.md for the Hub: front matter, then what the model is and how it did."""
    sections = (_front_matter, _summary, _fine_tuning, _stages, _windows, _source, _history, _how_to_use)
    return "\n".join(line for section in sections for line in section(card))
