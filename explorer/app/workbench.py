"""What the app does, without the app: a cache of loaded models, one-call analysis of an image by a
model pair, what-ifs. The UI and the benchmarks both call this module (the fine-tune runner is
explorer.finetune.runner).
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from explorer import convert
from explorer.analysis import plots, render
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
from explorer.model.config import ViTConfig
from explorer.model.probe import (
    TAU_FACTORS,
    Probe,
    ProbeResult,
    WhatIfProbe,
    attention_entropy,
    mean_attention_distance,
    query_attention,
    query_locality,
    rollout,
    rollout_map,
)


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
        return f"{self.name} ({self.config.variant})"

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

    def members(self, slots: list[tuple[str, str | None]]) -> list[tuple[str, str, str, Card]]:
        """(tag, label, checkpoint folder the worker loads, card) of each (tag, ref) to fine-tune."""
        out = []
        for tag, ref in slots:
            if not ref:
                raise CheckpointError(f"slot {tag} holds no model to fine-tune")
            loaded = self.get(ref)
            # The folder it was loaded from: a Hub model's is in this store's cache (a converted one is a
            # checkpoint only there), which the worker process would not know to look in.
            label = f"{tag}: {loaded.name}" if tag else loaded.name
            out.append((tag, label, str(loaded.folder), loaded.card))
        return out

    def loaded(self) -> list[LoadedModel]:
        with self._lock:
            return list(self._models.values())


def what_if_setting(loaded: LoadedModel, factor: float = 1.0, diagonal_mask: bool | None = None) -> tuple | None:
    """(factor, mask) when they change the model, None when they are its own (tau as learned, its mask).

    Raises ValueError for a factor outside TAU_FACTORS.
    """
    try:
        factor = float(factor)
    except (TypeError, ValueError):
        raise ValueError(f"the tau factor must be a number, got {factor!r}") from None
    low, high = TAU_FACTORS
    if not (np.isfinite(factor) and low <= factor <= high):
        raise ValueError(f"the tau factor must be between {low} and {high}, got {factor}")
    mask = loaded.probe.diagonal_mask if diagonal_mask is None else bool(diagonal_mask)
    return None if factor == 1.0 and mask == loaded.probe.diagonal_mask else (factor, mask)


class ResultCache:
    """Probe results per (model, image, what-if setting), so moving the query or the layer never reruns
    a model, and a what-if costs one forward pass per image and setting. A model is named by its identity:
    a checkpoint dropped by the store and loaded again finds its results, another model never does."""

    def __init__(self, capacity: int = 128):
        self.capacity = capacity
        self._items: OrderedDict[tuple, tuple[ProbeResult, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, loaded: LoadedModel, image: np.ndarray, factor: float = 1.0,
            diagonal_mask: bool | None = None) -> tuple[ProbeResult, float, bool]:
        """(result, seconds the model took (when it ran, for a cached result), whether it came from the cache).

        With the default factor and mask it is the learned model's probe; otherwise every layer's tau is
        multiplied by `factor` and the diagonal masked or not (None: as the model does), see WhatIfProbe.
        """
        setting = what_if_setting(loaded, factor, diagonal_mask)
        image_hash = hashlib.blake2b(np.ascontiguousarray(image).tobytes(), digest_size=16).digest()
        key = (loaded.identity, image_hash, setting)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return (*self._items[key], True)
        start = time.perf_counter()
        with loaded.lock:  # one call at a time per model; rendering happens outside
            result = loaded.probe(image[None]) if setting is None else loaded.what_if_probe()(image[None], *setting)
        elapsed = time.perf_counter() - start
        with self._lock:
            self._items[key] = (result, elapsed)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return result, elapsed, False


def top_k(loaded: LoadedModel, result: ProbeResult, k: int = 5) -> dict[str, float]:
    probs = result.probabilities[0]
    order = np.argsort(-probs)[:k]
    names = loaded.class_names
    return {names[i]: float(probs[i]) for i in order}


def query_patch(query_yx: tuple[float, float], config: ViTConfig) -> tuple[int, int]:
    """The (row, col) of the patch under pixel (y, x) of the model's raw input image."""
    y, x = query_yx
    grid = config.grid_size
    scale = grid / config.image_size
    row = int(np.clip(np.floor(float(y) * scale), 0, grid - 1))
    col = int(np.clip(np.floor(float(x) * scale), 0, grid - 1))
    return row, col


def square(image: np.ndarray, size: int) -> np.ndarray:
    """The image squashed to size x size, as the model sees it; small images keep their pixels sharp."""
    from PIL import Image
    small = max(image.shape[:2]) * 2 <= size
    return np.asarray(Image.fromarray(image).resize((size, size), Image.NEAREST if small else Image.BILINEAR))


