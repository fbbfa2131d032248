"""Evidence beyond attention: which patches a model's answer rests on (occlusion); how its answers hold up
when the image moves is explorer.analysis.robustness.

Every function takes a model as the app holds it (a `models.LoadedModel`), a `probe.Probe`, or a bare
explorer ViT (`keras.Model` from `models.build_vit` or a checkpoint); the patch grid comes from the model
itself, so any image size and patch size work. Images are (H, W, 3) raw pixels on the 0-255 scale
(uint8 or float) at the model's `image_size`, as `Probe` and `attention.analyze_pair` take them.

All copies of an image (occluded, shifted, mirrored) go through the model's compiled predict function
in one batched call per model (chunked only when many images are asked for at once), never one call per
copy; the logits alone are computed, not the attention maps.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from explorer.model.compiled import forward
from explorer.model.models import TOKENIZER
from explorer.model.probe import softmax

FILLS = ("mean", "blur")
TARGETS = ("top1", "label")
TOP_FRACTION = 0.10
# A total positive drop below this (in probability) is no evidence at all: float noise, not a signal.
MIN_EVIDENCE = 1e-6
MAX_BATCH = 1024  # copies per forward call when many images are asked for at once


# ------------------------------------------------------------------------------------------ the model


@dataclass(frozen=True)
class Geometry:
    """Where the model's patches lie on its raw input image.

    Attributes:
        image_size: side of the raw square input, pixels.
        grid: patches per side.
        edges: (grid + 1,) pixel edges of the patch rows (and columns) on the raw image; with a patch
            side that is not a whole number of raw pixels (a model that resizes its input), the edges
            are rounded to the nearest pixel.
    """

    image_size: int
    grid: int
    edges: tuple[int, ...]

    @classmethod
    def of(cls, image_size: int, grid: int) -> Geometry:
        edges = tuple(int(e) for e in np.rint(np.arange(grid + 1) * image_size / grid))
        return cls(int(image_size), int(grid), edges)

    @property
    def pixels_per_patch(self) -> float:
        return self.image_size / self.grid

    @property
    def centres(self) -> np.ndarray:
        """(grid,) centre of each patch row (and column), in raw pixels."""
        e = np.asarray(self.edges, np.float64)
        return (e[:-1] + e[1:]) / 2.0


class Classifier:
    """What these functions need of a model: its keras model, geometry, class names and lock."""

    def __init__(self, model):
        keras_model = getattr(model, "model", model)
        config = getattr(model, "config", None)
        if config is not None:
            self.geometry = Geometry.of(config.image_size, config.grid_size)
        else:
            try:
                tokens = keras_model.get_layer(TOKENIZER).output[0].shape[1]
            except (AttributeError, ValueError):
                raise ValueError(f"{getattr(keras_model, 'name', model)!r} is not an explorer ViT "
                                 f"(no {TOKENIZER!r} layer); pass a LoadedModel or a Probe") from None
            grid = math.isqrt(int(tokens))
            self.geometry = Geometry.of(int(keras_model.input_shape[1]), grid)
        self.keras = keras_model
        self.num_classes = int(keras_model.output_shape[-1])
        names = getattr(model, "class_names", None)
        self.class_names = list(names) if names else [f"class {i}" for i in range(self.num_classes)]
        self.lock = getattr(model, "lock", None)
        self.name = getattr(model, "label", None) or getattr(keras_model, "name", "model")

    def check(self, images: np.ndarray) -> np.ndarray:
        """(N, H, W, 3) float32 from one image or a batch, or a ValueError quoting the shape."""
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[None]
        size = self.geometry.image_size
        if images.ndim != 4 or images.shape[1:] != (size, size, 3):
            raise ValueError(f"{self.name} takes ({size}, {size}, 3) images, got {images.shape}")
        return images.astype(np.float32, copy=False)

    def probabilities(self, batch: np.ndarray) -> np.ndarray:
        """Softmax of one compiled forward call over the whole batch (logits only)."""
        run = forward(self.keras)
        if self.lock is None:
            logits = run(batch)
        else:
            with self.lock:  # one call at a time per loaded model, as the model store does
                logits = run(batch)
        return softmax(np.asarray(logits, np.float64))


def geometry(model) -> Geometry:
    """The patch geometry of a LoadedModel, Probe or explorer ViT on its raw input image."""
    return Classifier(model).geometry


# ------------------------------------------------------------------------------------------- occlusion


def gaussian_blur(image: np.ndarray, sigma: float) -> np.ndarray:
    """The image blurred by a separable Gaussian (reflecting at the border), float32, same shape."""
    image = np.asarray(image, np.float64)
    if sigma <= 0:
        return image.astype(np.float32)
    radius = max(1, int(math.ceil(3.0 * sigma)))
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    taps /= taps.sum()
    out = image
    for axis in (0, 1):
        pad = [(0, 0)] * out.ndim
        pad[axis] = (radius, radius)
        padded = np.pad(out, pad, mode="reflect")
        length = out.shape[axis]
        out = sum(w * np.take(padded, np.arange(k, k + length), axis=axis) for k, w in enumerate(taps))
    return out.astype(np.float32)


def fill_image(image: np.ndarray, fill: str, sigma: float | None = None, pixels_per_patch: float = 4.0) -> np.ndarray:
    """What an occluded window shows: the image's per-channel mean everywhere ("mean"), or the image
    blurred by a Gaussian of `sigma` pixels (default: one patch side) ("blur"); float32, image's shape."""
    image = np.asarray(image, np.float32)
    if fill == "mean":
        mean = image.reshape(-1, image.shape[-1]).astype(np.float64).mean(0)
        return np.broadcast_to(mean.astype(np.float32), image.shape).copy()
    if fill == "blur":
        return gaussian_blur(image, pixels_per_patch if sigma is None else float(sigma))
    raise ValueError(f"fill must be one of {FILLS}, got {fill!r}")


