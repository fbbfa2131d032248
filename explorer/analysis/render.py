"""Pictures for the explorer: numpy/PIL images for per-request views (patch grids, attention overlays,
captions, fast PNG); the matplotlib plots are in explorer.analysis.plots."""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import matplotlib
import numpy as np
from PIL import Image, ImageDraw, ImageFont

CMAP = "inferno"
SHIFTS = ("left-up", "left-down", "right-up", "right-down")
# (rows, cols) the content moves by, in units of `shift`; must match explorer.model.layers.SHIFT_DIRECTIONS.
SHIFT_DIRECTIONS = {"left-up": (-1, -1), "left-down": (1, -1), "right-up": (-1, 1), "right-down": (1, 1)}

BAR_WIDTH = 14
# A white gap separates the colour bar from the picture so the bar's dark end is not read as image.
BAR_GAP = 2
COLORBAR_WIDTH = BAR_GAP + BAR_WIDTH
QUERY_COLOR = (0, 255, 255)  # cyan is absent from inferno, so the outline never blends into the map

_WHITE = (255, 255, 255)
_BLACK = (0, 0, 0)
_GRID_TARGET_WIDTH = 320


# ---------------------------------------------------------------------------------------------- images


def _rgb(image: np.ndarray) -> np.ndarray:
    """(H, W), (H, W, 1), (H, W, 3) or (H, W, 4) pixels on the 0-255 scale as uint8 (H, W, 3)."""
    a = np.asarray(image)
    if a.ndim == 2:
        a = a[..., None]
    if a.ndim != 3 or a.shape[2] not in (1, 3, 4):
        raise ValueError(f"expected an (H, W), (H, W, 1), (H, W, 3) or (H, W, 4) image, got shape {a.shape}")
    if a.shape[2] == 1:
        a = np.repeat(a, 3, axis=2)
    a = a[..., :3]
    if a.dtype != np.uint8:
        a = np.clip(np.rint(a), 0, 255).astype(np.uint8)
    return a


