"""Training batches and splits: batches that are a pure function of (seed, epoch, index), whatever asks for
them and whenever (a resumed run draws what the uninterrupted one drew); the held-out validation split and
the class-balanced subsets of the small-data study, the same for the same recipe."""

from __future__ import annotations

import math

import keras
import numpy as np

from explorer.data.augment import augment_batch, mix_batch
from explorer.data.datasets import Dataset, DatasetError


class BatchPlan:
    """Which images each step of each epoch takes, and the step's own random generator: a pure function of
    (seed, epoch, index), whatever asks for them and whenever (a resumed run draws what the uninterrupted
    one drew). Every step has `batch_size` images: a shuffled epoch's last step is topped up from the start
    of its order, an unshuffled one repeats its own images (`real` says how many are not repeats).

    With `repeats` (shuffled only), an epoch is that many passes over the images, each in its own order."""

    def __init__(self, count: int, batch_size: int, seed: int, shuffle: bool, repeats: int = 1):
        self.count, self.batch_size, self.seed, self.shuffle = count, batch_size, seed, shuffle
        self.repeats = repeats if shuffle else 1
        # tf.data prefetches the next epoch's first batches before the epoch ends: an epoch is known by
        # counting calls from `begin` on (Keras' peek at the shapes comes first).
        self.first_epoch, self.calls, self.counting = 0, 0, False
        self.cached = (0, self._order(0))

    def begin(self, epochs_done: int = 0) -> None:
        """Training starts, or resumes after `epochs_done` epochs: the next call is that epoch's first."""
        self.first_epoch, self.calls, self.counting = epochs_done, 0, True

    def _order(self, epoch):
        if not self.shuffle:
            return np.arange(self.count)
        rng = np.random.default_rng([self.seed, epoch])
        return np.concatenate([rng.permutation(self.count) for _ in range(self.repeats)])

    def __len__(self):
        return math.ceil(self.count * self.repeats / self.batch_size)

    def take(self, i: int) -> tuple[np.ndarray, int, np.random.Generator]:
        """(the step's image indices, how many are real, its generator) for step `i` of the current epoch."""
        epoch = 0
        if self.counting and self.shuffle:
            epoch = self.first_epoch + self.calls // len(self)
            self.calls += 1
        if self.cached[0] != epoch:
            self.cached = (epoch, self._order(epoch))
        order = self.cached[1]
        index = np.sort(order[i * self.batch_size:(i + 1) * self.batch_size])
        real = len(index)
        if real < self.batch_size:
            index = np.concatenate([index, np.resize(order if self.shuffle else index, self.batch_size - real)])
        return index, real, np.random.default_rng([self.seed, epoch, i])


def make_batches(x, y, num_classes, batch_size, augment, seed, shuffle, mixup_alpha=0.0, cutmix_alpha=0.0,
                 mix_prob=1.0, repeats=1):
    """A keras PyDataset of (float images 0-255, one-hot labels), augmented in numpy per batch, in the steps
    of a BatchPlan (every batch has `batch_size` images, so a compiled step never meets a new shape: JAX
    compiles again for each). Unshuffled (validation) batches' repeated images have sample weight 0, so
    they count for nothing (the real images' weight makes the validation loss and the weighted metrics
    their exact means over the real images). With a mixup or cutmix alpha, batches are also mixed (see
    augment.mix_batch) and labels become soft."""
    plan = BatchPlan(len(x), batch_size, seed, shuffle, repeats)

    class Batches(keras.utils.PyDataset):
        steps = len(plan)  # optimizer steps per epoch: one per item

        def begin(self, epochs_done: int = 0) -> None:
            plan.begin(epochs_done)

        def __len__(self):
            return len(plan)

        def steps_in(self, item: int) -> int:
            return 1

        def __getitem__(self, i):
            index, real, rng = plan.take(i)
            images = x[index]
            if augment:
                images = augment_batch(images, rng)
            images, labels = images.astype("float32"), np.eye(num_classes, dtype="float32")[y[index]]
            if not shuffle:
                # Repeats weigh 0 and real images all the same: the weighted metrics (compile's
                # weighted_metrics) then count each real image once, and so does the loss, which Keras
                # averages over every row of every batch (padding included): hence the factor.
                weights = (np.arange(batch_size) < real) * np.float32(len(self) * batch_size / len(x))
                return images, labels, weights.astype("float32")
            return mix_batch(images, labels, rng, mixup_alpha, cutmix_alpha, mix_prob)

    return Batches()


def validation_count(n: int, fraction: float) -> int:
    """How many of `n` training images split_validation holds out for validation."""
    return max(1, int(round(n * fraction))) if fraction else 0


def split_validation(x, y, fraction, seed):
    if not fraction:
        return (x, y), None
    order = np.random.default_rng(seed + 1).permutation(len(x))
    n_val = validation_count(len(x), fraction)
    val, train = np.sort(order[:n_val]), np.sort(order[n_val:])
    return (x[train], y[train]), (x[val], y[val])


def balanced_subset(y, n: int, num_classes: int, seed: int) -> np.ndarray:
    """Sorted indices of n images, n // num_classes of each class (one more for the first n % num_classes
    classes): each class's first images in one fixed order per class drawn from `seed`, so the subset of
    a smaller n is part of the subset of a larger one."""
    y = np.asarray(y)
    if n > len(y):
        raise DatasetError(f"a subset of {n} images was asked for, the training split has {len(y)}")
    rng = np.random.default_rng([seed, 7])
    keep = []
    for c in range(num_classes):
        members = np.flatnonzero(y == c)
        quota = n // num_classes + (1 if c < n % num_classes else 0)
        if quota > len(members):
            raise DatasetError(f"a class-balanced subset of {n} images needs {quota} of class {c}, "
                               f"the training split has {len(members)}")
        keep.append(members[rng.permutation(len(members))[:quota]])
    return np.sort(np.concatenate(keep))


def training_split(dataset: Dataset, recipe):
    """((x_train, y_train), (x_val, y_val) or None): the recipe's subset and held-out split of the training
    images, the same for the same recipe (a recipe.TrainConfig; fit and choose_head both use it)."""
    x, y = dataset.x_train, dataset.y_train
    split_seed = recipe.seed if recipe.split_seed is None else recipe.split_seed
    if recipe.train_subset and recipe.train_subset < len(x):
        keep = np.sort(np.random.default_rng(split_seed).permutation(len(x))[:recipe.train_subset])
        x, y = x[keep], y[keep]
    (x, y), val = split_validation(x, y, recipe.validation_fraction, split_seed)
    if recipe.balanced_subset:
        keep = balanced_subset(y, recipe.balanced_subset, dataset.num_classes, split_seed)
        x, y = x[keep], y[keep]
    return (x, y), val