HEAD_ALL, HEAD_MEAN = "all heads", "mean of heads"
PARTS = ("focus", "sheet", "rollout", "locality")
# B's layer, unless it is chosen: the layer at A's relative depth (the last for the last, the first for the first).
SAME_DEPTH = "same depth as A"
# Past the shipped models' 4 heads (the paper's ViT has 12, in 9 layers) one layer's heads wrap into rows of TILE px
# tiles, fewer to a row than to a column (12 heads: 3 x 4), each captioned with its distance and self-attention:
# at 800 px of browser both models' tiles still show at about 95 css px and their captions at 9 px. Every
# layer x head (the sheet) is drawn up to SHEET_HEADS heads only: with 12 its cells would show at 24 css px there.
TILE = 104
SHEET_HEADS = 4


def sheet_cell(heads: int, cell: int) -> int:
    """The cell side of a sheet with `heads` columns whose cells are `cell` px with 4 heads or fewer."""
    return max(40, min(cell, cell * 4 // max(heads, 1)))


def tile_layout(heads: int, size: int) -> tuple[int, int]:
    """(tiles to a row, tile side) for one layer's heads: two of size / 2 up to 4 heads, then TILE px tiles in a
    near square a little taller than wide (12 heads: 3 to a row, 4 rows)."""
    if heads <= 4:
        return 2, size // 2
    return math.ceil(heads / math.ceil(math.sqrt(heads))), TILE


def check_layer(loaded: LoadedModel, layer, tag: str = "") -> int:
    """`layer` as an index into the model's layers; a ValueError naming the valid range otherwise (the model
    called "model {tag} (name)" when a tag is given)."""
    count = loaded.config.num_layers
    name = f"model {tag} ({loaded.name})" if tag else loaded.name
    try:
        index = float(layer)
    except (TypeError, ValueError):
        raise ValueError(f"the layer of {name} is a number from 0 to {count - 1}, got {layer!r}") from None
    if not (index.is_integer() and 0 <= index < count):
        raise ValueError(f"{name} has {count} layers: its layer is 0 to {count - 1}, got {layer}")
    return int(index)


def same_depth(layer: int, layers: int, to_layers: int) -> int:
    """The layer of a `to_layers`-deep model at the relative depth of `layer` in a `layers`-deep one."""
    if layers <= 1 or to_layers <= 1:
        return to_layers - 1 if layers <= 1 else 0
    return int(math.floor(layer * (to_layers - 1) / (layers - 1) + 0.5))


def pair_layers(models: list[LoadedModel], layer_a, layer_b=SAME_DEPTH) -> list[int]:
    """Each model's layer, checked: A's `layer_a`, B's `layer_b` or, for SAME_DEPTH (or None, ""), the layer at
    A's relative depth. Raises ValueError naming the valid range."""
    first = check_layer(models[0], layer_a, "A")
    out = [first]
    for loaded in models[1:]:
        if layer_b is None or layer_b == "" or layer_b == SAME_DEPTH:
            out.append(same_depth(first, models[0].config.num_layers, loaded.config.num_layers))
        else:
            out.append(check_layer(loaded, layer_b, "B"))
    return out


def layer_words(layer: int, layers: int) -> str:
    """"layer 8 of 9 (the last)": a layer (from 0) said with the model's depth."""
    where = " (the last)" if layer == layers - 1 and layers > 1 else " (the first)" if layer == 0 else ""
    return f"layer {layer} of {layers}{where}"


@dataclass
class HeadMarks:
    """One layer's heads seen from the query patch: each head's distance to where it attends (a fraction of the
    image's side) and the share of its attention the query keeps for its own patch; the most local head and the
    most self-attending one (None where no head gives its own patch more than even attention, 1 / patches: LSA's
    mask gives it none)."""

    distance: np.ndarray      # (heads,) over the image's side
    self_share: np.ndarray    # (heads,)
    most_local: int
    most_self: int | None

    @classmethod
    def of(cls, attention: np.ndarray, layer: int, query: int, config: ViTConfig) -> HeadMarks:
        distance, share = query_locality(attention, layer, query, config.grid_size, config.pixels_per_patch)
        distance = distance / config.image_size
        even = 1.0 / config.num_patches
        return cls(distance, share, int(np.argmin(distance)), int(np.argmax(share)) if share.max() > even else None)

    def frames(self, head: int) -> tuple:
        return tuple(c for c, on in ((render.MOST_LOCAL_COLOR, head == self.most_local),
                                     (render.MOST_SELF_COLOR, head == self.most_self)) if on)

    def lines(self, head: int, layer: int) -> list[tuple[str, tuple]]:
        out = [(f"L{layer} head {head}", (0, 0, 0)),
               (f"dist {self.distance[head]:.2f}  self {100 * self.self_share[head]:.1f}%", (0, 0, 0))]
        if head == self.most_local:
            out.append(("most local" + (", most self" if head == self.most_self else ""), render.MOST_LOCAL_COLOR))
        elif head == self.most_self:
            out.append(("most self-attending", render.MOST_SELF_COLOR))
        return out


@dataclass
class AttentionView:
    """What the attention tab shows for one model and one image; parts not asked for stay None."""

    layer: int
    query: tuple[int, int]
    focus: np.ndarray | None = None      # the chosen layer/head(s) from the query patch, overlaid
    sheet: np.ndarray | None = None      # layer x head overview from the query patch (up to SHEET_HEADS heads)
    rollout: np.ndarray | None = None    # cumulative rollout over all layers, averaged over queries
    distance: np.ndarray | None = None   # (layers, heads) mean attention distance, input pixels
    entropy: np.ndarray | None = None    # (layers, heads) nats
    marks: HeadMarks | None = None       # the chosen layer's heads from the query (with "focus")


def focus_picture(loaded: LoadedModel, attention: np.ndarray, shown: np.ndarray, layer: int, head: str,
                  query: tuple[int, int], size: int = 224, marks: HeadMarks | None = None) -> np.ndarray:
    """One layer's attention from the query patch: every head as a tile (captioned with `marks` when given),
    their mean, or one head."""
    grid = loaded.config.grid_size
    maps = query_attention(attention, layer, query[0] * grid + query[1], grid)
    if head == HEAD_ALL:
        # Tiles in a near square keep each head legible in its box.
        columns, tile = tile_layout(len(maps), size)
        if marks is None:
            return render.head_tiles(shown, maps, query=query, cell=tile, columns=columns,
                                     labels=[f"L{layer} head {j}" for j in range(len(maps))])
        return render.marked_tiles(shown, maps, query=query, cell=tile, columns=columns,
                                   lines=[marks.lines(j, layer) for j in range(len(maps))],
                                   frames=[marks.frames(j) for j in range(len(maps))])
    if head == HEAD_MEAN:
        return render.attention_overlay(shown, maps.mean(0), query=query, size=size)
    try:
        index = int(str(head).split()[-1])
    except (ValueError, IndexError):
        raise ValueError(f"head must be {HEAD_ALL!r}, {HEAD_MEAN!r} or 'head <n>', got {head!r}") from None
    if not 0 <= index < maps.shape[0]:
        raise ValueError(f"{loaded.name} has {maps.shape[0]} heads; there is no head {index}")
    return render.attention_overlay(shown, maps[index], query=query, size=size)


def attention_view(loaded: LoadedModel, result: ProbeResult, display: np.ndarray, layer: int, head: str,
                   query_yx: tuple[float, float], size: int = 224, parts=PARTS) -> AttentionView:
    """Attention pictures and locality numbers of one model for one image (index 0 of `result`).

    `parts` picks what to compute: a query click needs only "focus" and "sheet", a layer or head change
    only "focus"; "rollout" and "locality" do not depend on the query. A layer out of range is clipped.
    """
    config = loaded.config
    grid = config.grid_size
    attention = result.attention[0]
    layer = int(np.clip(layer, 0, attention.shape[0] - 1))
    query = query_patch(query_yx, config)
    view = AttentionView(layer, query)
    if "focus" in parts:
        view.marks = HeadMarks.of(attention, layer, query[0] * grid + query[1], config)
        view.focus = focus_picture(loaded, attention, display, layer, head, query, size, view.marks)
    if "sheet" in parts and attention.shape[1] <= SHEET_HEADS:
        q = query[0] * grid + query[1]
        all_layers = attention[:, :, q, :].reshape(attention.shape[0], attention.shape[1], grid, grid)
        view.sheet = render.head_sheet(display, all_layers, query=query, cell=sheet_cell(attention.shape[1], 72))
    if "rollout" in parts:
        _, cumulative = rollout(attention)
        view.rollout = render.attention_overlay(display, rollout_map(cumulative[-1], grid), size=size)
    if "locality" in parts:
        view.distance = mean_attention_distance(attention, grid, config.pixels_per_patch)
        view.entropy = attention_entropy(attention)
    return view


def analyze_pair(models: list[LoadedModel], cache: ResultCache, image: np.ndarray, display: np.ndarray,
                 layer=0, head: str = HEAD_ALL, query_yx=(16.0, 16.0), parts=PARTS) -> list[dict]:
    """The per-image analysis for each model: top-5, timings, attention pictures (`parts`), locality.

    `layer` is one layer for every model, or a sequence of one per model (see pair_layers)."""
    shown = square(display, 224)
    layers = list(layer) if isinstance(layer, (list, tuple)) else [layer] * len(models)
    out = []
    for loaded, index in zip(models, layers, strict=True):
        result, seconds, cached = cache.get(loaded, image)
        out.append({"model": loaded, "result": result, "top5": top_k(loaded, result), "seconds": seconds,
                    "cached": cached, "view": attention_view(loaded, result, shown, index, head, query_yx,
                                                             parts=parts)})
    return out


PICTURES = ("focus", "sheet", "rollout")


def picture_title(tag: str, loaded: LoadedModel) -> str:
    """The title drawn above a model's half of a side-by-side picture. Two spaces after the colon: the
    pictures' small font sets a colon right against a single space."""
    return f"model {tag}:  {loaded.label}"


def side_by_side_pictures(analysis: list[dict], parts=PICTURES, tags: str = "AB") -> dict[str, np.ndarray]:
    """Each attention picture in `parts` of every analysed model in one picture, A's left of B's, each
    under "model A: name (variant)": a click then sends one file per kind of picture, not one per model."""
    # Not strict: the default tags name a pair, and one model alone takes only "A".
    titles = [picture_title(tag, a["model"]) for tag, a in zip(tags, analysis, strict=False)]
    return {part: render.side_by_side([getattr(a["view"], part) for a in analysis], titles)
            for part in PICTURES if part in parts and all(getattr(a["view"], part) is not None for a in analysis)}


@dataclass
class WhatIf:
    """One model's learned outputs beside those with its tau scaled and its diagonal mask switched."""

    model: LoadedModel
    factor: float
    diagonal_mask: bool       # the mask in the what-if
    layer: int
    query: tuple[int, int]
    top5: dict                # learned
    top5_what_if: dict
    maps: np.ndarray          # picture: the layer's heads from the query patch, learned row over what-if row
    entropy: np.ndarray       # (2, layers, heads): learned, what-if
    distance: np.ndarray      # (2, layers, heads)
    seconds: float            # the what-if forward pass (when it ran, for a cached one)
    cached: bool = False


def what_if(loaded: LoadedModel, cache: ResultCache, image: np.ndarray, display: np.ndarray, factor: float = 1.0,
            diagonal_mask: bool | None = None, layer: int = 0, query_yx=(16.0, 16.0)) -> WhatIf:
    """The learned model against the same weights with every tau times `factor` and the diagonal mask on
    or off (None: as learned), on one image: top-5, maps from the query patch, entropy and distance.

    The shared model is never changed; a new setting costs one forward pass, then comes from `cache`.
    """
    setting = what_if_setting(loaded, factor, diagonal_mask) or (float(factor), loaded.probe.diagonal_mask)
    learned = cache.get(loaded, image)[0]
    changed, seconds, cached = cache.get(loaded, image, *setting)
    config = loaded.config
    grid = config.grid_size
    layer = int(np.clip(layer, 0, config.num_layers - 1))
    row, col = query_patch(query_yx, config)
    both = np.stack([learned.attention[0], changed.attention[0]])
    maps = both[:, layer, :, row * grid + col, :].reshape(2, -1, grid, grid)
    cell = sheet_cell(maps.shape[1], 96)
    wide = cell >= 96  # room for the layer in every column's label; else it goes into the rows'
    picture = render.head_sheet(square(display, 224), maps, query=(row, col), cell=cell,
                                row_labels=["learned", "what if"] if wide else [f"L{layer} learned",
                                                                                f"L{layer} what if"],
                                col_labels=[f"L{layer} head {j}" if wide else f"head {j}"
                                            for j in range(maps.shape[1])])
    return WhatIf(loaded, setting[0], setting[1], layer, (row, col), top_k(loaded, learned), top_k(loaded, changed),
                  picture, np.stack([attention_entropy(a) for a in both]),
                  np.stack([mean_attention_distance(a, grid, config.pixels_per_patch) for a in both]), seconds,
                  cached)


def what_if_plot(named: list[tuple[str, WhatIf]], cache: plots.PlotCache) -> np.ndarray:
    """Entropy and mean attention distance per layer, learned against what-if, for each named what-if."""
    digest = hashlib.blake2b(digest_size=16)
    for name, w in named:
        digest.update(name.encode() + b"\0" + np.ascontiguousarray(w.entropy).tobytes()
                      + np.ascontiguousarray(w.distance).tobytes())
    return cache.get(digest.digest(), lambda: plots.plot_what_if({n: tuple(w.entropy) for n, w in named},
                                                                  {n: tuple(w.distance) for n, w in named}))
