"""Shift and flip robustness: how each model's answers hold up when the image moves by 1..S pixels in each
direction (zero or edge padding) or is mirrored, over many test images, and a strip of one image's shifted
copies with each model's answer. All copies of the images go through one batched call per model (chunked
when many); shift 0 is the unshifted image exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from explorer.analysis.evidence import MAX_BATCH, Classifier
from explorer.analysis.trust import ReportCache

PADDINGS = ("zero", "edge")
# (rows, cols) the content moves by per pixel of shift.
DIRECTIONS = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}
AXES = ("horizontal", "vertical")


def shift(images: np.ndarray, dy: int, dx: int, padding: str = "zero") -> np.ndarray:
    """The content moved down by dy and right by dx pixels (negative: up, left) in an (..., H, W, C)
    array: out[..., i, j, :] = images[..., i - dy, j - dx, :] inside the image; outside, 0 ("zero") or
    the nearest border pixel ("edge"). A shift of 0 returns the images unchanged (a copy)."""
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")
    images = np.asarray(images)
    h, w = images.shape[-3:-1]
    rows = np.arange(h) - int(dy)
    cols = np.arange(w) - int(dx)
    out = images[..., np.clip(rows, 0, h - 1)[:, None], np.clip(cols, 0, w - 1)[None, :], :]
    if padding == "zero":
        outside = ((rows < 0) | (rows >= h))[:, None] | ((cols < 0) | (cols >= w))[None, :]
        out[..., outside, :] = 0
    return out


def flip(images: np.ndarray) -> np.ndarray:
    """The images mirrored left to right, (..., H, W, C)."""
    return np.ascontiguousarray(np.asarray(images)[..., ::-1, :])


@dataclass
class Robustness:
    """One model's answers over a set of images moved by 0..max_shift pixels in each direction, and
    mirrored.

    Attributes:
        shifts: (S + 1,) pixels, 0..S.
        directions: the direction names, order of the first axis of `top1`.
        padding: "zero" or "edge".
        top1: (directions, S + 1, N) the model's answer for each image at each shift; shift 0 is the
            unshifted image's answer in every direction.
        flip_top1: (N,) answers on the mirrored images.
        labels: (N,) true labels, or None.
        seconds: the forward calls, in all.
    """

    shifts: np.ndarray
    directions: tuple[str, ...]
    padding: str
    top1: np.ndarray
    flip_top1: np.ndarray
    labels: np.ndarray | None = None
    seconds: float = 0.0

    @property
    def count(self) -> int:
        return int(self.top1.shape[-1])

    @property
    def max_shift(self) -> int:
        return int(self.shifts[-1])

    @property
    def base_top1(self) -> np.ndarray:
        return self.top1[0, 0]

    @property
    def unchanged_by_direction(self) -> np.ndarray:
        """(directions, S + 1) share of images whose answer equals their unshifted answer."""
        return (self.top1 == self.base_top1).mean(-1)

    @property
    def unchanged(self) -> np.ndarray:
        """(S + 1,) unchanged top-1, averaged over the directions."""
        return self.unchanged_by_direction.mean(0)

    @property
    def accuracy_by_direction(self) -> np.ndarray | None:
        """(directions, S + 1) top-1 accuracy; None without labels."""
        return None if self.labels is None else (self.top1 == self.labels).mean(-1)

    @property
    def accuracy(self) -> np.ndarray | None:
        """(S + 1,) top-1 accuracy averaged over the directions; None without labels."""
        by_direction = self.accuracy_by_direction
        return None if by_direction is None else by_direction.mean(0)

    @property
    def flip_unchanged(self) -> float:
        return float((self.flip_top1 == self.base_top1).mean())

    @property
    def flip_accuracy(self) -> float | None:
        return None if self.labels is None else float((self.flip_top1 == self.labels).mean())


def _settings(max_shift: int, directions) -> list[tuple[int, int] | str]:
    settings: list[tuple[int, int] | str] = [(0, 0)]
    for name in directions:
        dy, dx = DIRECTIONS[name]
        settings += [(dy * s, dx * s) for s in range(1, max_shift + 1)]
    return settings + ["flip"]


def shift_robustness(model, images: np.ndarray, labels=None, max_shift: int = 4, padding: str = "zero",
                     directions=tuple(DIRECTIONS), batch_size: int = MAX_BATCH, progress=None) -> Robustness:
    """Top-1 of one model on each image shifted by 0..max_shift pixels in each direction and mirrored.

    The images go in chunks, each chunk's every setting (the unshifted image, each direction and shift,
    the mirror) in one forward call of at most about `batch_size` copies. The unshifted answers are
    computed once and are the shift-0 entry of every direction. `progress(done, total)` is called after
    each chunk.
    """
    if not isinstance(max_shift, (int, np.integer)) or max_shift < 0:
        raise ValueError(f"max_shift must be a whole number of pixels >= 0, got {max_shift!r}")
    unknown = [d for d in directions if d not in DIRECTIONS]
    if unknown or not directions:
        raise ValueError(f"directions must be some of {tuple(DIRECTIONS)}, got {directions!r}")
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")
    m = Classifier(model)
    x = m.check(images)
    if labels is not None:
        labels = np.asarray(labels, np.int64).reshape(-1)
        if len(labels) != len(x):
            raise ValueError(f"{len(x)} images but {len(labels)} labels")
    settings = _settings(int(max_shift), directions)
    per_call = max(1, batch_size // len(settings))
    answers = np.empty((len(settings), len(x)), np.int64)
    seconds = 0.0
    for start in range(0, len(x), per_call):
        chunk = x[start:start + per_call]
        batch = np.stack([flip(chunk) if s == "flip" else (chunk if s == (0, 0) else shift(chunk, *s, padding))
                          for s in settings])
        began = time.perf_counter()
        probs = m.probabilities(batch.reshape(-1, *chunk.shape[1:]))
        seconds += time.perf_counter() - began
        answers[:, start:start + len(chunk)] = probs.reshape(len(settings), len(chunk), -1).argmax(-1)
        if progress is not None:
            progress(start + len(chunk), len(x))
    shifted = answers[1:-1].reshape(len(directions), int(max_shift), len(x))
    top1 = np.concatenate([np.broadcast_to(answers[0], (len(directions), 1, len(x))), shifted], axis=1)
    return Robustness(shifts=np.arange(int(max_shift) + 1), directions=tuple(directions), padding=padding,
                      top1=top1, flip_top1=answers[-1], labels=labels, seconds=seconds)


def robustness_pair(models, images: np.ndarray, labels=None, max_shift: int = 4, padding: str = "zero",
                    batch_size: int = MAX_BATCH) -> list[Robustness]:
    """shift_robustness of each model on the same images and settings."""
    return [shift_robustness(m, images, labels, max_shift, padding, batch_size=batch_size) for m in models]


class PairCurves:
    """robustness_pair's curves, computed once per pair and test set (the models named by their checkpoints'
    identities, models.LoadedModel.identity), the last `capacity` kept: what the Evidence tab shows."""

    def __init__(self, capacity: int = 16):
        self._cache = ReportCache(capacity)

    def get(self, models, dataset: str, images: np.ndarray, labels, max_shift: int = 4,
            padding: str = "zero") -> list[Robustness]:
        key = (tuple(m.identity for m in models), dataset, len(images), max_shift, padding)
        found = self._cache.get(key)
        if found is None:
            found = robustness_pair(models, images, labels, max_shift, padding)
            self._cache.put(key, found)
        return found


@dataclass
class StripAnswers:
    """One model's answers on a ShiftStrip's copies: (K,) each."""

    top1: np.ndarray
    names: list[str]
    probability: np.ndarray          # of its answer
    clean_class_probability: np.ndarray  # of its answer on the unshifted image


@dataclass
class ShiftStrip:
    """Shifted copies of one image (and its mirror) with each model's answer.

    Attributes:
        offsets: (K,) pixels the content moved along `axis` (negative: left or up); the mirror, when
            asked for, is the last copy, with offset 0 and the label "flip".
        labels: (K,) short names of the copies: "-4 px" .. "0 px" .. "+4 px", "flip".
        images: (K, H, W, 3) uint8, the copies as the models saw them.
        answers: one StripAnswers per model, in order.
    """

    axis: str
    padding: str
    offsets: np.ndarray
    labels: list[str]
    images: np.ndarray
    answers: list[StripAnswers] = field(default_factory=list)

    @property
    def centre(self) -> int:
        """Index of the unshifted copy."""
        return int(np.flatnonzero(self.offsets == 0)[0])


def shift_strip(models, image: np.ndarray, max_shift: int = 4, padding: str = "zero", axis: str = "horizontal",
                with_flip: bool = True) -> ShiftStrip:
    """The image moved by -max_shift..+max_shift pixels along `axis` (and mirrored), with each model's
    top-1 and its probability on every copy; one forward call per model."""
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    if not isinstance(max_shift, (int, np.integer)) or max_shift < 0:
        raise ValueError(f"max_shift must be a whole number of pixels >= 0, got {max_shift!r}")
    image = np.asarray(image)
    offsets = list(range(-int(max_shift), int(max_shift) + 1))
    copies = [shift(image, *((0, o) if axis == "horizontal" else (o, 0)), padding) for o in offsets]
    labels = [f"{o:+d} px" if o else "0 px" for o in offsets]
    if with_flip:
        copies.append(flip(image))
        offsets.append(0)
        labels.append("flip")
    stack = np.stack(copies)
    strip = ShiftStrip(axis, padding, np.asarray(offsets), labels,
                       np.clip(np.rint(stack), 0, 255).astype(np.uint8) if stack.dtype != np.uint8 else stack)
    centre = strip.centre
    for model in models:
        m = Classifier(model)
        probs = m.probabilities(m.check(stack))
        top1 = probs.argmax(-1)
        strip.answers.append(StripAnswers(top1=top1, names=[m.class_names[i] for i in top1],
                                          probability=probs[np.arange(len(top1)), top1],
                                          clean_class_probability=probs[:, top1[centre]]))
    return strip


# ------------------------------------------------------------------------------------------- pictures


def strip_picture(strip: ShiftStrip, tags="AB", cell: int = 80, per_row: int | None = None) -> np.ndarray:
    """The strip's copies in a row (rows of at most `per_row`), each model's answer (tagged "A", "B", ...)
    under each copy."""
    from explorer.analysis.render_evidence import shift_strip_picture
    # Not strict: the default tags name a pair, and one model alone takes only "A".
    answers = [(tag, a.names, a.probability) for tag, a in zip(tags, strip.answers, strict=False)]
    return shift_strip_picture(strip.images, strip.labels, answers, strip.centre, cell=cell, per_row=per_row)