def window_masks(geo: Geometry, window: int) -> np.ndarray:
    """(K, H, W) bool: the pixels each window of `window` x `window` patches covers, the windows sliding
    one patch at a time, row-major (K = (grid - window + 1) ** 2)."""
    if not isinstance(window, (int, np.integer)) or not 1 <= window <= geo.grid:
        raise ValueError(f"window must be a whole number of patches from 1 to {geo.grid}, got {window!r}")
    positions = geo.grid - window + 1
    edges = np.asarray(geo.edges)
    pixels = np.arange(geo.image_size)
    start, stop = edges[:positions], edges[window:window + positions]
    inside = (pixels[None, :] >= start[:, None]) & (pixels[None, :] < stop[:, None])  # (positions, H)
    return (inside[:, None, :, None] & inside[None, :, None, :]).reshape(-1, geo.image_size, geo.image_size)


def spread_to_patches(window_drop: np.ndarray, window: int) -> np.ndarray:
    """Each patch's share of the window drops: the mean drop of every window that covers it.

    (P, P) window drops, P = grid - window + 1, -> (grid, grid); with window 1 it is the same map.
    """
    window_drop = np.asarray(window_drop, np.float64)
    positions = window_drop.shape[0]
    grid = positions + window - 1
    total = np.zeros((grid, grid))
    count = np.zeros((grid, grid))
    for dy in range(window):
        for dx in range(window):
            total[dy:dy + positions, dx:dx + positions] += window_drop
            count[dy:dy + positions, dx:dx + positions] += 1
    return total / count


@dataclass
class Concentration:
    """How concentrated an evidence map is, from its positive part d (drops that lowered the probability).

    Attributes:
        total: sum of d over patches (probability units).
        top_k: how many patches "the top fraction" is: max(1, round(fraction * patches)).
        share: sum of the top_k largest d / total, in [0, 1]; None when there is no evidence.
        spread: mean distance, in raw input pixels, of the drop mass from its centre of mass:
            sum_i d_i * |c_i - m| / total, with c_i patch i's centre and m = sum_i d_i c_i / total;
            0 when one patch carries everything; None when there is no evidence.
        centre: m as (y, x) raw pixels; None when there is no evidence.
        uniform_share, uniform_spread: the same two numbers for evidence spread evenly over all patches,
            the reference a reader compares against.
    """

    total: float
    top_fraction: float
    top_k: int
    share: float | None
    spread: float | None
    centre: tuple[float, float] | None
    uniform_share: float
    uniform_spread: float

    @property
    def has_evidence(self) -> bool:
        return self.share is not None


def concentration(drop: np.ndarray, geo: Geometry, top_fraction: float = TOP_FRACTION) -> Concentration:
    """Concentration statistics of a (grid, grid) drop map; a map with no positive drop (total below
    MIN_EVIDENCE) reports None for share, spread and centre instead of dividing by zero."""
    if not 0.0 < top_fraction <= 1.0:
        raise ValueError(f"top_fraction must be in (0, 1], got {top_fraction}")
    d = np.clip(np.asarray(drop, np.float64), 0.0, None)
    n = d.size
    k = max(1, int(round(top_fraction * n)))
    ys, xs = np.meshgrid(geo.centres, geo.centres, indexing="ij")

    def spread_of(weights):
        w = weights / weights.sum()
        cy, cx = float((w * ys).sum()), float((w * xs).sum())
        return float((w * np.hypot(ys - cy, xs - cx)).sum()), (cy, cx)

    uniform_spread, _ = spread_of(np.ones_like(ys))
    total = float(d.sum())
    if total < MIN_EVIDENCE:
        return Concentration(total, top_fraction, k, None, None, None, k / n, uniform_spread)
    share = float(np.sort(d.ravel())[::-1][:k].sum() / total)
    spread, centre = spread_of(d)
    return Concentration(total, top_fraction, k, share, spread, centre, k / n, uniform_spread)


