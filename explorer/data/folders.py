"""Image folders and zips of class folders as datasets (split into training and test images), and
`load_dataset`: any dataset by name ("cifar10", "cifar100") or path (a packed .npz is explorer.packed's).
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from explorer.core.settings import Settings
from explorer.data.datasets import DATASETS, IMAGE_EXTENSIONS, Dataset, DatasetError, load_cifar
from explorer.data.inputs import UNDECODED, model_pixels, upright_rgb
from explorer.data.packed import load_packed


def _open_rgb(data: bytes, name: str, size: int) -> np.ndarray:
    """One image of a zip or folder as the model reads it: decoded as an upload alone is (upright_rgb)."""
    from PIL import Image
    kind = Path(name).suffix.lower()
    if kind in UNDECODED:
        raise DatasetError(f"{name} is not a readable image ({kind[1:].upper()} is not a format this app reads; "
                           f"save it as JPEG or PNG)")
    try:
        with Image.open(io.BytesIO(data)) as img:
            return model_pixels(upright_rgb(img, size), size)
    except Exception as e:
        raise DatasetError(f"{name} is not a readable image ({type(e).__name__}: {e})") from None


# A folder of photos may hold a few files that no decoder reads (a truncated copy, another format under a .jpg
# name): up to this share of its images are left out, and the dataset's note says which; more, and it is refused.
MAX_UNREADABLE = 0.1


def _read_images(named: list[tuple[str, int, Callable[[], bytes]]], classes: list[str], size: int, where: str):
    """The images of `named` ((name, label, what reads its bytes), read one at a time) as arrays and labels,
    and how many were left out unreadable with a note that says which (MAX_UNREADABLE); a DatasetError when
    more are, when a class has none, or when reading refuses."""
    x, y, unreadable = [], [], []
    for name, label, read in named:
        data = read()
        try:
            x.append(_open_rgb(data, name, size))
            y.append(label)
        except DatasetError as e:
            unreadable.append(str(e))
    if not unreadable:
        return np.stack(x), np.asarray(y), (0, "")
    shown = "; ".join(unreadable[:3]) + (f"; and {len(unreadable) - 3} more" if len(unreadable) > 3 else "")
    too_many, present = len(unreadable) > MAX_UNREADABLE * len(named), set(y)
    empty = [c for i, c in enumerate(classes) if i not in present]
    if too_many or empty:
        why = (f"{len(unreadable)} of {len(named)} images could not be read" if too_many else
               f"class {empty[0]!r} has no readable image")
        raise DatasetError(f"{where}: {why} ({shown})")
    return np.stack(x), np.asarray(y), (len(unreadable), f"{len(unreadable)} of {len(named)} images could not be "
                                                         f"read and were left out ({shown})")


def read_image_folder(root: str | os.PathLike, image_size: int = 32, test_fraction: float = 0.2,
                      seed: int = 0, name: str | None = None) -> Dataset:
    """A dataset from `root/<class>/<image>` (class = sub-folder name, sorted), split train/test; a few
    unreadable images are left out (MAX_UNREADABLE), the dataset's note says which."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root} is not a folder")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    files = {c: sorted(p for p in (root / c).rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS + UNDECODED)
             for c in classes}
    classes = [c for c in classes if files[c]]
    if len(classes) < 2:
        raise DatasetError(f"{root} needs at least two sub-folders of images (one per class); "
                           f"found {len(classes)}")
    named = [(str(path), label, path.read_bytes) for label, c in enumerate(classes) for path in files[c]]
    images, labels, left_out = _read_images(named, classes, image_size, root.name)
    return _split(images, labels, classes, test_fraction, seed, name or root.name, str(root), left_out)


# A held-out test part smaller than this cannot say how good a model is.
MIN_TEST_IMAGES = 10


def _split(x, y, classes, test_fraction, seed, name, source, left_out: tuple[int, str] = (0, "")) -> Dataset:
    """Each class is split on its own: round(n * test_fraction) of its n images are held out for the test,
    so every class with three images or more is in the test part."""
    rng = np.random.default_rng(seed)
    test, train = [], []
    for c in range(len(classes)):
        members = np.flatnonzero(y == c)
        members = members[rng.permutation(len(members))]
        k = held_out_count(len(members), test_fraction)
        test.append(members[:k])
        train.append(members[k:])
    test, train = np.sort(np.concatenate(test)), np.sort(np.concatenate(train))
    return Dataset(name, x[train], y[train], x[test], y[test], list(classes), source, left_out[1],
                   unreadable=left_out[0])


def held_out_count(n: int, test_fraction: float) -> int:
    """How many of a class's `n` images _split holds out for the test."""
    return int(round(n * test_fraction))


