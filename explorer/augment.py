"""Training-time augmentation on uint8 batches: random crop (after padding) and flip, mixup and cutmix."""

from __future__ import annotations

import math

import numpy as np


def augment_batch(images: np.ndarray, rng: np.random.Generator, pad: int = 4,
                  flip: bool = True) -> np.ndarray:
    """Random translation (reflect-pad then crop back) and horizontal flip of a uint8 batch."""
    n, h, w, _ = images.shape
    out = np.empty_like(images)
    if pad:
        padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect")
        dy = rng.integers(0, 2 * pad + 1, n)
        dx = rng.integers(0, 2 * pad + 1, n)
        for i in range(n):
            out[i] = padded[i, dy[i]:dy[i] + h, dx[i]:dx[i] + w]
    else:
        out[:] = images
    if flip:
        flips = rng.random(n) < 0.5
        out[flips] = out[flips, :, ::-1]
    return out


def mix_batch(images: np.ndarray, labels: np.ndarray, rng: np.random.Generator, mixup_alpha: float = 0.0,
              cutmix_alpha: float = 0.0, prob: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Mixup or CutMix of a float batch and its one-hot labels, each image with a shuffled partner.

    With probability ``prob`` the batch is mixed; when both alphas are set, each mixed batch uses one
    of the two at random (as DeiT does). Mixup blends whole images with weight lam ~ Beta(a, a); CutMix
    pastes a box of the partner covering a fraction 1 - lam of the image, and lam is then corrected to
    the box's exact clipped area. Labels are mixed with the same lam, so they stay distributions.
    """
    methods = [m for m, a in (("mixup", mixup_alpha), ("cutmix", cutmix_alpha)) if a > 0]
    if not methods or len(images) < 2 or rng.random() >= prob:
        return images, labels
    method = methods[rng.integers(len(methods))]
    partner = rng.permutation(len(images))
    if method == "mixup":
        lam = float(rng.beta(mixup_alpha, mixup_alpha))
        mixed = lam * images + (1.0 - lam) * images[partner]
    else:
        lam = float(rng.beta(cutmix_alpha, cutmix_alpha))
        h, w = images.shape[1:3]
        cut = math.sqrt(1.0 - lam)
        ch, cw = int(round(h * cut)), int(round(w * cut))
        cy, cx = int(rng.integers(h)), int(rng.integers(w))
        y0, y1 = max(cy - ch // 2, 0), min(cy + ch - ch // 2, h)
        x0, x1 = max(cx - cw // 2, 0), min(cx + cw - cw // 2, w)
        mixed = images.copy()
        mixed[:, y0:y1, x0:x1] = images[partner, y0:y1, x0:x1]
        lam = 1.0 - (y1 - y0) * (x1 - x0) / (h * w)
    return mixed.astype(images.dtype, copy=False), (lam * labels + (1.0 - lam) * labels[partner]).astype(
        labels.dtype, copy=False)
