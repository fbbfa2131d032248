"""The default short fine-tune recipe (explorer.training.tuning): its batch, its steps, what it learns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from explorer.checkpoints.store import read_card
from explorer.data.batches import make_batches
from explorer.data.folders import read_image_zip
from explorer.training.tuning import fine_tune, fine_tune_recipe
from tests.helpers import ROOT, class_zip, pick

SHIPPED = ROOT / "checkpoints" / "cifar10-vanilla"


def test_short_recipe_scales_the_batch_to_the_data():
    small, large = fine_tune_recipe(200), fine_tune_recipe(50_000)
    assert small.batch_size == 16 and large.batch_size == 128
    from explorer.training.recipe import FINE_TUNE
    for n in (60, 200, 800, 5000):
        recipe = fine_tune_recipe(n)
        per_epoch = -(-round(n * 0.9) // recipe.batch_size)
        steps = recipe.epochs * per_epoch
        target = min(FINE_TUNE.target_steps, FINE_TUNE.image_budget / recipe.batch_size)
        assert abs(steps - target) <= per_epoch or recipe.epochs in (1, 30), (n, recipe)  # the target, to an epoch
        budget = FINE_TUNE.image_budget * 1.25
        assert steps * recipe.batch_size <= budget or recipe.epochs == 1, (n, recipe)  # the budget
        assert recipe.learning_rate == 5e-4 and recipe.keep_best and recipe.head_init == "auto"
    assert fine_tune_recipe(800, known_classes=True).learning_rate == 1e-4
    given = fine_tune_recipe(800, epochs=2, batch_size=8, learning_rate=3e-3, freeze_backbone=True)
    assert (given.epochs, given.batch_size, given.learning_rate, given.freeze_backbone) == (2, 8, 3e-3, True)


def test_every_batch_has_one_shape_and_padding_counts_for_nothing():
    x = np.random.default_rng(0).integers(0, 255, (70, 8, 8, 3), dtype=np.uint8)
    y = np.arange(70) % 3
    train = make_batches(x, y, 3, 32, True, 0, True)
    shapes = {train[i][0].shape for i in range(len(train))}
    assert len(train) == 3 and shapes == {(32, 8, 8, 3)}
    val = make_batches(x, y, 3, 32, False, 0, False)
    weights = [val[i][2] for i in range(len(val))]
    assert {val[i][0].shape for i in range(len(val))} == {(32, 8, 8, 3)}
    # Every real image weighs the same and each repeat 0; the weights sum to the rows Keras averages the loss
    # over (3 batches of 32), so the loss is the real images' mean (see test_train's exact-validation test).
    real = np.concatenate(weights)[:70]
    assert np.allclose(real, 96 / 70) and not weights[-1][6:].any()
    assert sum(float(w.sum()) for w in weights) == pytest.approx(96)


@pytest.mark.slow
def test_the_default_recipe_learns_a_tiny_zip_far_above_chance(tmp_path, cifar10):
    """The shipped model, three classes it knows under names it does not, 40 images each: far above
    chance (1/3) after the default recipe, and no worse than the probe it started from."""
    x, y = pick(cifar10, ["airplane", "frog", "truck"], 40)
    ds = read_image_zip(class_zip(tmp_path / "tiny.zip", x, y, ["one", "two", "three"]))
    recipe = fine_tune_recipe(len(ds.x_train))
    result = fine_tune(SHIPPED, ds, recipe, tmp_path / "out", "tiny-run", verbose=0)
    assert result.metrics.test_top1 >= 0.75, result.metrics
    assert result.training.start.head.startswith("linear probe")
    assert result.training.steps >= 150
    # Which model the run kept, and why, is in the card and its model card.
    card = read_card(result.checkpoint)
    assert card.training.kept_model and card.training.decision and card.training.start.why
    assert card.training.kept_model.startswith(("fine-tuned, epoch", "the linear probe on all"))
    assert card.training.decision.startswith("Kept ") and card.training.decision in \
        (Path(result.checkpoint) / "README.md").read_text()
    # The card's epochs are the kept model's: none when the run kept its start.
    assert card.training.epochs_trained == card.training.planned_epochs
    assert card.training.epochs == card.training.kept_epoch
