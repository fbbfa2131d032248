"""Pictures for the evidence views: occlusion maps over the image (A beside B on one colour scale), the
shift and flip robustness plot, and the strip of an image's shifted copies with each model's answer.

numpy/PIL for the per-request pictures, matplotlib for the plot, in render's conventions (its colormap,
colour bar, captions, model colours); nothing here imports keras or the models. The inputs are plain
arrays and numbers (what `explorer.analysis.evidence` returns), so a test draws them without a model.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from PIL import Image, ImageDraw

from explorer.analysis.plots import _figure, _label_axes, _no_data, model_color
from explorer.analysis.render import QUERY_COLOR, _font, _rgb, _text_mask, attention_overlay, label_image, side_by_side

_WHITE = (255, 255, 255)
_CHANGED = (255, 228, 225)  # the pale red behind an answer that differs from the unshifted image's
_CENTRE = (225, 225, 225)   # the grey behind the unshifted copy's label


def _hex_rgb(color: str) -> tuple[int, int, int]:
    color = color.lstrip("#")
    return tuple(int(color[i:i + 2], 16) for i in (0, 2, 4))


def _base(image: np.ndarray, size: int) -> np.ndarray:
    """The image at size x size: nearest when it is small (its pixels stay sharp), else bilinear."""
    rgb = _rgb(image)
    if rgb.shape[:2] == (size, size):
        return rgb
    small = max(rgb.shape[:2]) * 2 <= size
    return np.asarray(Image.fromarray(rgb).resize((size, size), Image.NEAREST if small else Image.BILINEAR))


@functools.lru_cache(maxsize=1024)
def _text_width(text: str) -> float:
    return _font().getlength(text)


def _wrap(text: str, width: int) -> list[str]:
    """`text` broken at spaces into lines no wider than `width` pixels in the app's font; words are set
    two spaces apart, since the font's space is 2 px wide and one reads as none."""
    space = _text_width("  ")
    lines: list[str] = []
    used = 0.0
    for word in text.split():
        w = _text_width(word)
        # label_image leaves a 3 px margin each side; words are measured once and cached.
        if lines and used + space + w + 6 <= width:
            lines[-1] = f"{lines[-1]}  {word}"
            used += space + w
        else:
            lines.append(word)
            used = w
    return lines or [""]


def captioned(picture: np.ndarray, text: str, width: int | None = None) -> np.ndarray:
    """The picture under `text`, wrapped to the picture's width (or `width`) in as many lines as needed."""
    out = _rgb(picture)
    for line in reversed(_wrap(text, width or out.shape[1])):
        out = label_image(out, line)
    return out


def concentration_text(share: float | None, spread: float | None, top_fraction: float = 0.1,
                       uniform_share: float | None = None, uniform_spread: float | None = None) -> str:
    """One line saying how concentrated a model's evidence is, with the even-spread reference if given."""
    if share is None or spread is None:
        return "evidence: no patch lowers the probability when occluded"
    even_share = f" (even: {100 * uniform_share:.0f}%)" if uniform_share is not None else ""
    even_spread = f" (even: {uniform_spread:.1f} px)" if uniform_spread is not None else ""
    return (f"evidence: top {100 * top_fraction:.0f}% of patches carry {100 * share:.0f}% of the drop{even_share}; "
            f"spread {spread:.1f} px from its centre{even_spread}")


