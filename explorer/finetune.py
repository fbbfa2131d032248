"""Starting from a trained model: the short fine-tune recipe, the classifier head (the base's own rows, a
linear probe on frozen features, or a new one), a continued stage of the base's own training, and
`fine_tune` itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from explorer.batches import training_split
from explorer.card import Card, Lineage
from explorer.config import ViTConfig
from explorer.data import Dataset, DatasetError
from explorer.fitting import Cancelled, drop_backup, finish_run, fit
from explorer.linear import clearly_better, paired_gain
from explorer.predict import accuracy_metrics, predict_logits
from explorer.recipe import TrainConfig

# The default short fine-tuning recipe (fine_tune_recipe): about this many optimizer steps in all, but no more
# than FT_IMAGE_BUDGET images, at a peak learning rate that depends on whether the new classes are classes the
# base already knows. Since the run starts from the better of the base's rows and the linear probe (LP-FT),
# 4,000 images keep it at or above the probe on both zips of bench/finetune_quality.py (8,000 did not: 0.987
# of the probe's accuracy on the known classes), in half the time (bench/finetune_speed.py).
FT_TARGET_STEPS = 500
FT_IMAGE_BUDGET = 4000
FT_LEARNING_RATE = 5e-4        # a task the base never saw: its features have to move
FT_LEARNING_RATE_KNOWN = 1e-4  # the base's own classes: its features are already tuned for them
FT_WEIGHT_DECAY = 0.05
# A fine-tuned epoch replaces the head it started from only when, on the same validation images, the images
# it gains outnumber those it loses by this many standard errors (settle): a few hundred images judge a
# choice between epochs to within several points, which is as large as the gains being chosen between.
FT_MARGIN_Z = 1.0


def fine_tune_recipe(n_images: int, epochs: int | None = None, batch_size: int | None = None,
                     learning_rate: float | None = None, freeze_backbone: bool = False,
                     known_classes: bool = False, **overrides) -> TrainConfig:
    """The default recipe for fine-tuning a checkpoint on `n_images` training images (before the 10 %
    validation split): a head that starts where it can already score (the base's rows, or a linear probe on
    the frozen features; see choose_head), then the whole model with AdamW, warmup + cosine, crop + flip,
    with a batch size scaled to the data so that even a few hundred images give up to FT_TARGET_STEPS steps
    (FT_IMAGE_BUDGET images at most, which keeps about a thousand images near a minute on 2 CPU cores),
    keeping the epoch (step 0 included) that does best on the validation split. `known_classes`: the new
    classes are all base classes (a gentler learning rate). Given values win."""
    validation_fraction = overrides.pop("validation_fraction", 0.1 if n_images >= 20 else 0.0)
    n_fit = max(1, n_images - int(round(n_images * validation_fraction)))
    if batch_size is None:
        batch_size = int(np.clip(2 ** round(math.log2(max(n_fit / 24, 1))), 16, 128))
    batch_size = max(1, min(batch_size, n_fit))
    if epochs is None:
        steps = min(FT_TARGET_STEPS, FT_IMAGE_BUDGET / batch_size)
        epochs = int(np.clip(round(steps / math.ceil(n_fit / batch_size)), 1, 30))
    if learning_rate is None:
        learning_rate = FT_LEARNING_RATE_KNOWN if known_classes else FT_LEARNING_RATE
    return TrainConfig(**{"epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate,
                          "weight_decay": FT_WEIGHT_DECAY, "validation_fraction": validation_fraction,
                          "freeze_backbone": freeze_backbone, "head_init": "auto", "keep_best": True,
                          **overrides})


class WarmModel:
    """One base checkpoint, loaded and shaped for a number of classes (its own head, or a new one of that
    size) and frozen or not, as a long-lived worker keeps it: `model` keeps its compiled steps from run to
    run, `restore()` puts the base's weights back before each run, so nothing of an earlier run (its data,
    its trained weights, its optimizer state) reaches the next."""

    def __init__(self, base: str | Path, num_classes: int, frozen: bool):
        import keras

        from explorer.checkpoints import load_checkpoint
        from explorer.models import HEAD, freeze_backbone, replace_head
        model, self.card = load_checkpoint(base)
        head = model.get_layer(HEAD)
        self.base_head = tuple(np.asarray(w) for w in head.get_weights())
        if model.output_shape[-1] != num_classes:
            model = replace_head(model, num_classes)
        self.model = freeze_backbone(model, frozen)
        self.features = keras.Model(model.inputs, model.get_layer(HEAD).input)
        head_weights = {id(v) for v in self.model.get_layer(HEAD).weights}
        self._backbone = [v for v in self.model.weights if id(v) not in head_weights]
        self._saved = [np.asarray(v.numpy()) for v in self._backbone]

    def restore(self) -> None:
        for variable, value in zip(self._backbone, self._saved, strict=True):
            variable.assign(value)


class WarmModels:
    """The models a long-lived fine-tuning worker keeps between runs (explorer.jobs's `serve`): one
    WarmModel per (base checkpoint as it is on disk, number of classes, frozen backbone), the least recently
    used dropped beyond `size`. A repeat run of the same shape then loads nothing and compiles nothing."""

    def __init__(self, size: int = 4):
        from collections import OrderedDict
        self.size = size
        self._models: OrderedDict = OrderedDict()
        self.loads = 0

    @staticmethod
    def _key(base: str | Path, num_classes: int, frozen: bool) -> tuple:
        folder = Path(base).resolve()
        stamps = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(folder.iterdir())
                       if p.is_file()) if folder.is_dir() else ()
        return str(folder), stamps, int(num_classes), bool(frozen)

    def get(self, base: str | Path, num_classes: int, frozen: bool) -> WarmModel:
        key = self._key(base, num_classes, frozen)
        warm = self._models.pop(key, None)
        if warm is None:
            warm = WarmModel(base, num_classes, frozen)
            self.loads += 1
        else:
            warm.restore()
        self._models[key] = warm
        while len(self._models) > self.size:
            self._models.popitem(last=False)
        return warm

    def __len__(self) -> int:
        return len(self._models)


def fine_tune(base: str | Path, dataset: Dataset, recipe: TrainConfig, out_dir: str | Path,
              name: str | None = None, verbose: int = 1, progress=None, cancel=None,
              backup: str | None = None, extend: bool = False, warm: WarmModels | None = None) -> dict:
    """Continues training a checkpoint on `dataset`; its head is chosen by `choose_head` first.

    With `extend`, this is a second stage of the base's own training rather than a fine-tune: the
    dataset, its held-out split and the class list must be the base's, and the new checkpoint's history,
    epoch count, wall time and throughput cover both stages (see `continued_record`).
    With `warm`, the model comes from (and stays in) that cache, with its compiled steps.
    """
    import time

    from explorer.checkpoints import load_checkpoint
    began = time.perf_counter()
    if warm is not None:
        kept = warm.get(base, dataset.num_classes, recipe.freeze_backbone)
        model, card, base_head, features = kept.model, kept.card, kept.base_head, kept.features
    else:
        (model, card), base_head, features = load_checkpoint(base), None, None
    config = ViTConfig.from_dict(card.config)
    if dataset.x_train.shape[1:3] != (config.image_size, config.image_size):
        raise DatasetError(f"dataset images are {dataset.x_train.shape[1:3]} but the model takes "
                         f"{config.image_size}x{config.image_size}")
    if extend:
        check_continuation(card, dataset, recipe)
    model, start, choice = choose_head(model, card.class_names or [], dataset, recipe, base_head, features)
    if cancel is not None and cancel.is_set():
        raise Cancelled("training was cancelled; no checkpoint was written")
    start_weights = model.get_weights() if choice is not None else None
    record = fit(model, dataset, recipe, verbose=verbose, progress=progress, cancel=cancel, backup=backup,
                 start=start, base={"name": card.name, "created": card.created,
                                    "epochs": len(card.history or []), "continued": extend},
                 reuse=warm is not None)
    if not extend:
        settle(model, record, start_weights, choice, training_split(dataset, recipe)[1])
    record["training"]["timing"]["prepare_s"] = round(time.perf_counter() - began - record["training"]["wall_time_s"],
                                                      3)
    lineage = Lineage(name=card.name, source=str(base))
    if extend:
        record = continued_record(card, record)
        lineage.continued, lineage.epochs = True, len(card.history)
    suffix = f"{record['training']['epochs']}ep" if extend else f"ft-{dataset.name}"
    result = finish_run(model, record, config, card.preset, dataset, out_dir,
                     name or f"{'model' if card.name is None else card.name}-{suffix}", base=lineage)
    drop_backup(backup, record)
    return result


def base_rows(base_classes: list[str], classes: list[str]) -> list[int] | None:
    """Where each of `classes` sits in the base's class list (matched case-insensitively), or None when
    any of them is not a base class."""
    index = {str(c).strip().lower(): i for i, c in enumerate(base_classes)}
    rows = [index.get(str(c).strip().lower()) for c in classes]
    return None if not rows or None in rows else rows


def pooled_features(model, x: np.ndarray, batch_size: int | None = None, features=None) -> np.ndarray:
    """What the classifier head sees (the pooled, normalised tokens) for uint8 images `x`; `features`: the
    model up to its head, when one is at hand (its compiled predict step is reused)."""
    import keras

    from explorer.models import HEAD
    from explorer.predict import PREDICT_BATCH
    features = features or keras.Model(model.inputs, model.get_layer(HEAD).input)
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
    import keras

    from explorer.models import HEAD, freeze_backbone, replace_head
    n = dataset.num_classes
    (x_fit, y_fit), val = training_split(dataset, recipe)
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
    features = features or keras.Model(model.inputs, model.get_layer(HEAD).input)
    choice = None
    if recipe.head_init == "auto" and val is not None:
        choice = _cross_validated_head(model, features, how, (x_fit, y_fit), val, n, recipe.seed)
        how = choice.how
    elif recipe.head_init == "probe" or (recipe.head_init == "auto" and (how == "new" or recipe.freeze_backbone)):
        train_features = pooled_features(model, np.concatenate([x_fit, x_fit[:, :, ::-1]]), features=features)
        val_features = pooled_features(model, val[0], features=features) if val is not None else None
        from explorer.linear import fit_probe
        probe = fit_probe(train_features, np.concatenate([y_fit, y_fit]), n, val_features,
                          val[1] if val is not None else None)
        head.set_weights([probe.kernel.astype("float32"), probe.bias.astype("float32")])
        how = f"linear probe (L2 {probe.l2:g})"
    freeze_backbone(model, recipe.freeze_backbone)
    start = {"head": how}
    if choice is not None:
        start["why"] = choice.why
    if val is not None:
        logits = predict_logits(model, val[0])
        metrics = accuracy_metrics(logits, val[1])
        start.update(val_top1=metrics["top1"], val_top5=metrics["top5"])
        if choice is not None:
            choice.start_correct = logits.argmax(-1) == val[1]
    return model, start, choice


def _cross_validated_head(model, features, how: str, fit, val, n: int, seed: int) -> HeadChoice:
    """The "auto" decision on every labelled image (see choose_head); sets the start head on `model`."""
    from explorer.linear import LinearHead, cross_validated_probe, fit_logistic
    from explorer.models import HEAD
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
            return HeadChoice(how, scores, (base.kernel.astype("float32"), base.bias.astype("float32")), name,
                              None)
        why = scores
    else:
        why = (f"new classes: the probe scored {100 * probe.accuracy:.1f} % out of fold (5-fold cross-validation) "
               f"on the {labelled}")
    k = len(fit[1])
    start = fit_logistic(np.concatenate([plain[:k], mirrored[:k]]), np.concatenate([fit[1], fit[1]]), n,
                         probe.l2)
    head.set_weights([start.kernel.astype("float32"), start.bias.astype("float32")])
    return HeadChoice(probe_name, why, (probe.head.kernel.astype("float32"), probe.head.bias.astype("float32")),
                      f"the linear probe on all {labelled} (L2 {probe.l2:g})", None)


def settle(model, record: dict, start_weights: list, choice: HeadChoice | None, val) -> None:
    """Keeps the fine-tuned epoch that validation chose only when it beats its start clearly on the same
    validation images (a paired comparison: a net gain of over FT_MARGIN_Z standard errors); else the
    model becomes the start's backbone with the fallback head (the probe refitted on every labelled image,
    or the base's head or rows). Either way the record says which model was kept and why."""
    training = record["training"]
    kept = training["kept_epoch"]
    if choice is None:
        training["kept_model"] = f"fine-tuned epoch {kept}" if kept else "the start head"
        training["decision"] = "kept by validation top-1" if val is not None else "the last epoch (no validation split)"
        return
    if kept:
        correct = predict_logits(model, val[0]).argmax(-1) == val[1]
        gained, lost = paired_gain(correct, choice.start_correct)
        verdict = (f"on the {len(val[1])} validation images epoch {kept} got {gained} right that the start got "
                   f"wrong and {lost} wrong that it got right")
        if clearly_better(gained, lost, FT_MARGIN_Z):
            training["kept_model"] = f"fine-tuned epoch {kept}"
            training["decision"] = f"{verdict}: a clear gain (over {FT_MARGIN_Z:g} standard errors); {choice.why}"
            return
        verdict += f": not clearly better (a net gain over {FT_MARGIN_Z:g} standard errors is needed)"
    else:
        verdict = "no fine-tuned epoch beat the start on validation"
    from explorer.models import HEAD
    model.set_weights(start_weights)
    model.get_layer(HEAD).set_weights(list(choice.fallback))
    start = training.get("start") or {}
    record["metrics"] = {k: v for k, v in record["metrics"].items() if not k.startswith("val_")}
    record["metrics"].update({k: start[k] for k in ("val_top1", "val_top5") if k in start})
    training["kept_epoch"] = 0
    training["kept_model"] = choice.fallback_name
    training["decision"] = f"{verdict}; so {choice.fallback_name} ({choice.why})"


def check_continuation(card: Card, dataset: Dataset, recipe: TrainConfig) -> None:
    """Refuses a continuation that would not be the same training: other data, classes or held-out split.

    The split is a function of the number of images, the validation fraction and the seed, so those must
    match the base's; otherwise images the base validated on would now be trained on.
    """
    base_recipe, data = card.training.recipe or {}, card.dataset
    if not card.history or not base_recipe:
        raise DatasetError(f"{card.name} has no training history or base_recipe to continue")
    problems = []
    if data.name != dataset.name:
        problems.append(f"it was trained on {data.name!r}, not {dataset.name!r}")
    if list(card.class_names or []) != list(dataset.class_names):
        problems.append("its class list differs from the dataset's")
    for key in ("validation_fraction", "seed", "train_subset", "split_seed", "balanced_subset"):
        if base_recipe.get(key) != getattr(recipe, key):
            problems.append(f"its {key} was {base_recipe.get(key)!r}, this run's is {getattr(recipe, key)!r}")
    n = len(dataset.x_train) if not recipe.train_subset else min(recipe.train_subset, len(dataset.x_train))
    if recipe.balanced_subset:
        n = recipe.balanced_subset + int(data.validation_images or 0)
    seen = (data.train_images or 0) + (data.validation_images or 0)
    if seen != n:
        problems.append(f"it saw {seen} train+validation images, this dataset has {n}")
    if recipe.freeze_backbone:
        problems.append("a continuation trains the whole model (drop --freeze-backbone)")
    if problems:
        raise DatasetError(f"cannot continue {card.name}: " + "; ".join(problems)
                         + " (use a plain fine-tune for a different setup)")


def _stage(training: dict) -> dict:
    return {k: training.get(k) for k in ("epochs", "steps", "wall_time_s", "images_per_second", "device",
                                         "recipe")}


def continued_record(base_card: Card, record: dict) -> dict:
    """`record` (a run that continued `base_card`'s training) as one run: the base's history then this
    run's, epochs numbered from the start and tagged with their stage; epochs, steps and wall time
    summed; images/s over the whole; `recipe` stays the first stage's, `stages` lists every stage."""
    before = [dict(e.to_json(), stage=1 if e.stage is None else e.stage) for e in base_card.history or []]
    first = base_card.training
    stages = [s.to_json() for s in first.stages] or [_stage(first.to_json())]
    new = record["training"]
    stages.append(_stage(new))
    history = before + [dict(e, epoch=e["epoch"] + len(before), stage=len(stages)) for e in record["history"]]
    wall = sum(s.get("wall_time_s") or 0 for s in stages)
    images = sum((s.get("images_per_second") or 0) * (s.get("wall_time_s") or 0) for s in stages)
    devices = list(dict.fromkeys(s.get("device") for s in stages if s.get("device")))
    training = {**new, "epochs": len(history),
                "planned_epochs": sum(s.get("epochs") or 0 for s in stages[:-1]) + new.get("planned_epochs", 0),
                "steps": sum(s.get("steps") or 0 for s in stages),
                "wall_time_s": round(wall, 1),
                "images_per_second": round(images / wall, 1) if wall > 0 else None,
                "device": "; ".join(devices), "recipe": stages[0]["recipe"], "stages": stages}
    return {**record, "history": history, "training": training}
