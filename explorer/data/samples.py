"""Test images for the app: each dataset's test split loaded once for every session (a CIFAR folder, else
the bundled sample, else the full data downloaded once), test samples as files (also of a fine-tuned model's
own held-out images), the true label of such a file, and the bundled examples a first visit opens with.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from explorer.core import atomic
from explorer.core.settings import Settings
from explorer.data.datasets import (
    Dataset,
    DatasetError,
    find_cifar,
    keras_cache_dir,
    load_cifar,
    load_test_set,
    sample_set,
)

# A sample's file: `cifar10-test-00042-cat.png`, or `held-<key>-test-00003-<label>.png` for an image of a
# held-out set (the key: a hash of its images and labels, so that only a page that was given it can name it).
SAMPLE_NAME = re.compile(r"^(cifar10|cifar100|held-[0-9a-f]{16})-test-(\d+)-")
HELD_KEPT = 64  # held-out sets whose samples' labels are kept (the most recently sampled)
EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"  # explorer/examples


@dataclass(frozen=True)
class Sample:
    """One test image written as a PNG file named like `cifar10-test-00042-cat.png`."""

    path: str
    image: np.ndarray
    label: str
    index: int
    dataset: str


@dataclass(frozen=True)
class Example:
    """A bundled example: its file, its true label and why it was chosen (both right, they disagree, ...)."""

    path: str
    label: str
    case: str


class TestImages:
    """The datasets' test splits, loaded once and shared by every session.

    `data_dir` is searched first for CIFAR folders (explorer.data.datasets.find_cifar); without one, CIFAR-10's
    first 1,000 test images come from the bundled sample and anything more is downloaded once into the
    Keras cache. `settings`: where downloads come from and go (default: this process's environment).
    """

    __test__ = False  # not a pytest class, whatever its name

    def __init__(self, data_dir: str | None = None, samples_dir: str | os.PathLike | None = None,
                 settings: Settings | None = None):
        self.data_dir = data_dir
        self.settings = Settings.from_env() if settings is None else settings
        self.samples_dir = Path(samples_dir or tempfile.mkdtemp(prefix="explorer-samples-"))
        self._datasets: dict[str, object] = {}
        self._data_lock = threading.Lock()  # guards _datasets; held only for a look-up
        self._load_lock = threading.Lock()  # one load (or download) at a time
        self._held: OrderedDict[str, Dataset] = OrderedDict()  # held-out sets sampled, by key (guarded by _data_lock)

    def dataset(self, name: str, need: int = 1, progress=None, download: bool = True):
        """`name`'s test images, at least `need` of them when the data has that many (see the class). May
        have no training split: for training, see `training_data`."""
        def cached():
            with self._data_lock:
                ds = self._datasets.get(name)
            return ds if ds is not None and (not ds.sample or len(ds.x_test) >= need) else None

        if (ds := cached()) is not None:
            return ds
        with self._load_lock:
            if (ds := cached()) is not None:  # another session loaded it meanwhile
                return ds
            ds = load_test_set(name, self.data_dir, need, download=download, progress=progress,
                               settings=self.settings)
            with self._data_lock:
                self._datasets[name] = ds
            return ds

    def training_data(self, name: str, progress=None):
        """The full `name` (both splits): a CIFAR folder, else downloaded once into the Keras cache
        (`progress(fraction or None, message)` follows it); offline, a DatasetError saying what to do."""
        ds = self.dataset(name, progress=progress)
        if not ds.sample:
            return ds
        with self._load_lock:
            full = load_cifar(name, self.data_dir, download=True, progress=progress, settings=self.settings)
            with self._data_lock:
                self._datasets[name] = full
            return full

    def note(self, shared: bool = False) -> str:
        """Where the test images come from, in Markdown; `shared` leaves the server's paths out."""
        folder = find_cifar("cifar10", self.data_dir, self.settings)
        if folder is not None:
            return f"_Test samples: CIFAR-10 from `{folder if not shared else folder.name}`._"
        n = len(sample_set().x_test)
        # One line on the first screen (an 800 px window holds its answer under it); the rest on a click.
        return (f"<details><summary><em>Test samples: {n:,} bundled CIFAR-10 images</em></summary>The first "
                f"{n:,} of the test set, bundled with the app; their pixels are decoded from a public JPEG copy of "
                f"CIFAR-10 (mean absolute error 5.8/255 against the originals). More (over {n:,} images, CIFAR-100, "
                f"training) is "
                f"downloaded once into <code>{keras_cache_dir(self.settings) if not shared else '~/.keras/datasets'}"
                f"</code>.</details>")

    def has_full(self, name: str = "cifar10") -> bool:
        return find_cifar(name, self.data_dir, self.settings) is not None

    def sample(self, name: str, class_name: str | None = None, seed: int | None = None, progress=None,
               classes: list[str] | None = None) -> Sample:
        """A test image of `name` (random, or of one class), saved as a PNG named after its index and label;
        a random one is of `classes` when given (those a model knows).

        Raises DatasetError when the data cannot be had, ValueError for a class `name` does not have.
        """
        return _draw(self.dataset(name, progress=progress), name, self.samples_dir, class_name, seed, classes)

    def sample_held_out(self, held: Dataset, class_name: str | None = None, seed: int | None = None) -> Sample:
        """An image of a fine-tuned model's own held-out set `held` (explorer.checkpoints.held_out; random, or
        of one class), as `sample` does; its file's true label is known to `identify` from then on."""
        digest = hashlib.blake2b(digest_size=8)
        digest.update(np.ascontiguousarray(held.x_test).tobytes())
        digest.update(np.ascontiguousarray(held.y_test).tobytes())
        key = f"held-{digest.hexdigest()}"
        with self._data_lock:
            self._held[key] = held
            self._held.move_to_end(key)
            while len(self._held) > HELD_KEPT:
                self._held.popitem(last=False)
        return _draw(held, key, self.samples_dir, class_name, seed, None)

    def identify(self, file) -> tuple[str, int, str] | None:
        """(dataset, index, label) of a file named like a test sample (`cifar10-test-00042-...`), when the
        data here reaches that index; None for any other file."""
        match = SAMPLE_NAME.match(Path(str(file)).name)
        if not match:
            return None
        name, index = match.group(1), int(match.group(2))
        if name.startswith("held-"):
            with self._data_lock:
                held = self._held.get(name)
            if held is None or index >= len(held.y_test):
                return None
            return held.name, index, held.class_names[held.y_test[index]]
        try:  # a file named like a sample from the full test set, with only the bundled sample here: no label
            ds = self.dataset(name, need=index + 1, download=False)
            return name, index, ds.class_names[ds.y_test[index]]
        except (DatasetError, IndexError):
            return None

    def true_label(self, file) -> str | None:
        """The label of a file named like a test sample (see identify), else None."""
        found = self.identify(file)
        return found[2] if found else None


def _draw(ds: Dataset, prefix: str, folder: Path, class_name: str | None, seed: int | None,
          classes: list[str] | None) -> Sample:
    """A test image of `ds` (random, or of one class; a random one of `classes` when given), written once as
    `folder/<prefix>-test-<index>-<label>.png`."""
    from PIL import Image
    rng = np.random.default_rng(None if seed is None or seed < 0 else int(seed))
    if class_name and class_name != "random":
        if class_name not in ds.class_names:
            raise ValueError(f"{class_name!r} is not a {ds.name} class")
        candidates = np.flatnonzero(ds.y_test == ds.class_names.index(class_name))
    elif classes:
        candidates = np.flatnonzero(np.isin(ds.y_test, [ds.class_names.index(c) for c in classes
                                                        if c in ds.class_names]))
    else:
        candidates = np.arange(len(ds.y_test))
    if len(candidates) == 0:
        raise ValueError(f"{ds.name} has no test image of {class_name or 'these classes'}")
    index = int(rng.choice(candidates))
    label = ds.class_names[ds.y_test[index]]
    path = folder / f"{prefix}-test-{index:05d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)}.png"
    if not path.exists():  # written whole: concurrent samplers never see half a file
        with atomic.replacing(path, durable=False) as tmp:
            Image.fromarray(ds.x_test[index]).save(tmp, format="PNG")
    return Sample(str(path), ds.x_test[index], label, index, ds.name if prefix.startswith("held-") else prefix)


def examples(folder: str | os.PathLike = EXAMPLES_DIR) -> list[Example]:
    """The bundled examples in the order `examples.json` gives (tools/make_examples.py writes both)."""
    folder = Path(folder)
    try:
        entries = json.loads((folder / "examples.json").read_text())
    except (OSError, ValueError):
        return []
    return [Example(str(folder / e["file"]), e["label"], e["case"]) for e in entries
            if (folder / e["file"]).is_file()]
