"""What if: a model's learned outputs on one image beside those with every tau scaled and the diagonal mask
switched (the same weights; a new setting costs one forward pass, then comes from the result cache), and the
entropy and distance plot of several."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from explorer.analysis import plots, render
from explorer.analysis.render import square
from explorer.app.attention import sheet_cell
from explorer.app.models import LoadedModel
from explorer.app.results import ResultCache, query_patch, top_k, what_if_setting
from explorer.model.probe import attention_entropy, mean_attention_distance


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
    picture = _sheet(square(display, 224), maps, (row, col), layer)
    return WhatIf(loaded, setting[0], setting[1], layer, (row, col), top_k(loaded, learned), top_k(loaded, changed),
                  picture, np.stack([attention_entropy(a) for a in both]),
                  np.stack([mean_attention_distance(a, grid, config.pixels_per_patch) for a in both]), seconds,
                  cached)


# More heads than this: each setting's heads as captioned tiles, rows of at most this many, not one row of
# 40 px cells (the paper-scale model's 12 heads: two rows of six 64 px tiles for each setting).
ONE_ROW_HEADS = 6
MANY_HEADS_TILE = 64


def _sheet(image: np.ndarray, maps: np.ndarray, query: tuple[int, int], layer: int) -> np.ndarray:
    """The learned maps (maps[0], heads x g x g) above the what-if maps (maps[1]) of one layer."""
    heads = maps.shape[1]
    if heads > ONE_ROW_HEADS:
        columns = math.ceil(heads / math.ceil(heads / ONE_ROW_HEADS))
        return render.stacked([render.label_image(render.head_tiles(image, m, query=query, cell=MANY_HEADS_TILE,
                                                                    columns=columns,
                                                                    labels=[f"head {j}" for j in range(heads)]),
                                                  f"L{layer} {setting}")
                               for setting, m in zip(("learned", "what if"), maps, strict=True)])
    cell = sheet_cell(heads, 96)
    wide = cell >= 96  # room for the layer in every column's label; else it goes into the rows'
    return render.head_sheet(image, maps, query=query, cell=cell,
                             row_labels=["learned", "what if"] if wide else [f"L{layer} learned", f"L{layer} what if"],
                             col_labels=[f"L{layer} head {j}" if wide else f"head {j}" for j in range(heads)])


def what_if_plot(named: list[tuple[str, WhatIf]], cache: plots.PlotCache) -> np.ndarray:
    """Entropy and mean attention distance per layer, learned against what-if, for each named what-if."""
    digest = hashlib.blake2b(digest_size=16)
    for name, w in named:
        digest.update(name.encode() + b"\0" + np.ascontiguousarray(w.entropy).tobytes()
                      + np.ascontiguousarray(w.distance).tobytes())
    return cache.get(digest.digest(), lambda: plots.plot_what_if({n: tuple(w.entropy) for n, w in named},
                                                                  {n: tuple(w.distance) for n, w in named}))
