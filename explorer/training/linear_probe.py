"""Multinomial logistic regression on frozen features: the linear probe that a fine-tune's new head starts
from, and the baseline a fine-tune must beat. Each probe is the solution of its problem (L-BFGS to a stated
gradient tolerance), so the same features, labels and L2 give the same head wherever it is fitted: in the
fine-tune, the bench and the app.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# L2 strengths tried (on standardised features, with the mean cross-entropy): from weak to strong enough
# that a probe of a few hundred images on 64 features is held close to the class means.
L2_GRID = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)
DEFAULT_L2 = 1e-2
# A probe is returned only when every component of its objective's gradient (mean cross-entropy + l2/2 |W|^2,
# on standardised features) is at most this: well below what moves a prediction.
TOLERANCE = 1e-6
MAX_ITERATIONS = 5000


def _one_thread():
    """BLAS on one thread: these problems are a few thousand rows by 64 columns, where more threads only wait
    on each other (measured: a 5-fold choice took 10-35 s with OpenBLAS's threads on a loaded 2-core host,
    0.8-1.7 s on one)."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=1, user_api="blas")


class ProbeError(RuntimeError):
    """The solver stopped before its tolerance (it should not on a convex problem of this size)."""


@dataclass
class LinearHead:
    """Logits = features @ kernel + bias, in the features' own (unstandardised) units; `gradient`: the largest
    component of the objective's gradient where the solver stopped, `iterations`: its L-BFGS iterations."""

    kernel: np.ndarray  # (features, classes)
    bias: np.ndarray    # (classes,)
    l2: float
    gradient: float = 0.0
    iterations: int = 0

    def logits(self, features: np.ndarray) -> np.ndarray:
        return np.asarray(features, np.float64) @ self.kernel + self.bias

    def accuracy(self, features: np.ndarray, labels: np.ndarray) -> float:
        return float((self.logits(features).argmax(-1) == np.asarray(labels)).mean()) if len(labels) else 0.0


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


class _Problem:
    """One logistic regression's data, standardised once, for fits at several L2 strengths."""

    def __init__(self, features: np.ndarray, labels: np.ndarray, num_classes: int):
        x = np.asarray(features, np.float64)
        y = np.asarray(labels, np.int64)
        if x.ndim != 2 or len(x) != len(y) or len(x) == 0:
            raise ValueError(f"features {x.shape} and labels {y.shape} do not match")
        self.mean, self.std = x.mean(0), x.std(0) + 1e-6
        self.z = (x - self.mean) / self.std
        self.y = y
        self.onehot = np.eye(num_classes)[y]
        self.shape = (x.shape[1], num_classes)

    def objective(self, theta: np.ndarray, l2: float) -> tuple[float, np.ndarray]:
        """(mean cross-entropy + l2/2 |W|^2, its gradient) at theta = (W flattened, b), standardised units."""
        d, c = self.shape
        w, b = theta[:d * c].reshape(d, c), theta[d * c:]
        logp = _log_softmax(self.z @ w + b)
        n = len(self.y)
        loss = -float(logp[np.arange(n), self.y].mean()) + 0.5 * l2 * float((w * w).sum())
        g = (np.exp(logp) - self.onehot) / n
        return loss, np.concatenate([(self.z.T @ g + l2 * w).ravel(), g.sum(0)])

    def standardised(self, head: LinearHead) -> np.ndarray:
        """The same head as theta on standardised features."""
        w = head.kernel * self.std[:, None]
        return np.concatenate([w.ravel(), head.bias + self.mean @ head.kernel])

    def fit(self, l2: float, init: LinearHead | None = None) -> LinearHead:
        from scipy.optimize import minimize
        d, c = self.shape
        theta = self.standardised(init) if init is not None else np.zeros(d * c + c)
        result = minimize(self.objective, theta, args=(l2,), jac=True, method="L-BFGS-B",
                          options={"gtol": TOLERANCE, "ftol": 0.0, "maxiter": MAX_ITERATIONS, "maxcor": 20})
        _, grad = self.objective(result.x, l2)
        gradient = float(np.abs(grad).max())
        if gradient > TOLERANCE:
            raise ProbeError(f"the probe's solver stopped at a gradient of {gradient:.2g} (tolerance "
                             f"{TOLERANCE:g}, L2 {l2:g}) after {result.nit} iterations: {result.message}")
        w, b = result.x[:d * c].reshape(d, c), result.x[d * c:]
        # Softmax ignores a constant added to every class's bias (the bias is not penalised): centring it
        # makes the answer unique.
        b = b - b.mean()
        kernel = w / self.std[:, None]
        return LinearHead(kernel, b - self.mean @ kernel, l2, gradient, int(result.nit))


def fit_logistic(features: np.ndarray, labels: np.ndarray, num_classes: int, l2: float = DEFAULT_L2,
                 init: LinearHead | None = None) -> LinearHead:
    """The minimiser of mean cross-entropy + l2/2 * |W|^2 over standardised features (the bias is not
    penalised), found by L-BFGS until every gradient component is at most TOLERANCE. The problem is strictly
    convex in the kernel, so `init` (a warm start) changes how fast, never where it ends."""
    with _one_thread():
        return _Problem(features, labels, num_classes).fit(l2, init)


