"""CIFAR-10/100 in the original python-pickle layout, the bundled sample, and downloads (image folders and
zips are explorer.data.folders; augmentation is explorer.data.augment).

Where CIFAR comes from, in order: a folder given (or $EXPLORER_DATA_DIR), the Keras cache
(`~/.keras/datasets`, or `$KERAS_HOME/datasets`, in keras.datasets' layout), and, for the first 1,000
CIFAR-10 test images, the sample bundled in `explorer/samples/`. When a feature needs more than the
sample, `load_cifar` downloads the real archive once into the Keras cache.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.client
import os
import pickle
import shutil
import tarfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from explorer.core import atomic
from explorer.core.settings import Settings

DATASETS = ("cifar10", "cifar100")
_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
_META = {"cifar10": "batches.meta", "cifar100": "meta"}
# keras.datasets' cache layout: <KERAS_HOME>/datasets/<name>-target/<folder>, the archive beside it.
_KERAS_TARGETS = {"cifar10": "cifar-10-batches-py-target", "cifar100": "cifar-100-python-target"}
ARCHIVES = {"cifar10": "cifar-10-python.tar.gz", "cifar100": "cifar-100-python.tar.gz"}
DEFAULT_CIFAR_URL = "https://www.cs.toronto.edu/~kriz/"
ARCHIVE_SIZES = {"cifar10": "163 MB", "cifar100": "161 MB"}
# The genuine archives' digests (as keras.datasets checks them); a mirror set by $EXPLORER_CIFAR_URL is
# checked by its layout instead.
_SHA256 = {"cifar10": "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
           "cifar100": "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7"}
SAMPLE_FILE = Path(__file__).resolve().parents[1] / "samples" / "cifar10_test_1000.npz"  # explorer/samples
SAMPLE_SOURCE = "the CIFAR-10 sample bundled with the app"
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".avif")


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
    sample: bool = False  # the bundled sample: test images only, the first len(x_test) of the test set
    unreadable: int = 0  # images of a folder or zip left out as unreadable (`note` says which)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def restricted(self, class_names: list[str]) -> Dataset:
        """The images of `class_names` alone (some of this dataset's classes), labelled in that order: the
        test set of a model fine-tuned on a few of them. Raises DatasetError naming the classes it lacks."""
        missing = [c for c in class_names if c not in self.class_names]
        if missing:
            raise DatasetError(f"{self.name} has no class {', '.join(map(repr, missing))}")
        order = np.full(self.num_classes, -1)
        order[[self.class_names.index(c) for c in class_names]] = np.arange(len(class_names))

        def keep(x, y):
            labels = order[np.asarray(y, dtype=np.int64)]
            return x[labels >= 0], labels[labels >= 0]

        x_train, y_train = keep(self.x_train, self.y_train)
        x_test, y_test = keep(self.x_test, self.y_test)
        return dataclasses.replace(self, name=f"{self.name} ({', '.join(class_names)})", x_train=x_train,
                                   y_train=y_train, x_test=x_test, y_test=y_test, class_names=list(class_names))

    def subset(self, train: int | None = None, test: int | None = None, seed: int = 0) -> Dataset:
        """A random subset of each split (the same one for the same seed)."""
        rng = np.random.default_rng(seed)

        def pick(x, y, n):
            if n is None or n >= len(x):
                return x, y
            index = np.sort(rng.permutation(len(x))[:n])
            return x[index], y[index]

        x_train, y_train = pick(self.x_train, self.y_train, train)
        x_test, y_test = pick(self.x_test, self.y_test, test)
        return dataclasses.replace(self, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)


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
    x_train = np.concatenate([_images(b, p) for b, p in zip(train, paths, strict=True)])
    y_train = np.concatenate([_labels(b, key, p, len(_images(b, p))) for b, p in zip(train, paths, strict=True)])
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


def read_cifar_test(folder: str | os.PathLike, name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(images, labels, class names) of a CIFAR folder's test split only (no training batches read)."""
    folder = Path(folder)
    if name not in _FOLDERS:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {DATASETS}")
    test = _unpickle(folder / ("test_batch" if name == "cifar10" else "test"))
    meta = _unpickle(folder / _META[name])
    class_names = _decode(meta.get(b"label_names" if name == "cifar10" else b"fine_label_names", []))
    x = _images(test, folder)
    y = _labels(test, b"labels" if name == "cifar10" else b"fine_labels", folder, len(x))
    if not class_names:
        raise DatasetError(f"{folder}: the meta file lists no class names")
    return x, y, class_names


@functools.lru_cache(maxsize=1)
def sample_set() -> Dataset:
    """The bundled CIFAR-10 sample: the first 1,000 test images with their labels; no training split.

    Read-only arrays (the one copy is shared). Its pixels come from the same public JPEG copy as the
    shipped checkpoints' test set (`note` says so), so the cards' check set can be verified on it.
    """
    try:
        with np.load(SAMPLE_FILE, allow_pickle=False) as z:
            x, y = z["images"], z["labels"].astype(np.int64)
            class_names, note = [str(c) for c in z["class_names"]], str(z["note"])
    except (OSError, KeyError, ValueError) as e:
        raise DatasetError(f"the bundled sample {SAMPLE_FILE} cannot be read ({type(e).__name__}: {e}); "
                           f"regenerate it with tools/make_sample_set.py") from None
    for array in (x, y):
        array.setflags(write=False)
    empty = np.zeros((0,) + x.shape[1:], np.uint8)
    return Dataset("cifar10", empty, np.zeros(0, np.int64), x, y, class_names, SAMPLE_SOURCE,
                   f"the first {len(x):,} CIFAR-10 test images, bundled with the app; {note}", sample=True)


def _given(settings: Settings | None) -> Settings:
    """The caller's settings, else this process's environment's (a caller without any: a test, a script)."""
    return Settings.from_env() if settings is None else settings


def keras_cache_dir(settings: Settings | None = None) -> Path:
    """Where keras.datasets keeps its downloads: $KERAS_HOME/datasets, else ~/.keras/datasets."""
    home = _given(settings).keras_home or Path.home() / ".keras"
    return Path(home).expanduser() / "datasets"


def candidate_dirs(data_dir: str | os.PathLike | None = None, settings: Settings | None = None) -> list[Path]:
    """Where a CIFAR folder is looked for, in order: the argument (else $EXPLORER_DATA_DIR), then the
    Keras cache. An explicit argument replaces the variable: the caller said where to look."""
    settings = _given(settings)
    dirs = []
    given = data_dir or settings.data_dir
    if given:
        dirs.append(Path(given).expanduser())
    dirs.append(keras_cache_dir(settings))
    return dirs


def find_cifar(name: str, data_dir: str | os.PathLike | None = None, settings: Settings | None = None) -> Path | None:
    """The first folder holding the named CIFAR dataset (the original layout), or None."""
    if name not in _FOLDERS:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {DATASETS}")
    for base in candidate_dirs(data_dir, settings):
        for folder in (base / _FOLDERS[name], base / _KERAS_TARGETS[name] / _FOLDERS[name], base):
            if (folder / _META[name]).is_file():
                return folder
    return None


def cifar_url(name: str, settings: Settings | None = None) -> str:
    """The archive's URL: $EXPLORER_CIFAR_URL (a mirror, or a test server) or the CIFAR home page."""
    base = _given(settings).cifar_url or DEFAULT_CIFAR_URL
    return base.rstrip("/") + "/" + ARCHIVES[name]


Progress = Callable[[float | None, str], None]


def what_to_do(name: str, settings: Settings | None = None) -> str:
    """How to give this machine the full dataset, in one sentence."""
    settings = _given(settings)
    cache = keras_cache_dir(settings)
    return (f"set EXPLORER_DATA_DIR to a folder holding {_FOLDERS[name]}/, put {ARCHIVES[name]} "
            f"({ARCHIVE_SIZES[name]}) into {cache}, or run where {cifar_url(name, settings)} can be reached")


def _fetch(url: str, target: Path, progress: Progress | None, timeout: float) -> None:
    with (atomic.replacing(target) as tmp, urllib.request.urlopen(url, timeout=timeout) as response,
          open(tmp, "wb") as f):
        total = int(response.headers.get("Content-Length") or 0) or None
        done = 0
        while chunk := response.read(2**20):
            f.write(chunk)
            done += len(chunk)
            if progress:
                size = f" of {total / 2**20:.0f}" if total else ""
                progress(done / total if total else None,
                         f"downloading {target.name}: {done / 2**20:.0f}{size} MiB")
        if total and done != total:
            raise DatasetError(f"the download of {url} stopped after {done:,} of {total:,} bytes; try again")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(2**22):
            digest.update(chunk)
    return digest.hexdigest()


def _plain_members(tar: tarfile.TarFile, archive: Path) -> list[tarfile.TarInfo]:
    """The archive's members if all are plain files and folders under relative paths without '..'.

    Checked here on every Python, not only by tarfile's "data" filter (3.11.4 and later): nothing is
    written outside the folder, and no link, device or fifo is written at all.
    """
    members = tar.getmembers()
    for m in members:
        if m.name.startswith(("/", "\\")) or ".." in Path(m.name).parts or not (m.isfile() or m.isdir()):
            raise DatasetError(f"{archive} holds {m.name!r}, which is not a plain file or folder inside the "
                               f"archive's own folder; not unpacking it (delete it and try again)")
    return members


def _extract(archive: Path, name: str, target: Path) -> Path:
    """Unpacks `archive` into `target` (keras' `<name>-target` folder) via a temporary sibling."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        try:
            with tarfile.open(archive) as tar:
                members = _plain_members(tar, archive)
                if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: also strips modes and owners
                    tar.extractall(tmp, members, filter="data")
                else:
                    tar.extractall(tmp, members)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise DatasetError(f"{archive} is not a readable {ARCHIVES[name]} ({type(e).__name__}: {e}); "
                               f"delete it and try again") from None
        if not (tmp / _FOLDERS[name] / _META[name]).is_file():
            raise DatasetError(f"{archive} does not hold {_FOLDERS[name]}/{_META[name]}: not the "
                               f"{ARCHIVES[name]} layout; delete it and try again")
        if (target / _FOLDERS[name] / _META[name]).is_file():  # another process finished first
            return target / _FOLDERS[name]
        if target.exists():  # an earlier, incomplete extraction (ours or keras')
            shutil.rmtree(target)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target / _FOLDERS[name]


def download_cifar(name: str, progress: Progress | None = None, timeout: float = 30,
                   settings: Settings | None = None) -> Path:
    """Downloads and unpacks the real CIFAR archive once into the Keras cache; returns its folder.

    The layout is keras.datasets' (`datasets/<name>-target/<folder>` and the archive beside it as
    `<name>-target_archive`), so keras.datasets.cifar10.load_data() finds it too, and an archive put
    there by hand (under either name) is used without a download. Every file appears whole or not
    at all: written under a temporary name, then renamed.
    """
    if name not in _FOLDERS:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {DATASETS}")
    settings = _given(settings)
    cache = keras_cache_dir(settings)
    target = cache / _KERAS_TARGETS[name]
    if (target / _FOLDERS[name] / _META[name]).is_file():
        return target / _FOLDERS[name]
    archive = cache / f"{_KERAS_TARGETS[name]}_archive"
    url = cifar_url(name, settings)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DatasetError(f"cannot create {cache} for the {name} download ({e.strerror or e}); "
                           f"{what_to_do(name, settings)}") from None
    if not archive.is_file() and (cache / ARCHIVES[name]).is_file():
        archive = cache / ARCHIVES[name]
    if not archive.is_file():
        try:
            _fetch(url, archive, progress, timeout)
        except urllib.error.HTTPError as e:
            raise DatasetError(f"{name} is not on this machine and {url} answered {e.code} {e.reason}. "
                               f"To use it, {what_to_do(name, settings)}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", None) or f"{type(e).__name__}: {e}"
            raise DatasetError(f"{name} is not on this machine and could not be downloaded from {url} "
                               f"({reason}). To use it, {what_to_do(name, settings)}") from None
        if url.startswith(DEFAULT_CIFAR_URL) and _sha256(archive) != _SHA256[name]:
            archive.unlink()
            raise DatasetError(f"the download of {url} is corrupt (its SHA-256 is not the archive's); "
                               f"try again")
    if progress:
        progress(1.0, f"unpacking {archive.name}")
    return _extract(archive, name, target)


def load_cifar(name: str, data_dir: str | os.PathLike | None = None, download: bool = True,
               progress: Progress | None = None, settings: Settings | None = None) -> Dataset:
    """The full CIFAR-10 or CIFAR-100 (both splits) from the first place that has it; else, with
    `download`, fetched once into the Keras cache (`progress(fraction or None, message)` follows it).

    Offline or without `download`, the DatasetError says where it looked and what to do.
    """
    settings = _given(settings)
    folder = find_cifar(name, data_dir, settings)
    if folder is not None:
        return read_cifar(folder, name)
    if not download:
        tried = ", ".join(str(d) for d in candidate_dirs(data_dir, settings))
        raise DatasetError(f"no {name} data here; looked in {tried}. To use it, {what_to_do(name, settings)}")
    return read_cifar(download_cifar(name, progress, settings=settings), name)


def load_test_set(name: str, data_dir: str | os.PathLike | None = None, need: int = 1,
                  download: bool = True, progress: Progress | None = None,
                  settings: Settings | None = None) -> Dataset:
    """A dataset whose test split has at least `need` images (fewer only if the full test set has
    fewer): a CIFAR folder when there is one, else the bundled sample when it is enough, else the
    full data downloaded (see load_cifar). Its training split may be empty (the sample has none)."""
    settings = _given(settings)
    folder = find_cifar(name, data_dir, settings)
    if folder is not None:
        return read_cifar(folder, name)
    if name == "cifar10" and need <= len(sample_set().x_test):
        return sample_set()
    if name not in _FOLDERS:
        raise DatasetError(f"unknown dataset {name!r}; choose one of {DATASETS}")
    if not download:
        raise DatasetError(f"{need:,} {name} test images need the full data set, which is not here; "
                           f"to use it, {what_to_do(name, settings)}")
    return load_cifar(name, data_dir, download=True, progress=progress, settings=settings)
