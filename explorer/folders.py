"""Image folders and zips of class folders as datasets (split into training and test images), and
`load_dataset`: any dataset by name ("cifar10", "cifar100") or path.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np

from explorer.data import DATASETS, IMAGE_EXTENSIONS, Dataset, DatasetError, load_cifar


def _open_rgb(data: bytes, name: str, size: int) -> np.ndarray:
    from PIL import Image, ImageOps
    try:
        with Image.open(io.BytesIO(data)) as img:
            img = ImageOps.exif_transpose(img)
            img = img.convert("RGB").resize((size, size), Image.BILINEAR)
            return np.asarray(img, dtype=np.uint8)
    except Exception as e:
        raise DatasetError(f"{name} is not a readable image ({type(e).__name__}: {e})") from None


def read_image_folder(root: str | os.PathLike, image_size: int = 32, test_fraction: float = 0.2,
                      seed: int = 0, name: str | None = None) -> Dataset:
    """A dataset from `root/<class>/<image>` (class = sub-folder name, sorted), split train/test."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root} is not a folder")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    files = {c: sorted(p for p in (root / c).rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS)
             for c in classes}
    classes = [c for c in classes if files[c]]
    if len(classes) < 2:
        raise DatasetError(f"{root} needs at least two sub-folders of images (one per class); "
                           f"found {len(classes)}")
    images, labels = [], []
    for label, c in enumerate(classes):
        for path in files[c]:
            images.append(_open_rgb(path.read_bytes(), str(path), image_size))
            labels.append(label)
    return _split(np.stack(images), np.asarray(labels), classes, test_fraction, seed,
                  name or root.name, str(root))


def _split(x, y, classes, test_fraction, seed, name, source) -> Dataset:
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Dataset(name, x[train], y[train], x[test], y[test], list(classes), source)


def read_image_zip(path: str | os.PathLike, image_size: int = 32, test_fraction: float = 0.2,
                   seed: int = 0, max_bytes: int = 512 * 2**20, max_files: int = 50_000) -> Dataset:
    """A dataset from a zip of class folders, read in memory (no extraction, so no path traversal).

    Refuses members with absolute paths or `..`, archives that expand beyond `max_bytes`, and more
    than `max_files` images.
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
        images = [m for m in members if Path(m.filename).suffix.lower() in IMAGE_EXTENSIONS
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
        x, y, read = [], [], 0
        for label, c in enumerate(classes):
            for m in sorted(by_class[c], key=lambda m: m.filename):
                # Read at most the declared size plus one byte: a forged header cannot inflate memory.
                with archive.open(m) as f:
                    data = f.read(m.file_size + 1)
                read += len(data)
                if len(data) > m.file_size or read > max_bytes:
                    raise DatasetError(f"{path.name}: member {m.filename!r} is larger than it declares")
                x.append(_open_rgb(data, m.filename, image_size))
                y.append(label)
    return _split(np.stack(x), np.asarray(y), classes, test_fraction, seed, path.stem, str(path))


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, image_size: int = 32) -> Dataset:
    """"cifar10", "cifar100", a folder of class folders, or a zip of them."""
    if name in DATASETS:
        return load_cifar(name, data_dir)
    path = Path(name)
    if path.is_dir():
        return read_image_folder(path, image_size)
    if path.suffix.lower() == ".zip" and path.is_file():
        return read_image_zip(path, image_size)
    raise DatasetError(f"unknown dataset {name!r}: expected one of {DATASETS}, a folder of class "
                       f"folders, or a .zip of them")
