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


def fit_logistic(features: np.ndarray, labels: np.ndarray, num_classes: int, l2: float = DEFAULT_L2,
                 steps: int = 500, init: LinearHead | None = None) -> LinearHead:
    """Minimises mean cross-entropy + l2/2 * |W|^2 over standardised features by full-batch gradient
    descent with Nesterov momentum (the problem is convex and small: a few hundred steps converge).

    `init` warm-starts from an existing head (its rows are kept where the data agrees with them)."""
    x = np.asarray(features, np.float64)
    y = np.asarray(labels, np.int64)
    if x.ndim != 2 or len(x) != len(y) or len(x) == 0:
        raise ValueError(f"features {x.shape} and labels {y.shape} do not match")
    mean, std = x.mean(0), x.std(0) + 1e-6
    z = (x - mean) / std
    onehot = np.eye(num_classes)[y]
    n, d = z.shape
    if init is not None:  # the same head expressed on standardised features
        w = init.kernel * std[:, None]
        b = init.bias + mean @ init.kernel
    else:
        w, b = np.zeros((d, num_classes)), np.zeros(num_classes)
    # The loss is (1/2 + l2)-smooth at most on unit-variance features; 1/L keeps plain steps stable.
    lr = 1.0 / (0.5 * max(1.0, float(np.linalg.norm(z, 2) ** 2 / n)) + l2)
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    for _ in range(steps):
        lw, lb = w + 0.9 * vw, b + 0.9 * vb
        g = (_softmax(z @ lw + lb) - onehot) / n
        gw, gb = z.T @ g + l2 * lw, g.sum(0)
        vw, vb = 0.9 * vw - lr * gw, 0.9 * vb - lr * gb
        w, b = w + vw, b + vb
    kernel = w / std[:, None]
    return LinearHead(kernel, b - mean @ kernel, l2)


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