@dataclass
class Occlusion:
    """One model's occlusion evidence for one image.

    Attributes:
        drop: (grid, grid) float64, per patch: the target's probability on the clean image minus on the
            image with the patch occluded (with window > 1: the mean over the windows covering the
            patch). Negative where occluding raised the probability.
        windows: (P, P) the drop of each window position (P = grid - window + 1); `drop` when window 1.
        target, target_name: the class whose probability is measured.
        target_rule: "top1" (the model's own answer on the clean image), "label" or "chosen".
        clean_probability: the target's probability on the clean image.
        top1, top1_name, top1_probability: the model's answer on the clean image.
        window, fill: the occluder: window x window patches, sliding one patch at a time; "mean" or "blur".
        geometry: the patch grid on the raw input image.
        concentration: see `Concentration`.
        seconds: the forward pass (for a batch of images, the call's time divided among its images).
    """

    drop: np.ndarray
    windows: np.ndarray
    target: int
    target_name: str
    target_rule: str
    clean_probability: float
    top1: int
    top1_name: str
    top1_probability: float
    window: int
    fill: str
    geometry: Geometry
    concentration: Concentration
    seconds: float = 0.0

    @property
    def has_evidence(self) -> bool:
        return self.concentration.has_evidence


def _targets(target, labels, count: int, num_classes: int) -> tuple[np.ndarray | None, str]:
    """Per-image class indices to measure (None: each image's top-1) and the rule's name."""
    if isinstance(target, str):
        if target == "top1":
            return None, "top1"
        if target == "label":
            if labels is None:
                raise ValueError("target 'label' needs the images' true labels")
            values, rule = np.broadcast_to(np.asarray(labels, np.int64), (count,)), "label"
        else:
            raise ValueError(f"target must be one of {TARGETS} or a class index, got {target!r}")
    else:
        values, rule = np.broadcast_to(np.asarray(target, np.int64), (count,)), "chosen"
    bad = values[(values < 0) | (values >= num_classes)]
    if bad.size:
        raise ValueError(f"class {int(bad[0])} is outside this model's {num_classes} classes")
    return values, rule


