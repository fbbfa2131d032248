"""The linear probe is the solution of its problem: converged to its stated tolerance, the same head from any
start, and the same probe for the same data and L2 wherever it is fitted (the fine-tune, the bench)."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.training.linear_probe import (
    L2_GRID,
    TOLERANCE,
    choose_l2,
    cross_validated_probe,
    fit_logistic,
    fit_probe,
    objective_gradient,
)


def blobs(n=300, d=16, c=4, spread=2.0, seed=0):
    """Overlapping Gaussian classes with a shifted, scaled feature space (as pooled features are)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    x = rng.normal(0, 1, (c, d))[y] + rng.normal(0, spread, (n, d))
    return (x * rng.uniform(0.1, 10, d) + rng.normal(0, 5, d)).astype("float32"), y


@pytest.mark.parametrize("l2", [L2_GRID[0], 1e-2, L2_GRID[-1]])
def test_the_probe_is_converged_to_its_tolerance(l2):
    x, y = blobs()
    head = fit_logistic(x, y, 4, l2)
    assert head.gradient <= TOLERANCE and head.iterations > 0
    # Measured independently of the solver, on the features as given.
    assert objective_gradient(x, y, 4, head) <= TOLERANCE
    # A head a little away from it is not at the solution: the check can fail.
    nudged = type(head)(head.kernel * 1.01, head.bias, l2)
    assert objective_gradient(x, y, 4, nudged) > 100 * TOLERANCE


@pytest.mark.parametrize("l2", [L2_GRID[0], 1e-2, 1.0])
def test_two_starts_end_at_the_same_head(l2):
    """Zeros and a far-off random head: logits within 1e-3 on every image, the same predictions, bias
    centred the same way (softmax ignores a constant bias shift)."""
    x, y = blobs(seed=1)
    cold = fit_logistic(x, y, 4, l2)
    rng = np.random.default_rng(5)
    wild = type(cold)(rng.normal(0, 3, cold.kernel.shape), rng.normal(0, 3, cold.bias.shape), l2)
    warm = fit_logistic(x, y, 4, l2, init=wild)
    np.testing.assert_allclose(warm.logits(x), cold.logits(x), atol=1e-3)
    assert (warm.logits(x).argmax(-1) == cold.logits(x).argmax(-1)).all()


def test_the_same_data_and_l2_give_the_same_probe_in_the_fine_tune_and_the_bench():
    """cross_validated_probe's refit (the fine-tune's fallback), fit_probe's path (the bench) and a plain
    fit_logistic agree at the same L2: no answer depends on the path that reached it."""
    x, y = blobs(n=240, seed=2)
    choice = cross_validated_probe(x, y, 4)
    plain = fit_logistic(x, y, 4, choice.l2)
    np.testing.assert_allclose(choice.head.logits(x), plain.logits(x), atol=1e-3)
    val = slice(200, 240)
    by_path = fit_probe(x[:200], y[:200], 4, x[val], y[val])
    alone = fit_logistic(x[:200], y[:200], 4, by_path.l2)
    np.testing.assert_allclose(by_path.logits(x), alone.logits(x), atol=1e-3)


def test_the_grid_reaches_the_strong_end_and_the_choice_rule():
    assert min(L2_GRID) <= 1e-3 and max(L2_GRID) >= 1.0
    n = 10
    right = np.ones(n, bool)
    one_wrong = right.copy()
    one_wrong[0] = False
    loss = {l2: np.full(n, 1.0) for l2 in (0.01, 0.1, 1.0)}
    # most images right wins; on a tie the lower log-loss; on a tie of both the stronger L2
    assert choose_l2({0.01: right, 0.1: one_wrong, 1.0: one_wrong}, loss) == 0.01
    assert choose_l2({0.01: right, 0.1: right, 1.0: one_wrong}, {**loss, 0.01: np.full(n, 0.9)}) == 0.01
    assert choose_l2({0.01: right, 0.1: right, 1.0: one_wrong}, loss) == 0.1


def test_strong_regularisation_is_chosen_where_the_data_is_noisy():
    """Few images, many noisy features: the choice moves to the strong end, where a weak L2 overfits."""
    x, y = blobs(n=120, d=64, c=6, spread=6.0, seed=3)
    choice = cross_validated_probe(x, y, 6)
    assert choice.l2 >= 0.1, choice.scores
    x_easy, y_easy = blobs(n=600, d=8, c=3, spread=0.5, seed=4)
    assert cross_validated_probe(x_easy, y_easy, 3).accuracy > 0.95


def test_paired_gain_and_a_clear_gain():
    from explorer.training.linear_probe import clearly_better, paired_gain
    new = np.array([1, 1, 1, 0, 0, 1], bool)
    old = np.array([1, 0, 0, 1, 0, 1], bool)
    assert paired_gain(new, old) == (2, 1)
    assert not clearly_better(2, 1, 1.0)        # +1 of 3 discordant: noise
    assert clearly_better(12, 2, 1.0)           # +10 > sqrt(14)
    assert not clearly_better(1, 0, 1.5) and clearly_better(1, 0, 0.5)
    assert not clearly_better(0, 0, 0.0)        # no gain is never a gain


def test_cross_validation_judges_every_image_out_of_fold():
    from explorer.training.linear_probe import cross_validated_probe
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 3, (3, 8))
    y = np.repeat(np.arange(3), 40)
    x = centres[y] + rng.normal(0, 1, (120, 8))
    choice = cross_validated_probe(x, y, 3, extra=x + rng.normal(0, 0.1, x.shape))
    assert choice.correct.shape == (120,) and choice.accuracy > 0.9
    # Labels that carry nothing are found out: out of fold the probe is near chance, never 100 %.
    noise = cross_validated_probe(x, rng.permutation(y), 3)
    assert noise.accuracy < 0.6 and noise.head.accuracy(x, y) < 1.0
