"""Which model to trust over a whole labelled set: both models' answers on every image, their confusion
matrices, per-class accuracy with Wilson intervals, the images only one model gets right, and calibration
(reliability bins, expected calibration error, temperature scaling fitted on a held-out half of the set).

Models are what `explorer.analysis.evidence.Classifier` takes (a `models.LoadedModel`, a `Probe` or an explorer
ViT). Images are (N, H, W, 3) raw pixels at the model's input size; labels are class indices of the
models' own class list (`labelled_zip` maps a zip's folder names onto it).
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from explorer.analysis.evidence import Classifier
from explorer.data.folders import read_image_zip
from explorer.model.compiled import forward
from explorer.training.head import base_rows

BINS = 15            # equal-width confidence bins of the reliability diagram and the ECE (Guo et al. 2017)
Z95 = 1.959963984540054  # the normal quantile of a two-sided 95 % interval
CALIBRATION_SEED = 0  # which images of the set fit the temperature (the other half measures it)
CHUNK = 256          # images per forward call
T_RANGE = (0.05, 20.0)  # the temperatures searched


# ------------------------------------------------------------------------------------------ the set


@dataclass(frozen=True)
class LabelledSet:
    """Images with true labels, indexed in the models' class list.

    Attributes:
        name: what the set is ("cifar10 test 0-999", a zip's name).
        images: (N, H, W, 3) uint8.
        labels: (N,) int64 class indices.
        class_names: the models' classes, in their order.
        indices: (N,) each image's index in its source (the test set's own index; a zip's file order).
    """

    name: str
    images: np.ndarray
    labels: np.ndarray
    class_names: list[str]
    indices: np.ndarray

    @property
    def count(self) -> int:
        return int(len(self.labels))

    @functools.cached_property
    def key(self) -> str:
        """What names the set's content in a cache: a hash of its pixels and labels (taken once: a report reads
        it for its cache, each shipped logits file and the page's key)."""
        h = hashlib.blake2b(digest_size=16)
        h.update(np.ascontiguousarray(self.images).tobytes())
        h.update(np.ascontiguousarray(self.labels, np.int64).tobytes())
        return h.hexdigest()


def test_set(dataset, count: int | None = None) -> LabelledSet:
    """The first `count` test images of an `explorer.data.datasets.Dataset` (all of them when None)."""
    n = len(dataset.y_test) if count is None else min(int(count), len(dataset.y_test))
    if n < 1:
        raise ValueError(f"{dataset.name} has no test images to evaluate on")
    return LabelledSet(f"{dataset.name} test images 0-{n - 1}", np.asarray(dataset.x_test[:n]),
                       np.asarray(dataset.y_test[:n], np.int64), list(dataset.class_names), np.arange(n))


def read_labelled_zip(path, class_names: list[str]) -> LabelledSet:
    """`labelled_zip` of the file at `path` as it is now, read once for the page's note and its report (the
    last few zips kept, by path, size, time and the models' classes)."""
    stat = os.stat(path)
    return _labelled_zip_of(str(path), stat.st_size, stat.st_mtime_ns, tuple(class_names))


@functools.lru_cache(maxsize=2)
def _labelled_zip_of(path: str, size: int, mtime_ns: int, class_names: tuple[str, ...]) -> LabelledSet:
    return labelled_zip(path, list(class_names))


def classes_without_images(data: LabelledSet) -> list[str]:
    """The models' classes of which `data` holds no image (a zip of some of them)."""
    counts = np.bincount(data.labels, minlength=len(data.class_names))
    return [c for c, n in zip(data.class_names, counts, strict=True) if n == 0]


def labelled_zip(path, class_names: list[str], image_size: int = 32) -> LabelledSet:
    """Every image of a zip of class folders (the Fine-tune tab's format), labelled in `class_names` by folder
    name; a ValueError names the folders the models do not predict."""
    ds = read_image_zip(path, image_size, test_fraction=0.0)
    rows = base_rows(class_names, ds.class_names)  # matched as a fine-tune matches them: "Cat/" is cat
    if rows is None:
        unknown = [c for c in ds.class_names if base_rows(class_names, [c]) is None]
        raise ValueError(f"{Path(path).name}: the models do not predict {unknown}; folders must be named after "
                         f"their classes ({', '.join(class_names)}), or fine-tune on this zip first for models of "
                         f"its classes")
    mapping = np.asarray(rows, np.int64)
    images = np.concatenate([ds.x_train, ds.x_test])
    labels = mapping[np.concatenate([ds.y_train, ds.y_test]).astype(np.int64)]
    name = f"{Path(path).name} ({ds.note})" if ds.unreadable else Path(path).name
    return LabelledSet(name, images, labels, list(class_names), np.arange(len(labels)))


# ------------------------------------------------------------------------------------------ predictions


def predict(model, images: np.ndarray, progress=None) -> np.ndarray:
    """(N, classes) float32 logits of one model, CHUNK images per compiled call (the last one topped up, so
    one traced shape serves every call); `progress(done, total)` after each call."""
    m = Classifier(model)
    x = m.check(images)
    run = forward(m.keras)
    out = np.empty((len(x), m.num_classes), np.float32)
    for start in range(0, len(x), CHUNK):
        batch = x[start:start + CHUNK]
        n = len(batch)
        if n < CHUNK:
            batch = np.concatenate([batch, np.repeat(batch[-1:], CHUNK - n, axis=0)])
        if m.lock is None:
            logits = run(batch)
        else:
            with m.lock:
                logits = run(batch)
        out[start:start + n] = np.asarray(logits)[:n]
        if progress is not None:
            progress(start + n, len(x))
    return out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


# ------------------------------------------------------------------------------------------ accuracy


def short_names(class_names: list[str], size: int = 5) -> list[str]:
    """Each class name cut to its first `size` letters, longer where that leaves two alike: a confusion table's
    column headers, ten of which fit beside the full names in an 800 px window."""
    for n in range(size, max(map(len, class_names), default=size) + 1):
        short = [c[:n] for c in class_names]
        if len(set(short)) == len(short):
            return short
    return list(class_names)


def confusion(labels: np.ndarray, predicted: np.ndarray, num_classes: int) -> np.ndarray:
    """(classes, classes) counts: row = true class, column = the model's answer."""
    out = np.zeros((num_classes, num_classes), np.int64)
    np.add.at(out, (np.asarray(labels, np.int64), np.asarray(predicted, np.int64)), 1)
    return out


def wilson(correct: int, total: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion correct/total (95 % by default); (0, 1) for no trials."""
    if total <= 0:
        return 0.0, 1.0
    p = correct / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class ClassAccuracy:
    """One class's accuracy with its 95 % Wilson interval (None: no image of the class in the set)."""

    name: str
    correct: int
    total: int

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.total if self.total else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.correct, self.total)


def per_class(matrix: np.ndarray, class_names: list[str]) -> list[ClassAccuracy]:
    return [ClassAccuracy(name, int(matrix[c, c]), int(matrix[c].sum())) for c, name in enumerate(class_names)]


# ------------------------------------------------------------------------------------------ calibration


@dataclass
class Reliability:
    """A reliability diagram: the images binned by confidence (their top-1 probability) into BINS equal-width
    bins on [0, 1]; per bin the count, mean confidence and accuracy; the ECE is the count-weighted mean gap
    |accuracy - confidence| (Naeini et al. 2015, Guo et al. 2017)."""

    edges: np.ndarray
    counts: np.ndarray
    confidence: np.ndarray  # NaN in an empty bin
    accuracy: np.ndarray
    ece: float
    nll: float

    @property
    def bins(self) -> int:
        return int(len(self.counts))


def reliability(logits: np.ndarray, labels: np.ndarray, bins: int = BINS, temperature: float = 1.0) -> Reliability:
    """The reliability bins, ECE and mean negative log-likelihood (nats) of logits / temperature."""
    logp = log_softmax(np.asarray(logits, np.float64) / temperature)
    labels = np.asarray(labels, np.int64)
    confidence = np.exp(logp.max(-1))
    correct = logp.argmax(-1) == labels
    edges = np.linspace(0.0, 1.0, bins + 1)
    # A confidence of exactly 1 belongs to the last bin; each bin is (lo, hi].
    which = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    counts = np.bincount(which, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = np.bincount(which, confidence, bins) / counts
        acc = np.bincount(which, correct.astype(float), bins) / counts
    gaps = np.where(counts > 0, np.abs(np.nan_to_num(acc) - np.nan_to_num(conf)), 0.0)
    ece = float((counts * gaps).sum() / max(1, len(labels)))
    nll = float(-logp[np.arange(len(labels)), labels].mean()) if len(labels) else float("nan")
    return Reliability(edges, counts, conf, acc, ece, nll)


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    logp = log_softmax(np.asarray(logits, np.float64) / temperature)
    return float(-logp[np.arange(len(labels)), np.asarray(labels, np.int64)].mean())


def fit_temperature(logits: np.ndarray, labels: np.ndarray, bounds: tuple[float, float] = T_RANGE) -> float:
    """The temperature T minimising the NLL of softmax(logits / T) (Guo et al. 2017): a golden-section search
    on 1/T, in which the NLL is convex."""
    lo, hi = 1.0 / bounds[1], 1.0 / bounds[0]
    ratio = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = nll(logits, labels, 1 / c), nll(logits, labels, 1 / d)
    for _ in range(80):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = nll(logits, labels, 1 / c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = nll(logits, labels, 1 / d)
    return float(2.0 / (a + b))


def calibration_split(labels: np.ndarray, seed: int = CALIBRATION_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(fit, held out) indices: each class's images shuffled with `seed` and halved, the first half fitting
    the temperature, the second measuring it; the same split for both models."""
    labels = np.asarray(labels, np.int64)
    rng = np.random.default_rng(seed)
    fit, held = [], []
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        half = len(members) // 2
        fit.append(members[:half])
        held.append(members[half:])
    return np.sort(np.concatenate(fit)), np.sort(np.concatenate(held))


@dataclass
class Calibration:
    """Calibration of one model before and after temperature scaling.

    Attributes:
        temperature: T fitted on the `fit` images (the NLL's minimiser).
        fit_count, held_count: images that fitted T, images the before/after numbers are measured on.
        before, after: reliability (with ECE and NLL) on the held-out images at T = 1 and at the fitted T.
        whole: reliability on every image at T = 1 (the diagram shown).
    """

    temperature: float
    fit_count: int
    held_count: int
    before: Reliability
    after: Reliability
    whole: Reliability


def calibrate(logits: np.ndarray, labels: np.ndarray, bins: int = BINS, seed: int = CALIBRATION_SEED) -> Calibration:
    fit, held = calibration_split(labels, seed)
    if len(fit) == 0 or len(held) == 0:
        raise ValueError("temperature scaling needs at least two images of a class (one to fit, one to test)")
    t = fit_temperature(logits[fit], labels[fit])
    return Calibration(t, len(fit), len(held), reliability(logits[held], labels[held], bins),
                       reliability(logits[held], labels[held], bins, t), reliability(logits, labels, bins))


# ------------------------------------------------------------------------------------------ the report


@dataclass
class ModelTrust:
    """One model on the set: its logits, answers, confusion matrix, per-class accuracy and calibration."""

    name: str
    logits: np.ndarray
    confusion: np.ndarray
    classes: list[ClassAccuracy]
    calibration: Calibration
    seconds: float = 0.0

    @property
    def predicted(self) -> np.ndarray:
        return self.logits.argmax(-1)

    @property
    def confidence(self) -> np.ndarray:
        return np.exp(log_softmax(self.logits).max(-1))

    @property
    def accuracy(self) -> float:
        return float(np.trace(self.confusion) / max(1, self.confusion.sum()))

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(int(np.trace(self.confusion)), int(self.confusion.sum()))


@dataclass
class TrustReport:
    """Both models on one labelled set.

    Attributes:
        data: the set.
        models: one ModelTrust per model (A, B).
        bins: the reliability diagrams' bin count.
    """

    data: LabelledSet
    models: list[ModelTrust]
    bins: int = BINS

    def correct(self, i: int) -> np.ndarray:
        return self.models[i].predicted == self.data.labels

    def only_right(self, i: int) -> np.ndarray:
        """Positions (in the set) of the images model i gets right and every other model gets wrong."""
        mine = self.correct(i)
        others = [self.correct(j) for j in range(len(self.models)) if j != i]
        return np.flatnonzero(mine & ~np.any(others, axis=0)) if others else np.flatnonzero(mine)

    def cell(self, i: int, true: int, predicted: int) -> np.ndarray:
        """Positions of the images of class `true` that model i answers `predicted`."""
        return np.flatnonzero((self.data.labels == true) & (self.models[i].predicted == predicted))

    def caption(self, position: int, tags: str = "AB") -> str:
        """"cat · A: dog 0.71 · B: cat 0.88": the true class and each model's answer and probability."""
        names = self.data.class_names
        parts = [names[self.data.labels[position]]]
        for tag, m in zip(tags, self.models, strict=False):
            p = int(m.predicted[position])
            parts.append(f"{tag}: {names[p]} {m.confidence[position]:.2f}")
        return " · ".join(parts)

    def summary(self) -> dict:
        """The numbers on screen as plain JSON: per model accuracy (with interval), per-class accuracy,
        confusion, ECE and NLL before and after temperature scaling; the images only one model gets right."""
        out = {"set": self.data.name, "images": self.data.count, "class_names": self.data.class_names,
               "bins": self.bins, "models": []}
        for i, m in enumerate(self.models):
            c = m.calibration
            out["models"].append({
                "name": m.name, "accuracy": m.accuracy, "interval95": list(m.interval),
                "per_class": [{"class": k.name, "correct": k.correct, "total": k.total, "accuracy": k.accuracy,
                               "interval95": list(k.interval)} for k in m.classes],
                "confusion": m.confusion.tolist(),
                "calibration": {"temperature": c.temperature, "fit_images": c.fit_count,
                                "held_out_images": c.held_count, "ece_before": c.before.ece,
                                "ece_after": c.after.ece, "nll_before": c.before.nll, "nll_after": c.after.nll,
                                "ece_all_images": c.whole.ece},
                "only_right": self.data.indices[self.only_right(i)].tolist()})
        return out


def model_trust(model, data: LabelledSet, bins: int = BINS, progress=None, logits: np.ndarray | None = None
                ) -> ModelTrust:
    """One model over the whole set; `logits`: its logits on the set when known (shipped), else predicted."""
    began = time.perf_counter()
    logits = predict(model, data.images, progress) if logits is None else np.asarray(logits, np.float32)
    seconds = time.perf_counter() - began
    num_classes = logits.shape[-1]
    if num_classes != len(data.class_names):
        raise ValueError(f"the model predicts {num_classes} classes but the set has {len(data.class_names)}")
    matrix = confusion(data.labels, logits.argmax(-1), num_classes)
    name = Classifier(model).name
    return ModelTrust(name, logits, matrix, per_class(matrix, data.class_names),
                      calibrate(logits, data.labels, bins), seconds)


def trust_pair(models, data: LabelledSet, bins: int = BINS, progress=None, logits=None) -> TrustReport:
    """Both models over the whole set; `progress(fraction, message)` as each chunk is done; `logits`: each
    model's logits on the set where known (shipped_logits), None where it must be predicted."""
    results = []
    for i, (model, known) in enumerate(zip(models, logits or [None] * len(models), strict=True)):
        def step(done, total, i=i):
            if progress is not None:
                progress((i + done / total) / len(models), f"model {'AB'[i] if i < 2 else i}: {done}/{total} images")
        results.append(model_trust(model, data, bins, step, known))
    return TrustReport(data, results, bins)


# A shipped model's logits on the set the Trust tab opens on (the first 1,000 CIFAR-10 test images), computed
# once (tools/ship_logits.py) so that the tab's first report does not wait for 2,000 forward passes: one file a
# model, named by its weights' SHA-256 (16 hex digits), holding that digest whole and the set's key.
SHIPPED_LOGITS = Path(__file__).resolve().parents[1] / "shipped" / "logits"


def shipped_logits(digest: str, data: LabelledSet, folder: Path | None = None) -> np.ndarray | None:
    """The logits shipped for the weights of `digest` on exactly `data` (its pixels and labels); None when no
    file holds them (another model, another set, an unreadable file)."""
    try:
        with np.load((folder or SHIPPED_LOGITS) / f"{digest[:16]}.npz") as f:
            if str(f["weights"]) == digest and str(f["set_key"]) == data.key:
                return np.array(f["logits"], np.float32)
    except (OSError, KeyError, ValueError):
        return None
    return None


@dataclass
class ReportCache:
    """Reports per (models' identities, set's content), so a second look at a pair and set costs nothing;
    the models are named by what names their checkpoints (models.LoadedModel.identity), never by id()."""

    capacity: int = 8
    _items: OrderedDict = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, key):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
