"""The checkpoint card (explorer.json) as typed sections (the Hub's model card, README.md, is written from it by
explorer.checkpoints.model_card).

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