def objective_gradient(features: np.ndarray, labels: np.ndarray, num_classes: int, head: LinearHead) -> float:
    """The largest component of the objective's gradient at `head` (standardised units): 0 at the solution."""
    problem = _Problem(features, labels, num_classes)
    return float(np.abs(problem.objective(problem.standardised(head), head.l2)[1]).max())


def fit_probe(train_x: np.ndarray, train_y: np.ndarray, num_classes: int, val_x: np.ndarray | None = None,
              val_y: np.ndarray | None = None) -> LinearHead:
    """The logistic regression with the L2 strength that does best on the validation split (by accuracy,
    then log-loss; the stronger L2 on a tie); with no validation split, DEFAULT_L2."""
    if val_x is None or val_y is None or len(val_y) == 0:
        return fit_logistic(train_x, train_y, num_classes, DEFAULT_L2)
    problem = _Problem(train_x, train_y, num_classes)
    best, best_key, head = None, None, None
    for l2 in sorted(L2_GRID, reverse=True):
        with _one_thread():
            head = problem.fit(l2, init=head)
        logp = _log_softmax(head.logits(val_x))
        key = (head.accuracy(val_x, val_y), float(logp[np.arange(len(val_y)), np.asarray(val_y)].mean()))
        if best_key is None or key > best_key:
            best, best_key = head, key
    return best


@dataclass
class ProbeChoice:
    """A probe chosen by k-fold cross-validation: its L2, each labelled image's out-of-fold correctness
    (every image judged by a probe that never saw it), the probe refitted on every labelled image, and each
    L2's out-of-fold accuracy."""

    head: LinearHead
    l2: float
    correct: np.ndarray  # (images,) bool, out of fold
    scores: dict[float, float] | None = None
    # Per L2: each image's out-of-fold correctness and log-loss.
    correct_by_l2: dict[float, np.ndarray] | None = None
    loss_by_l2: dict[float, np.ndarray] | None = None

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self.correct) else 0.0


def choose_l2(correct: dict[float, np.ndarray], loss: dict[float, np.ndarray]) -> float:
    """The L2 whose probes get the most images right out of fold; among those level on that, the one with
    the lowest out-of-fold log-loss, then the stronger. Measured on the bench's 30 draws of three kinds of
    zip (bench/README.md, "Choosing the probe's L2"), this did at least as well on their test images as a
    one-standard-error rule toward stronger L2 (mean 60.1 % against 59.8 %), which gave up 2 points on
    the 10-class zips of new classes."""
    return max(correct, key=lambda l2: (int(correct[l2].sum()), -float(loss[l2].mean()), l2))


def cross_validated_probe(features: np.ndarray, labels: np.ndarray, num_classes: int,
                          extra: np.ndarray | None = None, folds: int = 5, seed: int = 0) -> ProbeChoice:
    """The L2 strength (of L2_GRID) chosen on out-of-fold accuracy, then log-loss (choose_l2) over `folds`
    folds of the labelled `features`: with a few hundred images a single validation split's verdict moves
    by several points, k folds judge on every image. `extra`:
    features of the same images, augmented (their mirrors), trained on beside the originals in every fold,
    never judged."""
    x, y = np.asarray(features, np.float64), np.asarray(labels, np.int64)
    n = len(y)
    folds = max(2, min(folds, int(np.bincount(y, minlength=num_classes).max()), n))
    fold = np.empty(n, int)
    fold[np.random.default_rng([seed, 11]).permutation(n)] = np.arange(n) % folds
    correct = {l2: np.zeros(n, bool) for l2 in L2_GRID}
    loss = {l2: np.zeros(n) for l2 in L2_GRID}
    for k in range(folds):
        train, held = fold != k, fold == k
        tx, ty = x[train], y[train]
        if extra is not None:
            tx, ty = np.concatenate([tx, extra[train]]), np.concatenate([ty, y[train]])
        problem, head = _Problem(tx, ty, num_classes), None
        for l2 in sorted(L2_GRID, reverse=True):  # warm starts along the path: faster, same solutions
            with _one_thread():
                head = problem.fit(l2, init=head)
            logp = _log_softmax(head.logits(x[held]))
            correct[l2][held] = logp.argmax(-1) == y[held]
            loss[l2][held] = -logp[np.arange(len(logp)), y[held]]
    l2 = choose_l2(correct, loss)
    all_x, all_y = (x, y) if extra is None else (np.concatenate([x, extra]), np.concatenate([y, y]))
    return ProbeChoice(fit_logistic(all_x, all_y, num_classes, l2), l2, correct[l2],
                       {k: float(v.mean()) for k, v in correct.items()}, correct, loss)


def paired_gain(new_correct: np.ndarray, old_correct: np.ndarray) -> tuple[int, int]:
    """(images only the new model gets right, images only the old one gets right) on the same images."""
    new_correct, old_correct = np.asarray(new_correct, bool), np.asarray(old_correct, bool)
    return int((new_correct & ~old_correct).sum()), int((old_correct & ~new_correct).sum())


def clearly_better(gained: int, lost: int, z: float) -> bool:
    """Whether `gained` images won against `lost` lost (a paired comparison on the same images) is more
    than noise: a net gain of over `z` standard errors (McNemar's: sqrt(gained + lost)), and at least one."""
    return gained - lost >= max(1.0, z * float(np.sqrt(gained + lost)))
