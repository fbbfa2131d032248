"""Training-time augmentation on uint8 batches: random crop (after padding) and flip, mixup and cutmix.

Each augmentation is drawn first (`draw_crop_flip`, `draw_mix`: a few numbers per image, from the batch's own
generator) and then applied. The numpy batches apply the draws here; the device batches
(explorer.data.device_batches) send the same draws to the accelerator and apply them inside the compiled step, so
both paths draw exactly the same augmentations for the same (seed, epoch, step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CropFlip:
    """Per image: the crop's top-left corner in the padded image, and whether it is flipped left-right."""

    dy: np.ndarray
    dx: np.ndarray
    flips: np.ndarray
    pad: int


@dataclass(frozen=True)
class Mix:
    """One batch's mix: each image with `partner[i]`; mixup blends with weight `lam`, CutMix pastes the
    partner's `box` (y0, y1, x0, x1) and `lam` is the area left of the image's own."""

    method: str
    partner: np.ndarray
    lam: float
    box: tuple[int, int, int, int] | None = None


def draw_crop_flip(rng: np.random.Generator, n: int, pad: int = 4, flip: bool = True) -> CropFlip:
    dy = rng.integers(0, 2 * pad + 1, n) if pad else np.zeros(n, int)
    dx = rng.integers(0, 2 * pad + 1, n) if pad else np.zeros(n, int)
    flips = rng.random(n) < 0.5 if flip else np.zeros(n, bool)
    return CropFlip(dy, dx, flips, pad)


def apply_crop_flip(images: np.ndarray, draw: CropFlip) -> np.ndarray:
    n, h, w, _ = images.shape
    out = np.empty_like(images)
    pad = draw.pad
    if pad:
        padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect")
        for i in range(n):
            out[i] = padded[i, draw.dy[i]:draw.dy[i] + h, draw.dx[i]:draw.dx[i] + w]
    else:
        out[:] = images
    out[draw.flips] = out[draw.flips, :, ::-1]
    return out


def augment_batch(images: np.ndarray, rng: np.random.Generator, pad: int = 4,
                  flip: bool = True) -> np.ndarray:
    """Random translation (reflect-pad then crop back) and horizontal flip of a uint8 batch."""
    return apply_crop_flip(images, draw_crop_flip(rng, len(images), pad, flip))


def draw_mix(rng: np.random.Generator, n: int, size: tuple[int, int], mixup_alpha: float = 0.0,
             cutmix_alpha: float = 0.0, prob: float = 1.0) -> Mix | None:
    """A batch's mix (None: not mixed). With probability ``prob`` the batch is mixed; when both alphas are
    set, each mixed batch uses one of the two at random (as DeiT does). CutMix's box covers a fraction
    1 - lam of the image, and lam is then corrected to the box's exact clipped area."""
    methods = [m for m, a in (("mixup", mixup_alpha), ("cutmix", cutmix_alpha)) if a > 0]
    if not methods or n < 2 or rng.random() >= prob:
        return None
    method = methods[rng.integers(len(methods))]
    partner = rng.permutation(n)
    if method == "mixup":
        return Mix(method, partner, float(rng.beta(mixup_alpha, mixup_alpha)))
    lam = float(rng.beta(cutmix_alpha, cutmix_alpha))
    h, w = size
    cut = math.sqrt(1.0 - lam)
    ch, cw = int(round(h * cut)), int(round(w * cut))
    cy, cx = int(rng.integers(h)), int(rng.integers(w))
    y0, y1 = max(cy - ch // 2, 0), min(cy + ch - ch // 2, h)
    x0, x1 = max(cx - cw // 2, 0), min(cx + cw - cw // 2, w)
    return Mix(method, partner, 1.0 - (y1 - y0) * (x1 - x0) / (h * w), (y0, y1, x0, x1))


def mix_labels(labels: np.ndarray, mix: Mix | None) -> np.ndarray:
    """Labels mixed with the images' weight, so they stay distributions."""
    if mix is None:
        return labels
    return (mix.lam * labels + (1.0 - mix.lam) * labels[mix.partner]).astype(labels.dtype, copy=False)


def apply_mix(images: np.ndarray, mix: Mix | None) -> np.ndarray:
    if mix is None:
        return images
    if mix.method == "mixup":
        mixed = mix.lam * images + (1.0 - mix.lam) * images[mix.partner]
    else:
        y0, y1, x0, x1 = mix.box
        mixed = images.copy()
        mixed[:, y0:y1, x0:x1] = images[mix.partner, y0:y1, x0:x1]
    return mixed.astype(images.dtype, copy=False)


def mix_batch(images: np.ndarray, labels: np.ndarray, rng: np.random.Generator, mixup_alpha: float = 0.0,
              cutmix_alpha: float = 0.0, prob: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Mixup or CutMix of a float batch and its one-hot labels, each image with a shuffled partner (see
    draw_mix). Mixup blends whole images with weight lam ~ Beta(a, a); CutMix pastes a box of the partner."""
    mix = draw_mix(rng, len(images), images.shape[1:3], mixup_alpha, cutmix_alpha, prob)
    return apply_mix(images, mix), mix_labels(labels, mix)
