"""Multinomial logistic regression on frozen features, in numpy: the linear probe that a fine-tune's new
head starts from, and the baseline a fine-tune must beat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# L2 strengths tried when a validation split is there to choose among them (on standardised features).
L2_GRID = (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)
DEFAULT_L2 = 1e-2


@dataclass
class LinearHead:
    """Logits = features @ kernel + bias, in the features' own (unstandardised) units."""

    kernel: np.ndarray  # (features, classes)
    bias: np.ndarray    # (classes,)
    l2: float

    def logits(self, features: np.ndarray) -> np.ndarray:
        return np.asarray(features, np.float64) @ self.kernel + self.bias

    def accuracy(self, features: np.ndarray, labels: np.ndarray) -> float:
        return float((self.logits(features).argmax(-1) == np.asarray(labels)).mean()) if len(labels) else 0.0


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


class _Problem:
    """One logistic regression's data, standardised once (and its smoothness measured once), for fits at
    several L2 strengths, each warm-started where the last ended."""

    def __init__(self, features: np.ndarray, labels: np.ndarray, num_classes: int):
        x = np.asarray(features, np.float64)
        y = np.asarray(labels, np.int64)
        if x.ndim != 2 or len(x) != len(y) or len(x) == 0:
            raise ValueError(f"features {x.shape} and labels {y.shape} do not match")
        self.mean, self.std = x.mean(0), x.std(0) + 1e-6
        self.z = (x - self.mean) / self.std
        self.onehot = np.eye(num_classes)[y]
        # The loss is (1/2 + l2)-smooth at most on unit-variance features; 1/L keeps plain steps stable.
        self.smooth = 0.5 * max(1.0, float(np.linalg.norm(self.z, 2) ** 2 / len(x)))

    def fit(self, l2: float, steps: int, init: LinearHead | None = None) -> LinearHead:
        z, onehot = self.z, self.onehot
        n, d = z.shape
        if init is not None:  # the same head expressed on standardised features
            w = init.kernel * self.std[:, None]
            b = init.bias + self.mean @ init.kernel
        else:
            w, b = np.zeros((d, onehot.shape[1])), np.zeros(onehot.shape[1])
        lr = 1.0 / (self.smooth + l2)
        vw, vb = np.zeros_like(w), np.zeros_like(b)
        for _ in range(steps):
            lw, lb = w + 0.9 * vw, b + 0.9 * vb
            g = (_softmax(z @ lw + lb) - onehot) / n
            gw, gb = z.T @ g + l2 * lw, g.sum(0)
            vw, vb = 0.9 * vw - lr * gw, 0.9 * vb - lr * gb
            w, b = w + vw, b + vb
        kernel = w / self.std[:, None]
        return LinearHead(kernel, b - self.mean @ kernel, l2)


def fit_logistic(features: np.ndarray, labels: np.ndarray, num_classes: int, l2: float = DEFAULT_L2,
                 steps: int = 500, init: LinearHead | None = None) -> LinearHead:
    """Minimises mean cross-entropy + l2/2 * |W|^2 over standardised features by full-batch gradient
    descent with Nesterov momentum (the problem is convex and small: a few hundred steps converge).

    `init` warm-starts from an existing head (its rows are kept where the data agrees with them)."""
    return _Problem(features, labels, num_classes).fit(l2, steps, init)


def fit_probe(train_x: np.ndarray, train_y: np.ndarray, num_classes: int, val_x: np.ndarray | None = None,
              val_y: np.ndarray | None = None, init: LinearHead | None = None) -> LinearHead:
    """The logistic regression with the L2 strength that does best on the validation split (by accuracy,
    then log-loss); with no validation split, DEFAULT_L2."""
    if val_x is None or val_y is None or len(val_y) == 0:
        return fit_logistic(train_x, train_y, num_classes, DEFAULT_L2, init=init)
    best, best_key = None, None
    onehot = np.eye(num_classes)[np.asarray(val_y)]
    for l2 in L2_GRID:
        head = fit_logistic(train_x, train_y, num_classes, l2, init=init)
        p = _softmax(head.logits(val_x))
        key = (head.accuracy(val_x, val_y), -float(-(onehot * np.log(p + 1e-12)).sum(-1).mean()))
        if best_key is None or key > best_key:
            best, best_key = head, key
    return best


@dataclass
class ProbeChoice:
    """A probe chosen by k-fold cross-validation: its L2, each labelled image's out-of-fold correctness
    (every image judged by a probe that never saw it), and the probe refitted on every labelled image."""

    head: LinearHead
    l2: float
    correct: np.ndarray  # (images,) bool, out of fold

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self.correct) else 0.0


def cross_validated_probe(features: np.ndarray, labels: np.ndarray, num_classes: int,
                          extra: np.ndarray | None = None, folds: int = 5, seed: int = 0,
                          steps: int = 300) -> ProbeChoice:
    """The L2 strength (of L2_GRID) whose probes do best out of fold over `folds` folds of the labelled
    `features` (by accuracy, then log-loss): with a few hundred images a single validation split's verdict
    moves by several points, k folds judge on every image. `extra`: features of the same images, augmented
    (their mirrors), trained on beside the originals in every fold, never judged."""
    x, y = np.asarray(features, np.float64), np.asarray(labels, np.int64)
    n = len(y)
    folds = max(2, min(folds, int(np.bincount(y, minlength=num_classes).max()), n))
    fold = np.empty(n, int)
    fold[np.random.default_rng([seed, 11]).permutation(n)] = np.arange(n) % folds
    # Per fold, the L2 path from the strongest to the weakest, each fit warm-started from the one before:
    # neighbouring solutions are close, so the later fits need a fraction of the steps.
    correct = {l2: np.zeros(n, bool) for l2 in L2_GRID}
    loss = dict.fromkeys(L2_GRID, 0.0)
    for k in range(folds):
        train, held = fold != k, fold == k
        tx, ty = x[train], y[train]
        if extra is not None:
            tx, ty = np.concatenate([tx, extra[train]]), np.concatenate([ty, y[train]])
        problem, head = _Problem(tx, ty, num_classes), None
        for l2 in sorted(L2_GRID, reverse=True):
            head = problem.fit(l2, steps if head is None else steps // 3, init=head)
            p = _softmax(head.logits(x[held]))
            correct[l2][held] = p.argmax(-1) == y[held]
            loss[l2] += float(-np.log(p[np.arange(len(p)), y[held]] + 1e-12).sum())
    best = max(((float(correct[l2].mean()), -loss[l2]), l2, correct[l2]) for l2 in L2_GRID)
    _, l2, correct = best
    all_x, all_y = (x, y) if extra is None else (np.concatenate([x, extra]), np.concatenate([y, y]))
    return ProbeChoice(fit_logistic(all_x, all_y, num_classes, l2), l2, correct)


def paired_gain(new_correct: np.ndarray, old_correct: np.ndarray) -> tuple[int, int]:
    """(images only the new model gets right, images only the old one gets right) on the same images."""
    new_correct, old_correct = np.asarray(new_correct, bool), np.asarray(old_correct, bool)
    return int((new_correct & ~old_correct).sum()), int((old_correct & ~new_correct).sum())


def clearly_better(gained: int, lost: int, z: float) -> bool:
    """Whether `gained` images won against `lost` lost (a paired comparison on the same images) is more
    than noise: a net gain of over `z` standard errors (McNemar's: sqrt(gained + lost)), and at least one."""
    return gained - lost >= max(1.0, z * float(np.sqrt(gained + lost)))