def occlusion_overlay(image: np.ndarray, drop: np.ndarray, vmax: float | None = None, size: int = 224,
                      alpha: float = 0.6, centre: tuple[float, float] | None = None, spread: float | None = None,
                      image_size: int | None = None, colorbar: bool = True) -> np.ndarray:
    """A (g, g) drop map over the image at size x size, coloured 0..vmax (default: its max), nearest
    upscaled so each patch is one flat cell; negative drops (occluding raised the probability) show as 0.

    With `centre` ((y, x) in pixels of the model's `image_size`-wide input, default the image's width) a
    cyan cross marks the drop's centre of mass, and with `spread` a cyan circle of that radius around it.
    """
    drop = np.asarray(drop, np.float64)
    if vmax is None:
        vmax = max(float(np.max(drop)), 0.0)
    out = attention_overlay(_base(image, size), np.clip(drop, 0.0, None), size=size, alpha=alpha, vmax=vmax,
                            colorbar=colorbar)
    if centre is not None:
        scale = size / float(image_size or np.asarray(image).shape[1])
        cy, cx = centre[0] * scale, centre[1] * scale
        canvas = Image.fromarray(out[:, :size])  # drawn on the map only, never on the colour bar
        draw = ImageDraw.Draw(canvas)
        arm = max(4, size // 40)
        draw.line([(cx - arm, cy), (cx + arm, cy)], fill=QUERY_COLOR, width=2)
        draw.line([(cx, cy - arm), (cx, cy + arm)], fill=QUERY_COLOR, width=2)
        if spread is not None and spread * scale >= 2:
            r = spread * scale
            draw.ellipse([(cx - r, cy - r), (cx + r, cy + r)], outline=QUERY_COLOR, width=1)
        out[:, :size] = np.asarray(canvas)
    return out


def occlusion_pair_picture(image: np.ndarray, maps: Sequence[np.ndarray], vmax: float, titles: Sequence[str],
                           captions: Sequence[str] = (), centres: Sequence | None = None,
                           spreads: Sequence | None = None, image_size: int | None = None,
                           size: int = 224) -> np.ndarray:
    """Each model's drop map over the same image, side by side, all coloured 0..vmax (one shared scale,
    each with its colour bar), each under its title and its wrapped caption line(s)."""
    if len(titles) != len(maps):
        raise ValueError(f"need {len(maps)} titles, got {len(titles)}")
    captions = list(captions) or [""] * len(maps)
    if len(captions) != len(maps):
        raise ValueError(f"need {len(maps)} captions, got {len(captions)}")
    centres = list(centres) if centres is not None else [None] * len(maps)
    spreads = list(spreads) if spreads is not None else [None] * len(maps)
    pictures = [occlusion_overlay(image, drop, vmax, size, centre=c, spread=s, image_size=image_size)
                for drop, c, s in zip(maps, centres, spreads, strict=True)]
    pictures = [captioned(p, text) if text else p for p, text in zip(pictures, captions, strict=True)]
    return side_by_side(pictures, titles)


def plot_shift_robustness(per_model: dict, title: str | None = None) -> Figure:
    """Top-1 accuracy and the share of unchanged top-1 against the shift in pixels, one colour per model
    (the app's model colours), the band behind each line spanning its four directions; the horizontal
    flip is a star at the right end of each panel.

    Each value of `per_model` has `shifts`, `accuracy` (or None), `unchanged`, `accuracy_by_direction`,
    `unchanged_by_direction`, `flip_accuracy`, `flip_unchanged` and `padding`: an evidence.Robustness.
    """
    fig = _figure((8.0, 3.4))
    if not per_model:
        return _no_data(fig, "no models")
    axes = fig.subplots(1, 2)
    panels = ((axes[0], "accuracy", "top-1 accuracy"), (axes[1], "unchanged", "unchanged top-1 (share)"))
    shown_any = [False, False]
    flip_x = None
    for k, (name, r) in enumerate(per_model.items()):
        color = model_color(k)
        shifts = np.asarray(r.shifts)
        flip_x = float(shifts[-1]) + 1.0
        for p, (ax, key, _) in enumerate(panels):
            mean = getattr(r, key)
            if mean is None:
                continue
            shown_any[p] = True
            by_direction = np.asarray(getattr(r, f"{key}_by_direction"))
            ax.fill_between(shifts, by_direction.min(0), by_direction.max(0), color=color, alpha=0.15, linewidth=0)
            ax.plot(shifts, mean, color=color, marker="o", markersize=4, label=name)
            flipped = getattr(r, f"flip_{key}")
            ax.plot([flip_x], [flipped], color=color, marker="*", markersize=11, linestyle="none")
    padding = getattr(next(iter(per_model.values())), "padding", "")
    for p, (ax, _key, ylabel) in enumerate(panels):
        if not shown_any[p]:
            ax.text(0.5, 0.5, "no labels", ha="center", va="center", transform=ax.transAxes, color="0.35")
        _label_axes(ax, f"shift (pixels, {padding} padding)" if padding else "shift (pixels)", ylabel)
        if flip_x is not None:
            ticks = list(range(int(flip_x))) + [flip_x]
            ax.set_xticks(ticks, [str(t) for t in range(int(flip_x))] + ["flip"])
    if shown_any[0]:
        axes[0].legend(fontsize="small")
    elif shown_any[1]:
        axes[1].legend(fontsize="small")
    if title:
        fig.suptitle(title)
    return fig


def shift_strip_picture(images: np.ndarray, copy_labels: Sequence[str],
                        answers: Sequence[tuple[str, Sequence[str], Sequence[float]]], centre: int = 0,
                        cell: int = 80, gap: int = 4, per_row: int | None = None) -> np.ndarray:
    """A row of an image's copies (nearest upscaled to `cell` px), each under its label ("-2 px", "flip")
    and over one line per model: "A: cat 83%" in the model's colour, on pale red where the answer
    differs from the one on copy `centre` (the unshifted image). With `per_row`, the copies are set in
    rows of at most that many, so that a narrow page shows the picture, and its labels, near full size.

    `answers` holds (tag, class name per copy, probability per copy) for each model.
    """
    images = np.asarray(images)
    count = len(images)
    if len(copy_labels) != count or any(len(names) != count or len(probs) != count for _, names, probs in answers):
        raise ValueError(f"need a label and every model's answer for each of the {count} copies")
    reference = [list(names)[centre] for _, names, _ in answers]  # each model's answer on the unshifted copy
    per_row = per_row if per_row and per_row < count else count
    rows = []
    for start in range(0, count, per_row):
        part = slice(start, start + per_row)
        here = [(tag, list(names)[part], list(probs)[part]) for tag, names, probs in answers]
        rows.append(_strip_row(images[part], list(copy_labels)[part], here, centre - start, reference, cell, gap))
    width = max(r.shape[1] for r in rows)
    out = np.full((sum(r.shape[0] for r in rows) + 2 * gap * (len(rows) - 1), width, 3), 255, np.uint8)
    y = 0
    for r in rows:
        out[y:y + r.shape[0], :r.shape[1]] = r
        y += r.shape[0] + 2 * gap
    return out


def _strip_row(images, copy_labels, answers, shaded: int, reference: list[str], cell: int, gap: int) -> np.ndarray:
    """One row of the strip: copy `shaded` (when in this row) is the unshifted one; an answer other than
    the model's `reference` one is marked."""
    count = len(images)
    line = _text_mask("Ag").shape[0] + 4
    width = count * (cell + gap) - gap
    height = line + cell + len(answers) * line + 2
    out = np.full((height, width, 3), 255, np.uint8)
    for i in range(count):
        x = i * (cell + gap)
        out[line:line + cell, x:x + cell] = _base(images[i], cell)
        # Two spaces between words: the font's space is 2 px wide. The unshifted copy's label is shaded.
        label = copy_labels[i].replace(" ", "  ")
        pieces = [(label_image(np.zeros((0, cell, 3), np.uint8), label, margin=2,
                               background=_CENTRE if i == shaded else _WHITE), 0)]
        for k, (tag, names, probs) in enumerate(answers):
            background = _CHANGED if names[i] != reference[k] else _WHITE
            text = f"{tag}:  {names[i].replace(' ', '  ')}  {100 * float(probs[i]):.0f}%"
            strip = label_image(np.zeros((0, cell, 3), np.uint8), text, background=background,
                                color=_hex_rgb(model_color(k)), margin=2)
            pieces.append((strip, line + cell + k * line))
        for strip, y in pieces:
            h = min(strip.shape[0], out.shape[0] - y, line)
            out[y:y + h, x:x + cell] = strip[:h]
    return out
