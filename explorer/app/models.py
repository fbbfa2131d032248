"""The models the app holds: a checkpoint loaded once per reference (a folder or a Hub id) with its compiled
probe, the most recently used kept in memory. The UI, the analyses and the benchmarks take a LoadedModel."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from explorer import convert
from explorer.checkpoints import catalog
from explorer.checkpoints.store import (
    CheckpointError,
    CheckpointIdentity,
    checkpoint_identity,
    hub,
    list_checkpoints,
    load_folder,
    read_card,
    resolve,
)
from explorer.core.card import Card, Source
from explorer.finetune.plan import Base
from explorer.model.config import ViTConfig
from explorer.model.probe import Probe, WhatIfProbe


@dataclass
class LoadedModel:
    """A checkpoint in memory with its compiled probe."""

    ref: str
    model: object
    card: Card
    config: ViTConfig
    probe: Probe
    folder: Path  # the checkpoint folder it was loaded from (a Hub id's: in the cache)
    # What names this model in a cache (never id(), which a model loaded after this one is dropped may get):
    # the store's key of its reference and its checkpoint's files as they were when it was loaded.
    identity: tuple[str, CheckpointIdentity]
    lock: threading.Lock = field(default_factory=threading.Lock)
    _what_if: WhatIfProbe | None = field(default=None, repr=False)

    def what_if_probe(self) -> WhatIfProbe:
        """The model's what-if probe, built on first use and kept (call it holding `lock`)."""
        if self._what_if is None:
            self._what_if = WhatIfProbe(self.probe)
        return self._what_if

    @property
    def name(self) -> str:
        return self.card.name or Path(self.ref).name

    @property
    def class_names(self) -> list[str]:
        names = self.card.class_names or []
        count = self.model.output_shape[-1]
        return list(names) if len(names) == count else [f"class {i}" for i in range(count)]

    @property
    def label(self) -> str:
        """The model's one name on the page: the slots' label for it ("paper scale · ViT · 45,000 images",
        "fine-tuned · <run>"), or, for one the slots show by its reference (a Hub id, any other checkpoint), that
        reference: a folder given by its path by the folder's name alone (no server path on the page)."""
        return self.listed_as or (Path(self.ref).name if os.path.isabs(self.ref) else self.ref)

    @property
    def listed_as(self) -> str | None:
        """The slots' label for the model, or None for one they list by its reference (any other checkpoint)."""
        listed = catalog.label(self.ref, self.card)
        return listed if listed != self.ref else None

    @property
    def converted_from(self) -> dict | None:
        """Where a model converted from the keras.io example came from (its card's `source`), else None."""
        source = self.card.source
        return source.to_json() if isinstance(source, Source) and source.kind == convert.KIND else None

    def summary(self) -> dict:
        metrics = self.card.metrics
        return {"name": self.name, "variant": self.config.variant, "preset": self.card.preset,
                "dataset": self.card.dataset.name,
                "classes": self.model.output_shape[-1], "parameters": int(self.model.count_params()),
                "test_top1": metrics.test_top1, "test_top5": metrics.test_top5,
                "epochs": self.card.training.epochs, "ref": self.ref,
                "tau_mode": self.config.tau_mode if self.config.use_lsa else None,
                "converted_from": self.converted_from}


class ModelStore:
    """Loads checkpoints once (per reference) and keeps the most recently used ones in memory.

    A reference is a folder under `root` (relative or absolute) or a Hub id `owner/name[@revision]`: an
    explorer checkpoint, or a model of the keras.io example, converted once (explorer.convert.hub_checkpoint).
    Loading is serialised per reference, so concurrent requests for the same model load it once.
    """

    def __init__(self, root: str | os.PathLike, capacity: int = 8, cache_dir: str | None = None,
                 max_hub_bytes: int | None = None):
        self.root = Path(root)
        self.capacity = capacity
        self.cache_dir = cache_dir
        self.max_hub_bytes = max_hub_bytes
        self._models: OrderedDict[str, LoadedModel] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    def choices(self) -> list[str]:
        """Every checkpoint under root, as references relative to it, newest runs last."""
        return [str(p.relative_to(self.root)) for p in list_checkpoints(self.root)]

    def local_card(self, ref: str) -> Card | None:
        """The card of a checkpoint under root, read without loading its model (None when unreadable)."""
        try:
            return read_card(self.root / ref)
        except (CheckpointError, OSError, ValueError):
            return None

    def key(self, ref: str) -> str:
        if not isinstance(ref, str) or not ref.strip():
            raise CheckpointError("no model chosen: pick a checkpoint or type a Hub id owner/name[@revision]")
        ref = ref.strip()
        local = self.root / ref
        if local.is_dir():
            return str(local.resolve())
        if Path(ref).is_absolute() and Path(ref).is_dir():
            return str(Path(ref).resolve())
        return ref

    def folder(self, key: str) -> Path:
        """The checkpoint folder of a key: a local folder, or a Hub id's snapshot (or its conversion)."""
        if Path(key).is_dir():
            return Path(key)
        if key.startswith("hf://") or hub.looks_like_repo_id(key):
            try:
                return convert.hub_checkpoint(key, cache_dir=self.cache_dir, max_hub_bytes=self.max_hub_bytes)
            except convert.ConvertError as e:
                raise CheckpointError(str(e)) from None
        return resolve(key)  # not a checkpoint: its error says why

    def has(self, ref: str) -> bool:
        """Whether `ref` is loaded already."""
        with self._lock:
            return self.key(ref) in self._models

    def get(self, ref: str) -> LoadedModel:
        key = self.key(ref)
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in self._models:
                    return self._models[key]
            folder = self.folder(key)
            identity = (key, checkpoint_identity(folder))  # before the load: files rewritten during it get another
            model, card = load_folder(folder)
            try:
                config = ViTConfig.from_dict(card.config)
            except (KeyError, TypeError, ValueError) as e:
                raise CheckpointError(f"{ref}: its card has no valid model config ({e})") from None
            probe = Probe(model, config)
            probe(np.zeros((1, config.image_size, config.image_size, 3), np.uint8))  # compile now
            loaded = LoadedModel(ref.strip(), model, card, config, probe, folder, identity)
            with self._lock:
                self._models[key] = loaded
                while len(self._models) > self.capacity:
                    self._models.popitem(last=False)
                self._loading.pop(key, None)
            return loaded

    def bases(self, slots: list[tuple[str, str | None]]) -> list[Base]:
        """The checkpoint of each (tag, ref) to fine-tune, as a job's plan takes it."""
        out = []
        for tag, ref in slots:
            if not ref:
                raise CheckpointError(f"slot {tag} holds no model to fine-tune")
            loaded = self.get(ref)
            # The folder it was loaded from: a Hub model's is in this store's cache (a converted one is a
            # checkpoint only there), which the worker process would not know to look in.
            label = f"{tag}: {loaded.name}" if tag else loaded.name
            out.append(Base(tag, label, str(loaded.folder), loaded.card))
        return out

    def loaded(self) -> list[LoadedModel]:
        with self._lock:
            return list(self._models.values())