def images_per_class_needed(num_classes: int, test_fraction: float = 0.2, min_test: int = MIN_TEST_IMAGES) -> int:
    """The fewest images per class for a held-out part with an image of every class and `min_test` in all."""
    want = max(1, -(-min_test // num_classes))
    n = 1
    while held_out_count(n, test_fraction) < want:
        n += 1
    return n


def held_out_problem(dataset: Dataset, test_fraction: float = 0.2, min_test: int = MIN_TEST_IMAGES) -> str | None:
    """Why the dataset's held-out test part is too small to judge a model by, with what would do; None when
    it is not. Asked before any training starts."""
    if len(dataset.y_test) >= min_test:
        return None
    sizes = np.bincount(np.concatenate([dataset.y_train, dataset.y_test]).astype(int), minlength=dataset.num_classes)
    need = images_per_class_needed(dataset.num_classes, test_fraction, min_test)
    return (f"{dataset.name}: the {test_fraction:.0%} of images held out to test the models would hold "
            f"{len(dataset.y_test)}, too few to judge them by. Give at least {need} images per class "
            f"({need * dataset.num_classes} in all; the smallest class here has {sizes.min()}), or train on all "
            f"the images with no test score.")


def read_image_zip(path: str | os.PathLike, image_size: int = 32, test_fraction: float = 0.2,
                   seed: int = 0, max_bytes: int = 512 * 2**20, max_files: int = 50_000) -> Dataset:
    """A dataset from a zip of class folders, read in memory (no extraction, so no path traversal).

    Refuses members with absolute paths or `..`, archives that expand beyond `max_bytes`, and more
    than `max_files` images; a few unreadable images are left out (MAX_UNREADABLE), the dataset's note says
    which.
    """
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise DatasetError(f"{path.name} is not a readable zip file ({e})") from None
    with archive:
        members = [m for m in archive.infolist() if not m.is_dir()]
        for m in members:
            parts = Path(m.filename.replace("\\", "/")).parts
            if m.filename.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
                raise DatasetError(f"{path.name} has an unsafe member path {m.filename!r}")
        images = [m for m in members if Path(m.filename).suffix.lower() in IMAGE_EXTENSIONS + UNDECODED
                  and not any(p.startswith((".", "__MACOSX")) for p in Path(m.filename).parts)]
        if len(images) > max_files:
            raise DatasetError(f"{path.name} holds {len(images)} images; the limit is {max_files}")
        total = sum(m.file_size for m in images)
        if total > max_bytes:
            raise DatasetError(f"{path.name} expands to {total / 2**20:.0f} MiB; "
                               f"the limit is {max_bytes / 2**20:.0f} MiB")
        # Class = the folder right above the image; a single top-level folder wrapping them is fine.
        by_class: dict[str, list[zipfile.ZipInfo]] = {}
        for m in images:
            parts = Path(m.filename).parts
            if len(parts) >= 2:
                by_class.setdefault(parts[-2], []).append(m)
        classes = sorted(by_class)
        if len(classes) < 2:
            raise DatasetError(f"{path.name} needs class folders (at least two, each with images); "
                               f"found {len(classes)}")
        read = 0

        def member(m: zipfile.ZipInfo):
            def data() -> bytes:  # read one at a time, as it is decoded
                nonlocal read
                # At most the declared size plus one byte: a forged header cannot inflate memory.
                with archive.open(m) as f:
                    data = f.read(m.file_size + 1)
                read += len(data)
                if len(data) > m.file_size or read > max_bytes:
                    raise DatasetError(f"{path.name}: member {m.filename!r} is larger than it declares")
                return data
            return data

        named = [(m.filename, label, member(m)) for label, c in enumerate(classes)
                 for m in sorted(by_class[c], key=lambda m: m.filename)]
        x, y, left_out = _read_images(named, classes, image_size, path.name)
    return _split(x, y, classes, test_fraction, seed, path.stem, str(path), left_out)


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, image_size: int = 32,
                 test_fraction: float = 0.2, settings: Settings | None = None) -> Dataset:
    """"cifar10", "cifar100", a folder of class folders, or a zip of them (`test_fraction` of each class
    held out for the test; 0 trains on all of them), or a packed CIFAR .npz (its own splits)."""
    if name in DATASETS:
        return load_cifar(name, data_dir, settings=settings)
    path = Path(name)
    if path.is_dir():
        return read_image_folder(path, image_size, test_fraction=test_fraction)
    if path.suffix.lower() == ".zip" and path.is_file():
        return read_image_zip(path, image_size, test_fraction=test_fraction)
    if path.suffix.lower() == ".npz":  # missing or not, so that its error names the file
        return load_packed(path)
    raise DatasetError(f"unknown dataset {name!r}: expected one of {DATASETS}, a folder of class "
                       f"folders, a .zip of them, or a packed .npz (python -m explorer.packed)")
