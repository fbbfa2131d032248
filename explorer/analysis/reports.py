"""Two models over many test images: where they disagree (accuracies, per-class top-1, the images), and how
local their attention is (mean distance and entropy per layer). The Compare and Attention tabs show these;
tests and benchmarks call them without a server.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.core.formatting import pct
from explorer.model.predict import Accuracy, accuracy_metrics, predict_logits
from explorer.model.probe import attention_entropy, mean_attention_distance

TOP5_FROM = 6      # with five classes or fewer the top-5 always holds the true class: it says nothing
SMALL_SPLIT = 50   # a held-out split smaller than this moves its accuracy in steps too coarse to read as a %


def without_top5(columns: list[str], rows: list[list], classes: int) -> tuple[list[str], list[list]]:
    """A result table's columns and rows, without its top-5 columns when there are fewer than six classes."""
    if classes >= TOP5_FROM:
        return list(columns), [list(r) for r in rows]
    keep = [i for i, c in enumerate(columns) if "top-5" not in c]
    return [columns[i] for i in keep], [[r[i] for i in keep] for r in rows]


def small_splits(splits: dict[str, int | None]) -> str:
    """A sentence naming each held-out split (name -> images) too small to read a percentage from, with
    what one image is worth: "validation: 10 images, each worth 10 points"; empty when none is."""
    small = [f"{name}: {n} image{'s' if n != 1 else ''}, each worth {100 / n:.3g} points"
             for name, n in splits.items() if n and n < SMALL_SPLIT]
    if not small:
        return ""
    return ("⚠ Small held-out split" + ("s" if len(small) > 1 else "") + ": " + "; ".join(small)
            + ". Its accuracy moves in steps that large: read differences smaller than a step as noise.")


@dataclass
class Disagreements:
    """Models A and B on the first `count` test images of one dataset."""

    dataset: str
    count: int
    sample: bool                 # the images are the bundled sample
    metrics: tuple[Accuracy, Accuracy]  # of A and of B
    predictions: np.ndarray      # (2, count) top-1 class of A and of B
    labels: np.ndarray           # (count,)
    class_names: list[str]

    @property
    def differ(self) -> np.ndarray:
        """Indices of the images where A's top-1 is not B's."""
        return np.flatnonzero(self.predictions[0] != self.predictions[1])

    def summary(self) -> str:
        (m_a, m_b), (p_a, p_b), y, differ = self.metrics, self.predictions, self.labels, self.differ
        where = " (bundled with the app)" if self.sample else ""
        neither = int(((p_a[differ] != y[differ]) & (p_b[differ] != y[differ])).sum())
        return (f"On the first **{self.count}** {self.dataset} test images{where}: A **{pct(m_a.top1)}** "
                f"top-1, B **{pct(m_b.top1)}** top-1; they disagree on **{len(differ)}** "
                f"({100 * len(differ) / self.count:.1f} %): A right {int((p_a[differ] == y[differ]).sum())}, "
                f"B right {int((p_b[differ] == y[differ]).sum())}, neither {neither}.")

    COLUMNS = ("class", "A top-1", "B top-1", "B − A (points)")

    def per_class(self) -> list[list[str]]:
        """One row per class: A's and B's top-1 and the difference in points."""
        return [[cls, pct(pa), pct(pb), "–" if pa is None or pb is None else f"{100 * (pb - pa):+.1f}"]
                for cls, pa, pb in zip(self.class_names, self.metrics[0].per_class, self.metrics[1].per_class,
                                       strict=True)]

    def captions(self, limit: int = 24) -> list[tuple[int, str]]:
        """(index, caption) of the first `limit` images where they disagree."""
        names, (p_a, p_b), y = self.class_names, self.predictions, self.labels
        return [(int(i), f"#{i} true {names[y[i]]} · A {names[p_a[i]]} · B {names[p_b[i]]}")
                for i in self.differ[:limit]]


def disagreements(a, b, dataset, count: int) -> Disagreements:
    """Models `a` and `b` (models.LoadedModel) on the first `count` test images of `dataset`
    (explorer.data.datasets.Dataset). Raises ValueError when they cannot be compared on it."""
    count = int(count or 0)
    if count < 1:
        raise ValueError("choose at least one test image")
    if a.class_names != b.class_names:
        raise ValueError("the two models predict different classes; compare models of one dataset")
    if len(a.class_names) != dataset.num_classes:
        raise ValueError(f"the models predict {len(a.class_names)} classes but {dataset.name} has "
                         f"{dataset.num_classes}")
    count = min(count, len(dataset.x_test))
    x, y = dataset.x_test[:count], dataset.y_test[:count]
    logits = []
    for loaded in (a, b):
        with loaded.lock:
            logits.append(predict_logits(loaded.model, x))
    return Disagreements(dataset.name, count, bool(dataset.sample),
                         (accuracy_metrics(logits[0], y), accuracy_metrics(logits[1], y)),
                         np.stack([logits[0].argmax(-1), logits[1].argmax(-1)]), np.asarray(y),
                         list(dataset.class_names))


@dataclass
class Locality:
    """Per model (by label): mean attention distance (layers, heads) in input pixels and entropy in nats."""

    distance: dict[str, np.ndarray]
    entropy: dict[str, np.ndarray]

    COLUMNS = ("model", "mean distance (px)", "mean entropy (nats)")

    def rows(self) -> list[list[str]]:
        return [[name, f"{d.mean():.2f}", f"{self.entropy[name].mean():.3f}"] for name, d in self.distance.items()]


def locality(named_models, images: np.ndarray, cache=None) -> Locality:
    """Attention locality of each (label, LoadedModel) over `images` (N, H, W, 3). One image comes from
    `cache` (results.ResultCache) when given: the Compare and Attention tabs already ran it."""
    distance, entropy = {}, {}
    for label, loaded in named_models:
        if len(images) == 1 and cache is not None:
            attention = cache.get(loaded, images[0])[0].attention
        else:
            with loaded.lock:
                attention = loaded.probe(images).attention
        distance[label] = mean_attention_distance(attention, loaded.config.grid_size, loaded.config.pixels_per_patch)
        entropy[label] = attention_entropy(attention)
    return Locality(distance, entropy)
