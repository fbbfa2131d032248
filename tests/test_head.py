"""The head a fine-tune starts from and the one it keeps (explorer.training.head)."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.checkpoints.store import load_checkpoint
from explorer.data.batches import training_split
from explorer.data.datasets import Dataset
from explorer.model.predict import accuracy_metrics, predict_logits
from explorer.training.head import choose_head
from explorer.training.recipe import TrainConfig
from explorer.training.tuning import fine_tune_recipe
from tests.helpers import pick


def test_head_rows_give_the_base_predictions_at_step_0(tiny_checkpoints, cifar10):
    """New classes that are base classes (in another order, other case) start from the base's rows."""
    model, card = load_checkpoint(tiny_checkpoints["spt_lsa"])
    classes = ["frog", "Cat", "ship"]
    x, y = pick(cifar10, ["frog", "cat", "ship"], 30)
    ds = Dataset("three", x, y, x[:20], y[:20], classes)
    base_logits = predict_logits(model, x)
    rows = [card.class_names.index(c.lower()) for c in classes]
    # Without a validation split there is nothing to weigh the rows against: they are the start.
    prepared, start, _ = choose_head(model, card.class_names, ds, fine_tune_recipe(len(x), validation_fraction=0.0))
    assert start.head == "base rows" and prepared.output_shape == (None, 3)
    np.testing.assert_allclose(predict_logits(prepared, x), base_logits[:, rows], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["vanilla", "spt_lsa"])
def test_the_probe_replaces_the_base_rows_only_where_it_does_better_out_of_fold(tiny_checkpoints, cifar10,
                                                                                 variant):
    """Linear probing, then fine-tuning: known classes start from the base's rows or from the probe, whichever
    scores higher on every labelled image (the probe out of fold, 5-fold cross-validation); rows win ties.
    The start's validation top-1 is reported as epoch 0 either way."""
    from explorer.training.head import pooled_features
    from explorer.training.linear_probe import LinearHead, cross_validated_probe
    model, card = load_checkpoint(tiny_checkpoints[variant])
    classes = ["cat", "dog", "horse", "deer"]
    x, y = pick(cifar10, classes, 60)
    ds = Dataset("four", x, y, x[:20], y[:20], classes)
    recipe = fine_tune_recipe(len(x), known_classes=True)
    rows = [card.class_names.index(c) for c in classes]
    (fx, fy), (vx, vy) = training_split(ds, recipe)
    x_all, y_all = np.concatenate([fx, vx]), np.concatenate([fy, vy])
    plain = pooled_features(model, x_all)
    rows_all = LinearHead(*(np.asarray(w, np.float64)[..., rows] for w in model.get_layer("head").get_weights()),
                          l2=0.0).accuracy(plain, y_all)
    probe = cross_validated_probe(plain, y_all, 4, extra=pooled_features(model, x_all[:, :, ::-1]),
                                  seed=recipe.seed)
    prepared, start, choice = choose_head(model, card.class_names, ds, recipe)
    assert f"{100 * rows_all:.1f} %" in start.why and f"{100 * probe.accuracy:.1f} %" in start.why
    if rows_all >= probe.accuracy:
        assert start.head == "base rows" and choice.fallback_name == "the base's rows"
    else:
        assert start.head.startswith("linear probe") and choice.fallback_name.startswith("the linear probe on all")
    assert start.val_top1 == pytest.approx(accuracy_metrics(predict_logits(prepared, vx), vy).top1)
    assert choice.start_correct.sum() == round(start.val_top1 * len(vy))


def test_other_classes_start_from_a_linear_probe(tiny_checkpoints, cifar10):
    model, card = load_checkpoint(tiny_checkpoints["vanilla"])
    x, y = pick(cifar10, ["airplane", "frog"], 40)
    ds = Dataset("two", x, y, x[:10], y[:10], ["sky things", "green things"])
    prepared, start, _ = choose_head(model, card.class_names, ds, fine_tune_recipe(len(x)))
    assert start.head.startswith("linear probe") and start.val_top1 > 0.5
    frozen, _, _ = choose_head(load_checkpoint(tiny_checkpoints["vanilla"])[0], card.class_names, ds,
                             TrainConfig(head_init="new", freeze_backbone=True))
    assert [layer.name for layer in frozen.layers if layer.trainable and layer.weights] == ["head"]


