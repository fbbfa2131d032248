"""What the Attention tab shows of one image for a pair: each model's layer (one each, at the same relative
depth by default), its heads from the query patch framed and captioned, the layer x head sheet, rollout and
locality; a pair's analysis in one call (analyze_pair) and its pictures side by side."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from explorer.analysis import render
from explorer.analysis.render import square
from explorer.app.models import LoadedModel
from explorer.app.results import ResultCache, query_patch, top_k
from explorer.model.config import ViTConfig
from explorer.model.probe import (
    ProbeResult,
    attention_entropy,
    mean_attention_distance,
    query_attention,
    query_locality,
    rollout,
    rollout_map,
)

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
    # One map, under the words that say which it is (its layer and head, or the mean), as the tiles are.
    if head == HEAD_MEAN:
        return render.head_tiles(shown, maps.mean(0, keepdims=True), query=query, cell=size, columns=1,
                                 labels=[f"L{layer} mean of {len(maps)} heads"])
    try:
        index = int(str(head).split()[-1])
    except (ValueError, IndexError):
        raise ValueError(f"head must be {HEAD_ALL!r}, {HEAD_MEAN!r} or 'head <n>', got {head!r}") from None
    if not 0 <= index < maps.shape[0]:
        raise ValueError(f"{loaded.name} has {maps.shape[0]} heads; there is no head {index}")
    if marks is None:
        return render.head_tiles(shown, maps[index:index + 1], query=query, cell=size, columns=1,
                                 labels=[f"L{layer} head {index}"])
    return render.marked_tiles(shown, maps[index:index + 1], query=query, cell=size, columns=1,
                               lines=[marks.lines(index, layer)], frames=[marks.frames(index)])


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


@dataclass
class ModelView:
    """One model's analysis of one image: its probe result, top-5, the seconds it took (when it ran, for a
    cached result) and whether it came from the cache, and its attention pictures and locality."""

    model: LoadedModel
    result: ProbeResult
    top5: dict[str, float]
    seconds: float
    cached: bool
    view: AttentionView


def analyze_pair(models: list[LoadedModel], cache: ResultCache, image: np.ndarray, display: np.ndarray,
                 layer=0, head: str = HEAD_ALL, query_yx=(16.0, 16.0), parts=PARTS) -> list[ModelView]:
    """The per-image analysis for each model: top-5, timings, attention pictures (`parts`), locality.

    `layer` is one layer for every model, or a sequence of one per model (see pair_layers)."""
    shown = square(display, 224)
    layers = list(layer) if isinstance(layer, (list, tuple)) else [layer] * len(models)
    out = []
    for loaded, index in zip(models, layers, strict=True):
        result, seconds, cached = cache.get(loaded, image)
        out.append(ModelView(loaded, result, top_k(loaded, result), seconds, cached,
                             attention_view(loaded, result, shown, index, head, query_yx, parts=parts)))
    return out


PICTURES = ("focus", "sheet", "rollout")


def picture_title(tag: str, loaded: LoadedModel) -> str:
    """The title drawn above a model's half of a side-by-side picture. Two spaces after the colon: the
    pictures' small font sets a colon right against a single space."""
    return f"model {tag}:  {loaded.label}"


def side_by_side_pictures(analysis: list[ModelView], parts=PICTURES, tags: str = "AB") -> dict[str, np.ndarray]:
    """Each attention picture in `parts` of every analysed model in one picture, A's left of B's, each
    under "model A: name (variant)": a click then sends one file per kind of picture, not one per model."""
    # Not strict: the default tags name a pair, and one model alone takes only "A".
    titles = [picture_title(tag, a.model) for tag, a in zip(tags, analysis, strict=False)]
    return {part: render.side_by_side([getattr(a.view, part) for a in analysis], titles)
            for part in PICTURES if part in parts and all(getattr(a.view, part) is not None for a in analysis)}
