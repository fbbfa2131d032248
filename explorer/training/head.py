"""The head a fine-tune starts from and the one it ends with: the base's own head or its rows for the new
classes, or a linear probe on the frozen features, chosen by cross-validation before any step; and, after
the run, the fine-tuned epoch kept only when it beats that start clearly on the validation images."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import keras
import numpy as np

from explorer.core.card import Metrics, Start
from explorer.data.batches import training_split
from explorer.data.datasets import Dataset
from explorer.model.models import HEAD, features_model, freeze_backbone, replace_head
from explorer.model.predict import PREDICT_BATCH, accuracy_metrics, predict_logits
from explorer.training.linear_probe import (
    LinearHead,
    clearly_better,
    cross_validated_probe,
    fit_logistic,
    fit_probe,
    paired_gain,
)
from explorer.training.recipe import FINE_TUNE, TrainConfig

if TYPE_CHECKING:
    from explorer.training.fitting import RunRecord


def base_rows(base_classes: list[str], classes: list[str]) -> list[int] | None:
    """Where each of `classes` sits in the base's class list (matched case-insensitively), or None when
    any of them is not a base class."""
    index = {str(c).strip().lower(): i for i, c in enumerate(base_classes)}
    rows = [index.get(str(c).strip().lower()) for c in classes]
    return None if not rows or None in rows else rows


def pooled_features(model, x: np.ndarray, batch_size: int | None = None, features=None) -> np.ndarray:
    """What the classifier head sees (the pooled, normalised tokens) for uint8 images `x`; `features`: the
    model up to its head, when one is at hand (its compiled predict step is reused)."""
    features = features or features_model(model)
    return predict_logits(features, x, batch_size or PREDICT_BATCH)



@dataclass
class HeadChoice:
    """What a fine-tune's "auto" head decided before any step, and what the run falls back to.

    `fallback` (kernel, bias) is the head the run returns, on the base's own backbone, when no fine-tuned
    epoch beats its start clearly on the validation split: the base's head or rows, or the probe refitted
    on every labelled image. `start_correct`: which validation images the start gets right."""

    how: str
    why: str
    fallback: tuple[np.ndarray, np.ndarray]
    fallback_name: str
    start_correct: np.ndarray
    # The fallback in a reader's words ("the base model's own answers for these classes, unchanged").
    fallback_plain: str = ""



def choose_head(model, base_classes: list[str], dataset: Dataset, recipe: TrainConfig, base_head=None,
                features=None):
    """(model, start metrics, HeadChoice or None): the model with the head the fine-tune starts from, how it
    scores, and what "auto" decided.

    With `recipe.head_init` "auto": the base's own classes keep the base's head; classes that are all among
    the base's take the base's rows for them (so step 0 scores what the base scores on them); any other
    class list gets a linear probe (logistic regression on the frozen pooled features and their mirror
    images). Where there is a validation split, the probe's L2 and the choice between it and the base's
    head or rows are made by 5-fold cross-validation over every labelled image (the base's head judged on
    all of them, the probe out of fold), not on the validation split alone, whose few hundred images move
    a verdict by several points; the start head is then fitted on the training split only, so the
    validation split stays a fair judge of what fine-tuning adds (see settle). "probe" always fits the
    probe (L2 chosen on the validation split); "new" is a freshly initialised head. The backbone is frozen
    when the recipe says so. `base_head` (the base's kernel and bias) is given when `model` already has a
    head of the dataset's size (a WarmModel), whose weights are then all set here; `features`: the model up
    to its head.
    """

    n = dataset.num_classes
    (x_fit, y_fit), val = training_split(dataset, recipe)
    model, how, features = _start_head(model, base_classes, dataset, recipe, base_head, features)
    head = model.get_layer(HEAD)
    features = features or features_model(model)
    choice = None
    if recipe.head_init == "auto" and val is not None:
        choice = _cross_validated_head(model, features, how, (x_fit, y_fit), val, n, recipe.seed)
        how = choice.how
    elif recipe.head_init == "probe" or (recipe.head_init == "auto" and (how == "new" or recipe.freeze_backbone)):
        train_features = pooled_features(model, np.concatenate([x_fit, x_fit[:, :, ::-1]]), features=features)
        val_features = pooled_features(model, val[0], features=features) if val is not None else None
        probe = fit_probe(train_features, np.concatenate([y_fit, y_fit]), n, val_features,
                          val[1] if val is not None else None)
        head.set_weights([probe.kernel.astype("float32"), probe.bias.astype("float32")])
        how = f"linear probe (L2 {probe.l2:g})"
    freeze_backbone(model, recipe.freeze_backbone)
    start = Start(head=how, why=choice.why if choice is not None else None)
    if val is not None:
        logits = predict_logits(model, val[0])
        metrics = accuracy_metrics(logits, val[1])
        start.val_top1, start.val_top5 = metrics.top1, metrics.top5
        if choice is not None:
            choice.start_correct = logits.argmax(-1) == val[1]
    return model, start, choice


def _start_head(model, base_classes: list[str], dataset: Dataset, recipe: TrainConfig, base_head, features):
    """(model, how, features): the model with a head of the dataset's size holding the base's head ("kept":
    the same classes), the base's rows for the dataset's classes ("base rows", with "auto") or a new head
    ("new"); `features` is None when the model changed under it."""

    n = dataset.num_classes
    fresh = base_head is None
    if fresh:
        base_head = tuple(np.asarray(w) for w in model.get_layer(HEAD).get_weights())
        if model.output_shape[-1] != n:
            model = replace_head(model, n)
            features = None
    kernel, bias = base_head
    same = kernel.shape[-1] == n and [str(c) for c in base_classes] == list(dataset.class_names)
    rows = base_rows(base_classes, dataset.class_names) if len(base_classes) == kernel.shape[-1] else None
    head = model.get_layer(HEAD)
    how = "kept" if same else "new"
    if same:
        head.set_weights([kernel, bias])
    elif rows is not None and recipe.head_init == "auto":
        head.set_weights([kernel[:, rows], bias[rows]])
        how = "base rows"
    elif not fresh:  # a warm model's head holds the last run's weights: a new head, as replace_head makes
        head.set_weights([np.asarray(keras.initializers.GlorotUniform(seed=recipe.seed)(head.kernel.shape)),
                          np.zeros(head.bias.shape, "float32")])
    return model, how, features


def _cross_validated_head(model, features, how: str, fit, val, n: int, seed: int) -> HeadChoice:
    """The "auto" decision on every labelled image (see choose_head); sets the start head on `model`."""
    head = model.get_layer(HEAD)
    x_all, y_all = np.concatenate([fit[0], val[0]]), np.concatenate([fit[1], val[1]])
    both = pooled_features(model, np.concatenate([x_all, x_all[:, :, ::-1]]), features=features)
    plain, mirrored = both[:len(x_all)], both[len(x_all):]
    probe = cross_validated_probe(plain, y_all, n, extra=mirrored, seed=seed)
    base = LinearHead(*(np.asarray(w, np.float64) for w in head.get_weights()), l2=0.0)
    labelled = f"{len(y_all)} labelled images"
    probe_name = f"linear probe (L2 {probe.l2:g})"
    if how in ("kept", "base rows"):
        name = "the base's head" if how == "kept" else "the base's rows"
        base_top1 = base.accuracy(plain, y_all)
        scores = (f"{name} scored {100 * base_top1:.1f} % on the {labelled}, the probe {100 * probe.accuracy:.1f} % "
                  f"out of fold (5-fold cross-validation)")
        if base_top1 >= probe.accuracy:
            plain = ("the base model as it was (its own head)" if how == "kept" else
                     "the base model's own answers for these classes (its head's rows for them), unchanged")
            return HeadChoice(how, scores, (base.kernel.astype("float32"), base.bias.astype("float32")), name,
                              None, plain)
        why = scores
    else:
        why = (f"new classes: the probe scored {100 * probe.accuracy:.1f} % out of fold (5-fold cross-validation) "
               f"on the {labelled}")
    k = len(fit[1])
    start = fit_logistic(np.concatenate([plain[:k], mirrored[:k]]), np.concatenate([fit[1], fit[1]]), n,
                         probe.l2)
    head.set_weights([start.kernel.astype("float32"), start.bias.astype("float32")])
    return HeadChoice(probe_name, why, (probe.head.kernel.astype("float32"), probe.head.bias.astype("float32")),
                      f"the linear probe on all {labelled} (L2 {probe.l2:g})", None,
                      f"a linear classifier on the base model's features (its backbone unchanged), fitted on all "
                      f"{labelled}")


def settle(model, record: RunRecord, start_weights: list, choice: HeadChoice | None, val) -> None:
    """Keeps the fine-tuned epoch that validation chose only when it beats its start clearly on the same
    validation images (a paired comparison: a net gain of over FINE_TUNE.margin_z standard errors); else the
    model becomes the start's backbone with the fallback head (the probe refitted on every labelled image,
    or the base's head or rows). Either way the record says which model was kept (`kept_model`), why in
    plain words (`decision`) and the numbers behind it (`decision_detail`); `epochs` becomes the kept
    model's epochs of fine-tuning and `epochs_trained` says how many ran."""
    training = record.training
    kept = training.kept_epoch
    ran = training.epochs
    training.epochs_trained = ran
    if choice is None:
        training.kept_model = f"fine-tuned, epoch {kept}" if kept else "the start head"
        training.decision = (f"Kept epoch {kept} of {ran}, the one with the best validation top-1."
                             if val is not None and kept else
                             "Kept the start head: no epoch did better on validation." if val is not None else
                             f"Kept the last epoch ({ran}): there is no validation split to choose by.")
        training.epochs = kept if val is not None else ran
        return
    n = len(val[1])
    few = (f" ({n} validation images are fewer than the {FINE_TUNE.min_validation_images} it takes to tell them "
           f"apart: one image is worth {100 / n:.3g} points)" if n < FINE_TUNE.min_validation_images else "")
    if kept:
        correct = predict_logits(model, val[0]).argmax(-1) == val[1]
        gained, lost = paired_gain(correct, choice.start_correct)
        spread = float(np.sqrt(gained + lost))
        numbers = (f"on the {n} validation images epoch {kept} got {gained} right that the start got wrong and "
                   f"{lost} wrong that it got right: a net {gained - lost:+d}"
                   + (f", {(gained - lost) / spread:.2f} standard errors (McNemar's, sqrt({gained} + {lost}))"
                      if spread else "")
                   + f"; over {FINE_TUNE.margin_z:g} needed. How the start was chosen: {choice.why}")
        if clearly_better(gained, lost, FINE_TUNE.margin_z):
            training.kept_model = f"fine-tuned, epoch {kept}"
            training.decision = (f"Kept the fine-tuned model (epoch {kept} of {ran}): on the {n} held-out "
                                 f"validation images it did clearly better than where it started "
                                 f"({gained - lost:+d} images){few}.")
            training.decision_detail = numbers
            training.epochs = kept
            return
        why = (f"fine-tuning (its best epoch, {kept} of {ran}) was not clearly better on the {n} held-out "
               f"validation images ({gained - lost:+d} images), so the {ran} epochs were set aside")
        detail = numbers
    else:
        why = f"no fine-tuned epoch of {ran} scored above it on the {n} held-out validation images"
        detail = f"How the start was chosen: {choice.why}"
    model.set_weights(start_weights)
    model.get_layer(HEAD).set_weights(list(choice.fallback))
    start = training.start
    metrics = {k: v for k, v in record.metrics.to_json().items() if not k.startswith("val_")}
    metrics.update({k: getattr(start, k) for k in ("val_top1", "val_top5")
                    if start is not None and getattr(start, k) is not None})
    record.metrics = Metrics.from_json(metrics)
    training.kept_epoch = 0
    training.epochs = 0
    training.kept_model = choice.fallback_name
    training.decision = f"Kept {choice.fallback_plain or choice.fallback_name}: {why}{few}."
    training.decision_detail = detail