def _choice(start_correct, fallback):
    from explorer.training.head import HeadChoice
    return HeadChoice("linear probe (L2 0.01)", "why", fallback, "the linear probe on all 40 labelled images",
                      np.asarray(start_correct, bool), "the linear classifier on the base's features")


def test_settle_keeps_a_fine_tuned_epoch_only_when_it_beats_its_start_clearly(tiny_checkpoints, cifar10):
    from explorer.model.models import HEAD
    from explorer.training.head import settle
    model, _ = load_checkpoint(tiny_checkpoints["vanilla"])
    x, y = cifar10.x_test[:40], cifar10.y_test[:40]
    start_weights = [w.copy() for w in model.get_weights()]
    predicted = predict_logits(model, x).argmax(-1)
    correct = predicted == y
    fallback = tuple(np.full_like(w, 0.5) for w in model.get_layer(HEAD).get_weights())

    def record(kept):
        from explorer.core.card import Metrics, Start, Training
        from explorer.training.fitting import RunRecord
        return RunRecord([], Metrics.from_json({"val_top1": 0.9, "loss": 1.0}),
                         Training(kept_epoch=kept, epochs=5, start=Start(val_top1=0.25, val_top5=0.5)))

    # The "fine-tuned" model is the base itself: judged against a start that was wrong everywhere it is right,
    # it is clearly better and stays.
    won = record(3)
    settle(model, won, start_weights, _choice(np.zeros(40, bool), fallback), (x, y))
    t = won.training
    assert t.kept_model == "fine-tuned, epoch 3" and (t.epochs, t.epochs_trained) == (3, 5)
    assert t.decision == ("Kept the fine-tuned model (epoch 3 of 5): on the 40 held-out validation images it "
                             f"did clearly better than where it started ({correct.sum():+d} images).")
    assert f"epoch 3 got {correct.sum()} right that the start got wrong and 0 wrong" in t.decision_detail
    # Against a start that got the same images right, it gains nothing: the start's backbone and the
    # fallback head come back, and the record says so.
    model.get_layer(HEAD).set_weights([w * 2 for w in model.get_layer(HEAD).get_weights()])
    level = record(2)
    settle(model, level, start_weights, _choice(correct, fallback), (x, y))
    assert level.training.kept_model == "the linear probe on all 40 labelled images"
    t = level.training
    assert (t.kept_epoch, t.epochs, t.epochs_trained) == (0, 0, 5)
    assert t.decision.startswith("Kept the linear classifier") and "was not clearly better on the 40 held-out " \
        "validation images (+0 images), so the 5 epochs were set aside" in t.decision
    assert "McNemar" not in t.decision and "standard error" not in t.decision  # the numbers: in the detail
    assert level.metrics.to_json() == {"loss": 1.0, "val_top1": 0.25, "val_top5": 0.5}
    for got, want in zip(model.get_layer(HEAD).get_weights(), fallback, strict=True):
        np.testing.assert_array_equal(got, want)
    n_head = len(model.get_layer(HEAD).get_weights())
    for got, want in zip(model.get_weights()[:-n_head], start_weights[:-n_head], strict=True):
        np.testing.assert_array_equal(got, want)
    # When the start itself was kept (no epoch beat it), the fallback is what the run returns.
    none = record(0)
    settle(model, none, start_weights, _choice(correct, fallback), (x, y))
    assert none.training.kept_model.startswith("the linear probe") and "no fine-tuned epoch" in \
        none.training.decision
    # On fewer validation images than it takes to tell them apart, the decision says so.
    from explorer.training.recipe import FINE_TUNE
    few = record(0)
    settle(model, few, start_weights, _choice(correct[:5], fallback), (x[:5], y[:5]))
    assert (f"(5 validation images are fewer than the {FINE_TUNE.min_validation_images} it takes to tell them apart: "
            "one image is worth 20 points).") in few.training.decision
