"""Datasets: CIFAR-10/100 in the original python-pickle layout, image folders, and augmentation."""

from __future__ import annotations

import io
import math
import os
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATASETS = ("cifar10", "cifar100")
_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


class DatasetError(ValueError):
    """A dataset that cannot be found or read; the message says where and why."""


@dataclass
class Dataset:
    """Images as uint8 (N, H, W, 3) with integer labels and class names."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: list[str]
    source: str = ""
    note: str = ""

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def subset(self, train: int | None = None, test: int | None = None, seed: int = 0) -> "Dataset":
        """A random subset of each split (the same one for the same seed)."""
        rng = np.random.default_rng(seed)

        def pick(x, y, n):
            if n is None or n >= len(x):
                return x, y
            index = np.sort(rng.permutation(len(x))[:n])
            return x[index], y[index]

        x_train, y_train = pick(self.x_train, self.y_train, train)
        x_test, y_test = pick(self.x_test, self.y_test, test)
        return Dataset(self.name, x_train, y_train, x_test, y_test, self.class_names, self.source, self.note)


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return pickle.load(f, encoding="bytes")
    except FileNotFoundError:
        raise DatasetError(f"missing file {path}") from None
    except Exception as e:  # truncated, not a pickle, wrong protocol
        raise DatasetError(f"cannot read {path}: it is not a CIFAR pickle ({type(e).__name__}: {e})") from None


def _images(batch: dict, path: Path) -> np.ndarray:
    data = batch.get(b"data")
    if data is None:
        raise DatasetError(f"{path} has no b'data' entry; keys are {sorted(batch)}")
    data = np.asarray(data, dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3072:
        raise DatasetError(f"{path}: b'data' has shape {data.shape}, expected (N, 3072)")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def _labels(batch: dict, key: bytes, path: Path, count: int) -> np.ndarray:
    labels = batch.get(key)
    if labels is None:
        raise DatasetError(f"{path} has no {key!r} entry; keys are {sorted(batch)}")
    labels = np.asarray(labels, dtype=np.int64)
    if labels.shape != (count,):
        raise DatasetError(f"{path}: {count} images but {labels.shape} labels")
    return labels


def _decode(names) -> list[str]:
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def read_cifar(folder: str | os.PathLike, name: str) -> Dataset:
    """Reads CIFAR-10 (`cifar-10-batches-py`) or CIFAR-100 (`cifar-100-python`, fine labels)."""
    folder = Path(folder)
    if name == "cifar10":
        train = [_unpickle(folder / f"data_batch_{i}") for i in range(1, 6)]
        test = _unpickle(folder / "test_batch")
        meta = _unpickle(folder / "batches.meta")
        class_names = _decode(meta.get(b"label_names", []))
        key = b"labels"
        paths = [folder / f"data_batch_{i}" for i in range(1, 6)]
    elif name == "cifar100":
        train = [_unpickle(folder / "train")]
        test = _unpickle(folder / "test")
        meta = _unpickle(folder / "meta")
        class_names = _decode(meta.get(b"fine_label_names", []))
        key = b"fine_labels"
        paths = [folder / "train"]
    else:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {DATASETS}")
    x_train = np.concatenate([_images(b, p) for b, p in zip(train, paths)])
    y_train = np.concatenate([_labels(b, key, p, len(_images(b, p))) for b, p in zip(train, paths)])
    x_test = _images(test, folder)
    y_test = _labels(test, key, folder, len(x_test))
    if not class_names:
        raise DatasetError(f"{folder}: the meta file lists no class names")
    for labels in (y_train, y_test):
        if labels.min() < 0 or labels.max() >= len(class_names):
            raise DatasetError(f"{folder}: labels outside 0..{len(class_names) - 1}")
    return Dataset(name, x_train, y_train, x_test, y_test, class_names, str(folder), provenance_note(folder))


JPEG_NOTE = ("pixels decoded from a public JPEG copy of CIFAR (mean abs error 5.8/255 against the "
             "originals)")


def provenance_note(folder: Path) -> str:
    """What a README.md beside the data says about where its pixels come from (a JPEG copy, here)."""
    readme = folder.parent / "README.md"
    try:
        text = readme.read_text(errors="replace")
    except OSError:
        return ""
    return JPEG_NOTE if "JPEG" in text else ""


def candidate_dirs(data_dir: str | os.PathLike | None = None) -> list[Path]:
    """Where a CIFAR folder is looked for, in order: the argument, $EXPLORER_DATA_DIR, the Keras cache."""
    dirs = []
    if data_dir:
        dirs.append(Path(data_dir).expanduser())
    if os.environ.get("EXPLORER_DATA_DIR"):
        dirs.append(Path(os.environ["EXPLORER_DATA_DIR"]).expanduser())
    keras_home = Path(os.environ.get("KERAS_HOME", Path.home() / ".keras"))
    dirs.append(keras_home / "datasets")
    return dirs


def find_cifar(name: str, data_dir: str | os.PathLike | None = None) -> Path | None:
    """The first folder holding the named CIFAR dataset, or None."""
    if name not in _FOLDERS:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {DATASETS}")
    for base in candidate_dirs(data_dir):
        for folder in (base / _FOLDERS[name], base):
            if (folder / ("batches.meta" if name == "cifar10" else "meta")).is_file():
                return folder
    return None


def load_cifar(name: str, data_dir: str | os.PathLike | None = None, download: bool = True) -> Dataset:
    """CIFAR-10 or CIFAR-100 from the first place that has it, else from keras.datasets (online)."""
    folder = find_cifar(name, data_dir)
    if folder is not None:
        return read_cifar(folder, name)
    tried = ", ".join(str(d) for d in candidate_dirs(data_dir))
    if not download:
        raise DatasetError(f"{name} not found; looked in {tried}")
    try:
        import keras
        module = keras.datasets.cifar10 if name == "cifar10" else keras.datasets.cifar100
        module.load_data()  # downloads and unpacks into ~/.keras/datasets
    except Exception as e:
        raise DatasetError(f"{name} not found (looked in {tried}) and keras.datasets could not "
                           f"download it: {type(e).__name__}: {e}") from None
    folder = find_cifar(name, data_dir)
    if folder is None:
        raise DatasetError(f"{name} was downloaded but not found in {tried}")
    return read_cifar(folder, name)


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


def augment_batch(images: np.ndarray, rng: np.random.Generator, pad: int = 4,
                  flip: bool = True) -> np.ndarray:
    """Random translation (reflect-pad then crop back) and horizontal flip of a uint8 batch."""
    n, h, w, _ = images.shape
    out = np.empty_like(images)
    if pad:
        padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect")
        dy = rng.integers(0, 2 * pad + 1, n)
        dx = rng.integers(0, 2 * pad + 1, n)
        for i in range(n):
            out[i] = padded[i, dy[i]:dy[i] + h, dx[i]:dx[i] + w]
    else:
        out[:] = images
    if flip:
        flips = rng.random(n) < 0.5
        out[flips] = out[flips, :, ::-1]
    return out


def mix_batch(images: np.ndarray, labels: np.ndarray, rng: np.random.Generator, mixup_alpha: float = 0.0,
              cutmix_alpha: float = 0.0, prob: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Mixup or CutMix of a float batch and its one-hot labels, each image with a shuffled partner.

    With probability ``prob`` the batch is mixed; when both alphas are set, each mixed batch uses one
    of the two at random (as DeiT does). Mixup blends whole images with weight lam ~ Beta(a, a); CutMix
    pastes a box of the partner covering a fraction 1 - lam of the image, and lam is then corrected to
    the box's exact clipped area. Labels are mixed with the same lam, so they stay distributions.
    """
    methods = [m for m, a in (("mixup", mixup_alpha), ("cutmix", cutmix_alpha)) if a > 0]
    if not methods or len(images) < 2 or rng.random() >= prob:
        return images, labels
    method = methods[rng.integers(len(methods))]
    partner = rng.permutation(len(images))
    if method == "mixup":
        lam = float(rng.beta(mixup_alpha, mixup_alpha))
        mixed = lam * images + (1.0 - lam) * images[partner]
    else:
        lam = float(rng.beta(cutmix_alpha, cutmix_alpha))
        h, w = images.shape[1:3]
        cut = math.sqrt(1.0 - lam)
        ch, cw = int(round(h * cut)), int(round(w * cut))
        cy, cx = int(rng.integers(h)), int(rng.integers(w))
        y0, y1 = max(cy - ch // 2, 0), min(cy + ch - ch // 2, h)
        x0, x1 = max(cx - cw // 2, 0), min(cx + cw - cw // 2, w)
        mixed = images.copy()
        mixed[:, y0:y1, x0:x1] = images[partner, y0:y1, x0:x1]
        lam = 1.0 - (y1 - y0) * (x1 - x0) / (h * w)
    return mixed.astype(images.dtype, copy=False), (lam * labels + (1.0 - lam) * labels[partner]).astype(
        labels.dtype, copy=False)

