"""A fine-tuning job as both processes read it: a request validated into a Plan (the data split once, one
recipe, one or two members: base checkpoints, or a new model), and the data a request names."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from explorer.checkpoints.store import NAME_MAX, CheckpointError, name_within, read_card, validate_name
from explorer.core.card import Card
from explorer.core.settings import Settings
from explorer.data.batches import training_split, validation_count
from explorer.data.datasets import Dataset
from explorer.data.folders import held_out_count, held_out_problem, read_image_zip
from explorer.model.config import PRESETS, VARIANTS
from explorer.training.runs import recipe_for
from explorer.training.tuning import fine_tune_recipe

ZIP = "zip of class folders"
# The part of each class of a zip held out to test the models (none with "Train on all images").
TEST_FRACTION = 0.2


class JobError(ValueError):
    """A fine-tuning request that cannot run; the message says which field and why."""


@dataclass(frozen=True)
class Limits:
    """What a run may ask for (a public Space caps these: EXPLORER_MAX_EPOCHS, _IMAGES, _ZIP_MB)."""

    max_epochs: int = Settings.max_epochs
    max_images: int = Settings.max_images
    max_zip_mb: int = Settings.max_zip_mb

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(settings.max_epochs, settings.max_images, settings.max_zip_mb)


@dataclass
class Member:
    """One model of a job: the slot it came from ("A", "B" or ""), its base checkpoint folder (None: a
    new model of `preset`/`variant`), and the name of the checkpoint it will be saved as."""

    tag: str
    base: str | None
    name: str
    label: str
    preset: str | None = None
    variant: str | None = None
    classes: list = field(default_factory=list)  # the base's class names


@dataclass(frozen=True)
class Base:
    """A checkpoint to fine-tune as the app found it: its slot's tag ("A", "B", or "" alone), its label, the
    folder the worker loads (a Hub model's is in the app's cache) and its card."""

    tag: str
    label: str
    folder: str
    card: Card

    @property
    def image_size(self) -> int:
        return int(self.card.config["image_size"])


@dataclass
class Plan:
    """A validated job: every member trains on `dataset` (split once) with the same recipe."""

    members: list[Member]
    dataset: Dataset
    recipe: dict  # fine_tune_recipe / TrainConfig overrides: epochs, batch_size, learning_rate, freeze
    description: str
    scratch: bool = False

    def to_json(self) -> dict:
        """The plan without its images (jobfolder.py keeps those beside it): its dataset by name, classes,
        source and note."""
        return {"members": [m.__dict__ for m in self.members], "recipe": self.recipe, "scratch": self.scratch,
                "dataset": {"name": self.dataset.name, "class_names": list(self.dataset.class_names),
                            "source": self.dataset.source, "note": self.dataset.note},
                "description": self.description}

    @classmethod
    def from_json(cls, data: dict, images: dict) -> Plan:
        """The plan `to_json` wrote, with its images: `images` holds x_train, y_train, x_test and y_test."""
        d = data["dataset"]
        dataset = Dataset(d["name"], images["x_train"], images["y_train"], images["x_test"], images["y_test"],
                          d["class_names"], d.get("source", ""), d.get("note", ""))
        return cls([Member(**m) for m in data["members"]], dataset, dict(data["recipe"]), data["description"],
                   scratch=data.get("scratch", False))


@dataclass(frozen=True)
class Splits:
    """How a plan's images are split for each of its models, counted by the code that splits them: `train`
    to train on, `validation` to decide whether a fine-tuned epoch is kept over its start, `test` to score."""

    train: int
    validation: int
    test: int


def plan_splits(plan: Plan) -> Splits:
    """The split every model of `plan` gets: the recipe's validation part of the training images (the recipe
    a run of the plan takes, its split drawn by the run's own training_split), and the test images."""
    d = plan.dataset
    recipe = recipe_for(plan.recipe, len(d.x_train), plan.scratch)  # the split is the same for every member
    counted = dataclasses.replace(d, x_train=np.arange(len(d.x_train)))  # the same split of indices, not images
    (fit, _), val = training_split(counted, recipe)
    return Splits(len(fit), 0 if val is None else len(val[0]), len(d.x_test))


def images_per_class_for(validation: int, num_classes: int, test_fraction: float = TEST_FRACTION) -> int:
    """The fewest images per class (in a zip of `num_classes` classes, `test_fraction` of each held out to
    test) for which a fine-tune's recipe validates on `validation` images or more."""
    n = 1
    while True:
        train = num_classes * (n - held_out_count(n, test_fraction))
        if validation_count(train, fine_tune_recipe(train).validation_fraction) >= validation:
            return n
        n += 1


def lsa_labels(plan: Plan) -> list[str]:
    """The labels of the plan's models that have LSA layers (whose tau a run's tau plot follows): a new
    model's variant, or its base's as its card says (a base whose card cannot be read counts as without)."""
    labels = []
    for m in plan.members:
        try:
            variant = m.variant or read_card(m.base).variant
        except (CheckpointError, OSError, ValueError):
            continue
        if variant in ("lsa", "spt_lsa"):
            labels.append(m.label)
    return labels


def check_number(name: str, value, low, high, integer: bool = True, auto: bool = False):
    """`value` as an int (or float) within [low, high]; with `auto`, None or 0 means "the recipe decides"."""
    if auto and (value is None or value == 0):
        return None
    if value is None:
        raise JobError(f"{name} is missing")
    if integer and float(value) != int(value):
        raise JobError(f"{name} must be a whole number, got {value}")
    if not low <= value <= high:
        raise JobError(f"{name} must be between {low} and {high}" + (" (0 = auto)" if auto else "")
                       + f", got {value}")
    return int(value) if integer else float(value)