def occlusion_batch(model, images: np.ndarray, target="top1", labels=None, window: int = 1,
                    fill: str = "mean", sigma: float | None = None, top_fraction: float = TOP_FRACTION,
                    max_batch: int = MAX_BATCH) -> list[Occlusion]:
    """Occlusion evidence of one model for each of several images.

    Each image goes in as itself plus one copy per window position with the window's pixels replaced by
    `fill_image(image, fill, sigma)`; the copies of as many images as fit in `max_batch` go through one
    forward call (so one image is always one call).

    Args:
        model: a LoadedModel, a Probe or an explorer ViT.
        images: (N, H, W, 3) or one (H, W, 3) image, raw pixels at the model's image_size.
        target: "top1" (each image's own top-1 on the clean image), "label" (the `labels`), or a class
            index (or one per image).
        labels: the images' true labels (for target "label").
        window: occluder side in patches; windows slide one patch at a time and a patch's drop is the
            mean over the windows covering it.
        fill: "mean" (the image's per-channel mean) or "blur" (the image blurred, see `fill_image`).
        sigma: the blur's standard deviation in pixels (default: one patch side).
        top_fraction: the fraction of patches whose share of the drop `concentration` reports.
        max_batch: most copies per forward call.
    """
    m = Classifier(model)
    x = m.check(images)
    geo = m.geometry
    masks = window_masks(geo, window)
    copies_per_image = len(masks) + 1
    chosen, rule = _targets(target, labels, len(x), m.num_classes)
    per_call = max(1, max_batch // copies_per_image)
    positions = geo.grid - window + 1
    out = []
    for start in range(0, len(x), per_call):
        chunk = x[start:start + per_call]
        batch = np.empty((len(chunk), copies_per_image) + chunk.shape[1:], np.float32)
        for j, image in enumerate(chunk):
            filled = fill_image(image, fill, sigma, geo.pixels_per_patch)
            batch[j, 0] = image
            batch[j, 1:] = np.where(masks[..., None], filled[None], image[None])
        began = time.perf_counter()
        probs = m.probabilities(batch.reshape(-1, *chunk.shape[1:])).reshape(len(chunk), copies_per_image, -1)
        seconds = (time.perf_counter() - began) / len(chunk)
        for j in range(len(chunk)):
            clean = probs[j, 0]
            top1 = int(clean.argmax())
            t = top1 if chosen is None else int(chosen[start + j])
            windows = (clean[t] - probs[j, 1:, t]).reshape(positions, positions)
            drop = windows if window == 1 else spread_to_patches(windows, window)
            out.append(Occlusion(drop=drop, windows=windows, target=t, target_name=m.class_names[t],
                                 target_rule=rule, clean_probability=float(clean[t]), top1=top1,
                                 top1_name=m.class_names[top1], top1_probability=float(clean[top1]),
                                 window=int(window), fill=fill, geometry=geo,
                                 concentration=concentration(drop, geo, top_fraction), seconds=seconds))
    return out


def occlusion(model, image: np.ndarray, target="top1", label: int | None = None, window: int = 1,
              fill: str = "mean", sigma: float | None = None, top_fraction: float = TOP_FRACTION) -> Occlusion:
    """Occlusion evidence of one model for one (H, W, 3) image in one forward call; see occlusion_batch."""
    image = np.asarray(image)
    if image.ndim != 3:
        raise ValueError(f"occlusion takes one (H, W, 3) image, got shape {image.shape}")
    return occlusion_batch(model, image[None], target, None if label is None else [label], window, fill,
                           sigma, top_fraction, max_batch=10**9)[0]


@dataclass
class OcclusionPair:
    """Occlusion evidence of several models (A, B) for the same image, on one colour scale.

    Attributes:
        results: one Occlusion per model, in order.
        vmax: the largest drop over all the maps (0 when none is positive): colour every map 0..vmax.
    """

    results: list[Occlusion]
    vmax: float


def occlusion_pair(models, image: np.ndarray, target="top1", label: int | None = None, window: int = 1,
                   fill: str = "mean", sigma: float | None = None,
                   top_fraction: float = TOP_FRACTION) -> OcclusionPair:
    """Each model's occlusion evidence for one image, one forward call per model, the same rule for the
    target class: each model's own top-1 ("top1"), the true `label` ("label"), or a class index."""
    results = [occlusion(m, image, target, label, window, fill, sigma, top_fraction) for m in models]
    vmax = max([float(np.max(r.drop)) for r in results] + [0.0])
    return OcclusionPair(results, vmax)


def mean_concentration(results: list[Occlusion]) -> dict:
    """Averages over images that have evidence: share, spread (px) and their uniform references."""
    with_evidence = [r.concentration for r in results if r.has_evidence]
    if not with_evidence:
        return {"images": len(results), "with_evidence": 0, "share": None, "spread": None,
                "uniform_share": None, "uniform_spread": None}
    return {"images": len(results), "with_evidence": len(with_evidence),
            "share": float(np.mean([c.share for c in with_evidence])),
            "spread": float(np.mean([c.spread for c in with_evidence])),
            "uniform_share": with_evidence[0].uniform_share, "uniform_spread": with_evidence[0].uniform_spread}


# ------------------------------------------------------------------------------------------- pictures


_RULES = {"top1": "its top-1", "label": "true label", "chosen": "chosen class"}


def occlusion_caption(result: Occlusion) -> str:
    """One model's line under its map: the class measured, its clean probability, the concentration."""
    from explorer.analysis.render_evidence import concentration_text
    c = result.concentration
    return (f"p({result.target_name}) = {result.clean_probability:.2f} ({_RULES[result.target_rule]}); "
            + concentration_text(c.share, c.spread, c.top_fraction, c.uniform_share, c.uniform_spread))


def occlusion_picture(pair: OcclusionPair, image: np.ndarray, titles, size: int = 224) -> np.ndarray:
    """The pair's maps over `image` (the model input or a larger preview of it), side by side on the
    shared scale 0..vmax, each under its title and caption, the centre of mass and spread marked."""
    from explorer.analysis.render_evidence import occlusion_pair_picture
    results = pair.results
    return occlusion_pair_picture(image, [r.drop for r in results], pair.vmax, list(titles),
                                  [occlusion_caption(r) for r in results],
                                  centres=[r.concentration.centre for r in results],
                                  spreads=[r.concentration.spread for r in results],
                                  image_size=results[0].geometry.image_size if results else None, size=size)