def shift_image(image: np.ndarray, mode: str, shift: int) -> np.ndarray:
    """Moves the content diagonally by `shift` pixels, zero-padding the uncovered border.

    out[i, j] = image[i - dy*shift, j - dx*shift] inside the image, else 0, with (dy, dx) from
    SHIFT_DIRECTIONS: the same as the model's keras layer. Any dtype, any trailing axes.
    """
    if mode not in SHIFT_DIRECTIONS:
        raise ValueError(f"unknown shift mode {mode!r}; expected one of {SHIFTS}")
    if shift < 0:
        raise ValueError(f"shift must be >= 0, got {shift}")
    image = np.asarray(image)
    out = np.zeros_like(image)
    h, w = image.shape[:2]
    if shift >= h or shift >= w:
        return out
    dy, dx = (d * shift for d in SHIFT_DIRECTIONS[mode])
    out[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
        image[max(-dy, 0):h - max(dy, 0), max(-dx, 0):w - max(dx, 0)]
    return out


def spt_views(image: np.ndarray, patch_size: int) -> dict[str, np.ndarray]:
    """The image and its four diagonal half-patch shifts, in the order SPT concatenates them."""
    image = np.asarray(image)
    views = {"original": image}
    views.update((mode, shift_image(image, mode, patch_size // 2)) for mode in SHIFTS)
    return views


def grid_scale(width: int, patch_size: int, gap: int = 2) -> int:
    """The default upscale of patch_grid: the largest that keeps the grid within ~320 px, at least 1."""
    cols = width // patch_size
    return max(1, (_GRID_TARGET_WIDTH - (cols - 1) * gap) // width)


def patch_position(row: int, col: int, patch_size: int, gap: int, scale: int) -> tuple[int, int]:
    """Top-left (y0, x0) of patch (row, col) in a patch_grid picture."""
    step = patch_size * scale + gap
    return row * step, col * step


def patch_grid(image: np.ndarray, patch_size: int, gap: int = 2, scale: int | None = None,
               background: tuple[int, int, int] = _WHITE) -> np.ndarray:
    """The image cut into patches, each upscaled by `scale` (nearest), with `gap` background pixels between.

    Gaps lie only between patches, not around the outside, so the picture is
    rows * patch_size * scale + (rows - 1) * gap pixels high (likewise wide).
    """
    rgb = _rgb(image)
    h, w = rgb.shape[:2]
    if patch_size < 1 or h % patch_size or w % patch_size:
        raise ValueError(f"image size {h}x{w} is not a multiple of patch_size {patch_size}")
    if gap < 0:
        raise ValueError(f"gap must be >= 0, got {gap}")
    scale = grid_scale(w, patch_size, gap) if scale is None else int(scale)
    if scale < 1:
        raise ValueError(f"scale must be >= 1, got {scale}")
    rows, cols, side = h // patch_size, w // patch_size, patch_size * scale
    patches = rgb.reshape(rows, patch_size, cols, patch_size, 3)
    if scale > 1:
        patches = patches.repeat(scale, axis=1).repeat(scale, axis=3)
    # Each patch owns a (side + gap)^2 tile whose trailing gap is background; one reshape lays them out.
    tiles = np.empty((rows, side + gap, cols, side + gap, 3), np.uint8)
    tiles[:] = np.asarray(background, np.uint8)
    tiles[:, :side, :, :side] = patches
    grid = tiles.reshape(rows * (side + gap), cols * (side + gap), 3)
    return np.ascontiguousarray(grid[:grid.shape[0] - gap, :grid.shape[1] - gap])


def spt_grids(image: np.ndarray, patch_size: int, gap: int = 2,
              scale: int | None = None) -> dict[str, np.ndarray]:
    """patch_grid of each of the spt_views, all at the same scale."""
    views = spt_views(image, patch_size)
    return {name: patch_grid(view, patch_size, gap, scale) for name, view in views.items()}


@functools.cache
def colormap_lut() -> np.ndarray:
    """The app's colormap as a read-only (256, 3) uint8 table; matplotlib is consulted only once."""
    lut = (matplotlib.colormaps[CMAP](np.linspace(0.0, 1.0, 256))[:, :3] * 255 + 0.5).astype(np.uint8)
    lut.setflags(write=False)
    return lut


def colorize(values: np.ndarray, vmin: float | None = None, vmax: float | None = None) -> np.ndarray:
    """Values mapped through the colormap LUT to uint8 (..., 3); NaN maps to the low end.

    vmin/vmax default to the finite min/max; a zero span maps everything to the low end.
    """
    v = np.asarray(values, np.float32)
    finite = v[np.isfinite(v)]
    if vmin is None:
        vmin = float(finite.min()) if finite.size else 0.0
    if vmax is None:
        vmax = float(finite.max()) if finite.size else 0.0
    return colormap_lut()[_color_index(v, vmin, vmax)]


def _color_index(values: np.ndarray, vmin: float, vmax: float) -> np.ndarray:
    """colorize's LUT index (uint8) of each value, from vmin to vmax."""
    v = np.asarray(values, np.float32)
    span = vmax - vmin
    t = (v - vmin) * (255.0 / span) if span > 0 else np.zeros_like(v)
    index = np.clip(np.nan_to_num(t, nan=0.0, posinf=255.0, neginf=0.0), 0, 255) + 0.5
    return index.astype(np.uint8)


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def encode_png(image: np.ndarray) -> bytes:
    """A lossless RGB PNG of uint8 (H, W, 3) pixels, ~3x faster than Pillow's fastest level.

    Every row uses PNG's "Up" filter (difference to the row above), which turns the flat, nearest-upscaled
    patches of our pictures into runs of zeros, then zlib level 1; Pillow tries every filter per row. A large
    picture's rows are deflated in pieces at once (`_deflate`).
    """
    a = np.ascontiguousarray(_rgb(image))
    height, width = a.shape[:2]
    rows = np.empty((height, 1 + 3 * width), np.uint8)
    rows[:, 0] = 2  # filter type Up
    up = rows[:, 1:].reshape(height, width, 3)
    up[0] = a[0]
    np.subtract(a[1:], a[:-1], out=up[1:])  # uint8 wraps modulo 256, as PNG's filters do
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header)
            + _png_chunk(b"IDAT", _deflate(rows.reshape(-1))) + _png_chunk(b"IEND", b""))


# Below this many bytes a picture is deflated in one piece: a thread's hand-off costs more than it saves.
PARALLEL_DEFLATE_BYTES = 1 << 19


@functools.cache
def _deflaters() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="deflate")


def _deflate_piece(data: memoryview, last: bool) -> bytes:
    compressor = zlib.compressobj(1, zlib.DEFLATED, -15)  # raw deflate: the pieces join into one stream
    return compressor.compress(data) + compressor.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _deflate(data: np.ndarray, pieces: int = 3) -> bytes:
    """zlib level 1 of `data` (1-D uint8); a large input in `pieces` deflated at once, as pigz does: each piece
    ends on a byte boundary (a sync flush), only the last is final, and the stream's Adler-32 is the whole
    input's. zlib works outside the GIL: three pieces on two threads and this one took 5.7 ms against 10.1 ms
    in one piece for the Attention tab's click picture (856 x 694) on a 2-core host; pieces of a picture
    differ in cost, so two pieces (6.9 ms) balance worse."""
    if data.size < PARALLEL_DEFLATE_BYTES:
        return zlib.compress(data.tobytes(), 1)
    view, cuts = memoryview(data), [i * data.size // pieces for i in range(pieces + 1)]
    others = [_deflaters().submit(_deflate_piece, view[cuts[i]:cuts[i + 1]], False) for i in range(pieces - 1)]
    last = _deflate_piece(view[cuts[-2]:], True)
    checksum = zlib.adler32(view) & 0xFFFFFFFF
    return b"\x78\x01" + b"".join(f.result() for f in others) + last + struct.pack(">I", checksum)


# ------------------------------------------------------------------------------------------------ text


@functools.cache
def _font() -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default()


@functools.cache
def _line_box() -> tuple[int, int]:
    """(top, bottom) of a text line, so every label shares one baseline whatever its letters."""
    _, top, _, bottom = _font().getbbox("Ag|j0")
    return int(top), int(bottom)


@functools.lru_cache(maxsize=512)
def _text_mask(text: str, rotate: bool = False) -> np.ndarray:
    """Anti-aliased coverage (0-1 float32) of `text`; rotated it reads bottom to top."""
    top, bottom = _line_box()
    width = max(1, int(np.ceil(_font().getlength(text))))
    im = Image.new("L", (width, bottom - top), 0)
    ImageDraw.Draw(im).text((0, -top), text, fill=255, font=_font())
    if rotate:
        im = im.transpose(Image.Transpose.ROTATE_90)
    mask = np.asarray(im, np.float32) / 255.0
    mask.setflags(write=False)
    return mask


def _paint(canvas: np.ndarray, mask: np.ndarray, y: int, x: int, color: tuple[int, int, int]) -> None:
    """Blends `color` into canvas through `mask` placed at (y, x), clipped to the canvas."""
    h, w = canvas.shape[:2]
    y0, x0 = max(y, 0), max(x, 0)
    y1, x1 = min(y + mask.shape[0], h), min(x + mask.shape[1], w)
    if y1 <= y0 or x1 <= x0:
        return
    m = mask[y0 - y:y1 - y, x0 - x:x1 - x, None]
    region = canvas[y0:y1, x0:x1]
    region[:] = (region * (1.0 - m) + np.asarray(color, np.float32) * m + 0.5).astype(np.uint8)


def label_image(image: np.ndarray, text: str, background: tuple[int, int, int] = _WHITE,
                color: tuple[int, int, int] = _BLACK, margin: int = 3) -> np.ndarray:
    """The image with a one-line caption strip above it (PIL default font, left-aligned)."""
    rgb = _rgb(image)
    mask = _text_mask(text)
    strip = np.empty((mask.shape[0] + 2 * margin, rgb.shape[1], 3), np.uint8)
    strip[:] = np.asarray(background, np.uint8)
    _paint(strip, mask, margin, margin, color)
    return np.concatenate([strip, rgb], axis=0)


def _format_value(value: float) -> str:
    return f"{value:.2g}"


# -------------------------------------------------------------------------------------------- overlays


@functools.lru_cache(maxsize=64)
def _cell_index(cells: int, size: int) -> np.ndarray:
    """For each of `size` output pixels, the attention cell it shows (nearest upscale)."""
    index = (np.arange(size) * cells) // size
    index.setflags(write=False)
    return index


def _cell_bounds(index: int, cells: int, size: int) -> tuple[int, int]:
    return index * size // cells, (index + 1) * size // cells


def _resized(image: np.ndarray, size: int) -> np.ndarray:
    rgb = _rgb(image)
    if rgb.shape[:2] == (size, size):
        return rgb
    return np.asarray(Image.fromarray(rgb).resize((size, size), Image.Resampling.BILINEAR))


def _overlay(base: np.ndarray, attention: np.ndarray, alpha: float, vmax: float | None,
             query: tuple[int, int] | None) -> tuple[np.ndarray, float]:
    """The colorized map blended over a square base picture, and the vmax used."""
    a = np.asarray(attention, np.float32)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"attention must be a square (g, g) map, got shape {a.shape}")
    if vmax is None:
        finite = a[np.isfinite(a)]
        vmax = float(finite.max()) if finite.size else 0.0
    cells, size = a.shape[0], base.shape[0]
    index = _cell_index(cells, size)
    colors = _color_index(a, 0.0, vmax)[index[:, None], index[None, :]]
    out = _blend(base, colors, alpha)
    if query is not None:
        _outline_cell(out, query, cells)
    return out, vmax


@functools.lru_cache(maxsize=8)
def _weighted_lut(alpha: float) -> np.ndarray:
    weighted = colormap_lut().astype(np.float32) * np.float32(alpha)
    weighted.setflags(write=False)
    return weighted


def _blend(base: np.ndarray, colors: np.ndarray, alpha: float) -> np.ndarray:
    """`base` (s, s, 3) under the colormap's colours of `colors` ((..., s, s) LUT indices) at `alpha`, rounded:
    a table lookup and one add per pixel."""
    return (base * np.float32(1.0 - alpha) + np.float32(0.5) + _weighted_lut(alpha)[colors]).astype(np.uint8)


def _overlays(base: np.ndarray, maps: np.ndarray, alpha: float, query: tuple[int, int] | None) -> np.ndarray:
    """_overlay of each of `maps` (N, g, g) over the same base, each coloured from 0 to its own max, in one go:
    (N, size, size, 3), pixel for pixel what _overlay draws (a query click draws 56 of them)."""
    a = np.asarray(maps, np.float32)
    if a.ndim != 3 or a.shape[1] != a.shape[2]:
        raise ValueError(f"maps must be square (n, g, g) maps, got shape {a.shape}")
    finite = np.where(np.isfinite(a), a, -np.inf).reshape(len(a), -1)
    vmax = finite.max(1, initial=-np.inf).astype(np.float64) if a.size else np.zeros(len(a))
    vmax = np.where(np.isfinite(vmax), vmax, 0.0)
    # colorize(a, 0, vmax) for each map: its float32 maths, the scale a Python float cast to float32
    scale = np.array([np.float32(255.0 / v) if v > 0 else np.float32(0.0) for v in vmax], np.float32)
    t = a * scale[:, None, None]
    index = np.clip(np.nan_to_num(t, nan=0.0, posinf=255.0, neginf=0.0), 0, 255) + 0.5
    cells, size = a.shape[1], base.shape[0]
    cell = _cell_index(cells, size)
    out = _blend(base, index.astype(np.uint8)[:, cell[:, None], cell[None, :]], alpha)
    if query is not None:
        for picture in out:
            _outline_cell(picture, query, cells)
    return out


def _outline_cell(canvas: np.ndarray, query: tuple[int, int], cells: int, width: int = 2) -> None:
    row, col = query
    if not (0 <= row < cells and 0 <= col < cells):
        raise ValueError(f"query {query} is outside the {cells}x{cells} patch grid")
    size = canvas.shape[0]
    y0, y1 = _cell_bounds(row, cells, size)
    x0, x1 = _cell_bounds(col, cells, size)
    for ys, xs in ((slice(y0, y0 + width), slice(x0, x1)), (slice(y1 - width, y1), slice(x0, x1)),
                   (slice(y0, y1), slice(x0, x0 + width)), (slice(y0, y1), slice(x1 - width, x1))):
        canvas[ys, xs] = QUERY_COLOR


@functools.lru_cache(maxsize=32)
def _bar(height: int) -> np.ndarray:
    """The colour bar gradient, high values on top, BAR_WIDTH wide."""
    index = (np.arange(height - 1, -1, -1) * 255) // max(height - 1, 1)
    bar = np.repeat(colormap_lut()[index][:, None, :], BAR_WIDTH, axis=1)
    bar.setflags(write=False)
    return bar


def _colorbar(height: int, top_label: str, bottom_label: str = "0") -> np.ndarray:
    """The app's colour bar strip: white gap, gradient, labels written along the bar at its two ends.

    Labels run bottom to top inside the bar so the strip stays narrow: black on the bright top end,
    white on the dark bottom end.
    """
    strip = np.full((height, COLORBAR_WIDTH, 3), 255, np.uint8)
    strip[:, BAR_GAP:] = _bar(height)
    top, bottom = _text_mask(top_label, rotate=True), _text_mask(bottom_label, rotate=True)
    x = BAR_GAP + (BAR_WIDTH - top.shape[1]) // 2
    _paint(strip, top, 3, x, _BLACK)
    _paint(strip, bottom, height - 3 - bottom.shape[0], x, _WHITE)
    return strip


def attention_overlay(image: np.ndarray, attention: np.ndarray, query: tuple[int, int] | None = None,
                      size: int = 256, alpha: float = 0.6, vmax: float | None = None,
                      colorbar: bool = True) -> np.ndarray:
    """A (g, g) attention map over the image, both at size x size; optional query outline and colour bar.

    The map is upscaled nearest (patches are the unit) and coloured from 0 to vmax (default: its max).
    `query` is the (row, col) patch outlined in cyan. With the colour bar the result is
    (size, size + COLORBAR_WIDTH, 3).
    """
    out, vmax = _overlay(_resized(image, size), attention, alpha, vmax, query)
    if not colorbar:
        return out
    return np.concatenate([out, _colorbar(size, _format_value(vmax))], axis=1)


def head_sheet(image: np.ndarray, maps: np.ndarray, query: tuple[int, int] | None = None, cell: int = 96,
               gap: int = 4, row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
               title: str | None = None) -> np.ndarray:
    """A layer x head grid of overlays of maps (L, H, g, g), each cell coloured from 0 to its own max.

    Rows are labelled "L0".. and columns "h0".. by default; one colour bar on the right reads 0..max.
    """
    maps = np.asarray(maps)
    if maps.ndim != 4:
        raise ValueError(f"maps must be (layers, heads, g, g), got shape {maps.shape}")
    layers, heads = maps.shape[:2]
    row_labels = [f"L{i}" for i in range(layers)] if row_labels is None else list(row_labels)
    col_labels = [f"h{j}" for j in range(heads)] if col_labels is None else list(col_labels)
    if len(row_labels) != layers or len(col_labels) != heads:
        raise ValueError(f"need {layers} row labels and {heads} column labels, "
                         f"got {len(row_labels)} and {len(col_labels)}")
    row_masks = [_text_mask(t) for t in row_labels]
    col_masks = [_text_mask(t) for t in col_labels]
    margin = 3
    left = max(m.shape[1] for m in row_masks) + 2 * margin if layers else margin
    top = _text_mask("0").shape[0] + 2 * margin
    step = cell + gap
    height = top + layers * step - gap + margin
    width = left + heads * step + BAR_WIDTH + margin
    sheet = np.full((height, width, 3), 255, np.uint8)

    base = _resized(image, cell)
    overlays = _overlays(base, maps.reshape(layers * heads, *maps.shape[2:]), 0.6, query) if maps.size else None
    for i in range(layers):
        y = top + i * step
        _paint(sheet, row_masks[i], y + (cell - row_masks[i].shape[0]) // 2, margin, _BLACK)
        for j in range(heads):
            x = left + j * step
            sheet[y:y + cell, x:x + cell] = overlays[i * heads + j]
    for j, mask in enumerate(col_masks):
        _paint(sheet, mask, margin, left + j * step + (cell - mask.shape[1]) // 2, _BLACK)
    if layers:
        # The cell gap already separates the bar from the pictures, so its own white gap is dropped.
        bar_x = left + heads * step
        bar = _colorbar(height - margin - top, "max")[:, BAR_GAP:]
        sheet[top:height - margin, bar_x:bar_x + BAR_WIDTH] = bar
    return sheet if title is None else label_image(sheet, title)


def head_tiles(image: np.ndarray, maps: np.ndarray, query: tuple[int, int] | None = None, cell: int = 112,
               columns: int = 2, gap: int = 4, labels: Sequence[str] | None = None) -> np.ndarray:
    """The heads' maps (H, g, g) of one layer as captioned tiles, `columns` to a row, nearly square.

    Each tile is coloured from 0 to its own max, like head_sheet's cells; one colour bar on the right
    reads 0..max. A row that is not full is left white.
    """
    maps = np.asarray(maps)
    if maps.ndim != 3:
        raise ValueError(f"maps must be (heads, g, g), got shape {maps.shape}")
    heads = maps.shape[0]
    labels = [f"head {j}" for j in range(heads)] if labels is None else list(labels)
    if len(labels) != heads or columns < 1:
        raise ValueError(f"need {heads} labels and columns >= 1, got {len(labels)} and {columns}")
    base = _resized(image, cell)
    drawn = _overlays(base, maps, 0.6, query) if heads else []
    tiles = [label_image(o, t) for o, t in zip(drawn, labels, strict=True)]
    rows = -(-heads // columns)
    th, tw = (tiles[0].shape[:2] if tiles else (cell, cell))
    height, width = rows * (th + gap) - gap, min(columns, max(heads, 1)) * (tw + gap) - gap
    sheet = np.full((height, width + gap + BAR_WIDTH, 3), 255, np.uint8)
    for j, tile in enumerate(tiles):
        y, x = (j // columns) * (th + gap), (j % columns) * (tw + gap)
        sheet[y:y + th, x:x + tw] = tile
    sheet[:, width + gap:] = _colorbar(height, "max")[:, BAR_GAP:]
    return sheet


# The marks of one layer's heads (marked_tiles' frames and words): green for the most local head, blue for the
# one that gives its own patch the most attention; neither is in inferno, nor the query's cyan.
MOST_LOCAL_COLOR = (0, 160, 0)
MOST_SELF_COLOR = (40, 90, 255)


def marked_tiles(image: np.ndarray, maps: np.ndarray, query: tuple[int, int] | None = None, cell: int = 112,
                 columns: int = 2, gap: int = 6, lines: Sequence[Sequence[tuple[str, tuple]]] | None = None,
                 frames: Sequence[Sequence[tuple]] | None = None, frame: int = 3) -> np.ndarray:
    """The heads' maps (H, g, g) of one layer as tiles, `columns` to a row, like head_tiles, each under
    several caption lines of its own colour (`lines[j]`: (text, rgb) pairs, padded to the longest) and framed
    in the colours of `frames[j]` (outermost first; `frame` px each, drawn in the gap around the tile).

    One colour bar on the right reads 0..max; each tile is coloured from 0 to its own max.
    """
    maps = np.asarray(maps)
    if maps.ndim != 3:
        raise ValueError(f"maps must be (heads, g, g), got shape {maps.shape}")
    heads = maps.shape[0]
    lines = [[(f"head {j}", _BLACK)] for j in range(heads)] if lines is None else [list(t) for t in lines]
    frames = [()] * heads if frames is None else [tuple(f) for f in frames]
    if len(lines) != heads or len(frames) != heads or columns < 1:
        raise ValueError(f"need {heads} caption lists, {heads} frame lists and columns >= 1, "
                         f"got {len(lines)}, {len(frames)} and {columns}")
    depth = max((len(f) for f in frames), default=0) * frame
    pad = max(gap, 2 * depth)  # room around each tile for its frames
    count = max((len(t) for t in lines), default=0)
    base = _resized(image, cell)
    tiles = []
    for tile, caption in zip(_overlays(base, maps, 0.6, query) if heads else [], lines, strict=True):
        for text, color in reversed(caption + [("", _BLACK)] * (count - len(caption))):
            tile = label_image(tile, text, color=color)
        tiles.append(tile)
    th, tw = (tiles[0].shape[:2] if tiles else (cell, cell))
    rows = -(-heads // columns)
    step_y, step_x = th + pad, tw + pad
    height, width = rows * step_y - pad + 2 * depth, min(columns, max(heads, 1)) * step_x - pad + 2 * depth
    sheet = np.full((height, width + gap + BAR_WIDTH, 3), 255, np.uint8)
    for j, (tile, colors) in enumerate(zip(tiles, frames, strict=True)):
        y, x = depth + (j // columns) * step_y, depth + (j % columns) * step_x
        sheet[y:y + th, x:x + tw] = tile
        for k, color in enumerate(colors):  # outermost first, each inside the last
            out = depth - k * frame
            y0, y1, x0, x1 = y - out, y + th + out, x - out, x + tw + out
            for ys, xs in ((slice(y0, y0 + frame), slice(x0, x1)), (slice(y1 - frame, y1), slice(x0, x1)),
                           (slice(y0, y1), slice(x0, x0 + frame)), (slice(y0, y1), slice(x1 - frame, x1))):
                sheet[ys, xs] = color
    sheet[:, width + gap:] = _colorbar(height, "max")[:, BAR_GAP:]
    return sheet


def side_by_side(images: Sequence[np.ndarray], titles: Sequence[str] | None = None, gap: int = 16) -> np.ndarray:
    """Pictures in one row on white, tops aligned, each under its own one-line title.

    One picture for several (model A's beside model B's) is one file to encode and send instead of many.
    """
    pictures = [_rgb(image) for image in images]
    if not pictures:
        raise ValueError("side_by_side needs at least one picture")
    if titles is not None:
        titles = list(titles)
        if len(titles) != len(pictures):
            raise ValueError(f"need {len(pictures)} titles, got {len(titles)}")
        pictures = [label_image(p, t) for p, t in zip(pictures, titles, strict=True)]
    height = max(p.shape[0] for p in pictures)
    width = sum(p.shape[1] for p in pictures) + gap * (len(pictures) - 1)
    out = np.full((height, width, 3), 255, np.uint8)
    x = 0
    for i, p in enumerate(pictures):
        if i:  # a thin grey rule down the middle of the gap tells whose picture is whose
            rule = min(gap, 2 - gap % 2)
            start = x - gap + (gap - rule) // 2
            out[:, start:start + rule] = 200
        out[:p.shape[0], x:x + p.shape[1]] = p
        x += p.shape[1] + gap
    return out


def stacked(images: Sequence[np.ndarray], gap: int = 12) -> np.ndarray:
    """Pictures one above the other on white, left-aligned, a thin grey rule in each gap: several views
    in one picture, one file to send."""
    pictures = [_rgb(image) for image in images]
    if not pictures:
        raise ValueError("stacked needs at least one picture")
    width = max(p.shape[1] for p in pictures)
    out = np.full((sum(p.shape[0] for p in pictures) + gap * (len(pictures) - 1), width, 3), 255, np.uint8)
    y = 0
    for i, p in enumerate(pictures):
        if i:
            out[y - gap // 2 - 1:y - gap // 2 + 1] = 200
        out[y:y + p.shape[0], :p.shape[1]] = p
        y += p.shape[0] + gap
    return out


def square(image: np.ndarray, size: int) -> np.ndarray:
    """The image squashed to size x size, as the model sees it; small images keep their pixels sharp."""
    small = max(image.shape[:2]) * 2 <= size
    return np.asarray(Image.fromarray(image).resize((size, size), Image.NEAREST if small else Image.BILINEAR))