def plan_job(members: list[Base], dataset: Dataset, epochs=None, learning_rate=None,
             batch_size=None, images=None, freeze: bool = False, name: str | None = None,
             limits: Limits = Limits(), scratch: tuple[str, str] | None = None, train_on_all: bool = False) -> Plan:
    """Validates a request into a plan.

    `members`: the base models (Base), one or two; empty with `scratch`
    = (preset, variant) for a new model. `dataset` is the whole data (train and test). `images` caps the
    training images (and the test images at a fifth of it); epochs, learning rate and batch size of None
    or 0 leave them to the default recipe. A held-out test part too small to judge the models by is
    refused before anything trains, unless `train_on_all` (the dataset then has no test images, and the
    run no test score).
    """
    epochs = check_number("epochs", epochs, 1, limits.max_epochs, auto=True)
    learning_rate = check_number("learning rate", learning_rate, 1e-6, 1.0, integer=False, auto=True)
    batch_size = check_number("batch size", batch_size, 1, 1024, auto=True)
    images = check_number("images", images, 2, limits.max_images, auto=True)
    if name:
        try:
            validate_name(name, room=len("-A"))  # a pair's checkpoints are the name tagged -A and -B
        except CheckpointError:
            raise JobError(f"the run name may hold letters, digits, '.', '_' and '-' only, starting with a "
                           f"letter or digit (at most {NAME_MAX - 2})") from None
    planned, size = _members(members, dataset.name, name, scratch)
    if dataset.x_train.shape[1:3] != (size, size):
        raise JobError(f"the images are {dataset.x_train.shape[1]}x{dataset.x_train.shape[2]} but the "
                       f"model takes {size}x{size}")
    if images is not None:
        dataset = dataset.subset(train=images, test=max(1, min(len(dataset.x_test), images // 5)), seed=0)
    if len(dataset.x_train) < 2 or len(set(dataset.y_train.tolist())) < 2:
        raise JobError(f"{dataset.name} has too few training images ({len(dataset.x_train)}) or classes "
                       f"to learn from")
    if not train_on_all:
        problem = held_out_problem(dataset)
        if problem:
            raise JobError(f"{problem} (tick “Train on all images”)")
    recipe = {"epochs": epochs, "learning_rate": learning_rate, "batch_size": batch_size,
              "freeze_backbone": bool(freeze)}
    what = " and ".join(m.label for m in planned)
    test = (f"{len(dataset.x_test)} test" if len(dataset.x_test) else "no test: all trained on, no test score")
    left_out = (f"; {dataset.unreadable} unreadable image{'s' if dataset.unreadable != 1 else ''} left out"
                if dataset.unreadable else "")
    plan = Plan(planned, dataset, recipe, "", scratch=scratch is not None)
    splits = plan_splits(plan)  # what each model trains on, as the card will record it, and validates on
    trained = f"{splits.train} train" + (f" + {splits.validation} validation" if splits.validation else "")
    plan.description = f"{what} on {dataset.name} ({trained} / {test} images, {dataset.num_classes} classes{left_out})"
    return plan


def _members(members: list[Base], data_name: str, name: str | None,
             scratch: tuple[str, str] | None) -> tuple[list[Member], int]:
    """(the job's members, the image size they all take): a new model of `scratch`, or each base in turn,
    named after the run (`name`, tagged -A and -B for a pair) or after its base and the data."""
    if scratch is not None:
        preset, variant = scratch
        if preset not in PRESETS or variant not in VARIANTS:
            raise JobError(f"choose a preset from {sorted(PRESETS)} and a variant from {list(VARIANTS)}")
        return [Member("", None, name or name_within(f"{data_name}-{variant}"), f"{variant} {preset} (new)", preset,
                       variant)], PRESETS[preset].image_size
    if not 1 <= len(members) <= 2:
        raise JobError("a fine-tune takes one or two base models")
    sizes = {m.image_size for m in members}
    if len(sizes) != 1:
        raise JobError(f"the two models take different image sizes {sorted(sizes)}; they cannot share "
                       f"one split")
    planned = []
    for m in members:
        base_name = m.card.name or Path(m.folder).name
        suffix = f"-{m.tag}" if len(members) == 2 and name else ""
        planned.append(Member(m.tag, str(m.folder),
                              (name + suffix) if name else name_within(f"{base_name}-ft-{data_name}"), m.label,
                              classes=list(m.card.class_names or [])))
    if len(planned) == 2 and planned[0].name == planned[1].name:
        planned[0].name, planned[1].name = name_within(planned[0].name, "-A"), name_within(planned[1].name, "-B")
    return planned, sizes.pop()


def job_data(source: str, zip_file, load_cifar, limits: Limits, image_size: int,
             train_on_all: bool = False) -> Dataset:
    """The data a job asks for: an uploaded zip of class folders (read within the limits, TEST_FRACTION of each
    class held out to test, or all for training with `train_on_all`) or a CIFAR dataset through
    `load_cifar(name)`."""
    if source == ZIP:
        if zip_file is None:
            raise JobError("upload a zip of class folders (one sub-folder of images per class)")
        return read_image_zip(zip_file, image_size=image_size, max_bytes=limits.max_zip_mb * 2**20,
                              max_files=limits.max_images * 2, test_fraction=0.0 if train_on_all else TEST_FRACTION)
    if source in ("cifar10", "cifar100"):
        return load_cifar(source)
    raise JobError(f"unknown data source {source!r}; choose a zip of class folders, cifar10 or cifar100")
