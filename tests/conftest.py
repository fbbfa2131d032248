"""Shared fixtures: tiny configs, a CIFAR folder written by the tests, trained tiny checkpoints, an HF cache.

No test depends on the tester's machine: $EXPLORER_DATA_DIR is unset, the Keras cache is an empty
folder, downloads go to a closed port on 127.0.0.1, and the CIFAR pickles the tests read are written
here, in the original layout, from the sample bundled with the app.
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ["HF_HUB_OFFLINE"] = "1"  # no test may reach the network, and none waits on retries

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Nothing listens on the discard port: a download a test did not arrange fails at once, offline.
NO_NETWORK = "http://127.0.0.1:9/"

TINY = dict(image_size=32, input_size=16, patch_size=4, num_layers=2, projection_dim=16, num_heads=2,
            key_dim=8, mlp_units=(32, 16), head="pool", head_units=(), dropout=0.0, head_dropout=0.0)

# Every variant and tau mode that differs in weights: vanilla and spt have no tau.
VARIANT_MODES = [("vanilla", "layer"), ("spt", "layer"), ("lsa", "layer"), ("lsa", "head"),
                 ("spt_lsa", "layer"), ("spt_lsa", "head")]


def tiny_config(**overrides):
    from explorer.config import ViTConfig
    return ViTConfig(**{**TINY, **overrides})


@pytest.fixture(scope="session", autouse=True)
def isolated_environment(tmp_path_factory):
    """What the tester's environment says about data does not reach the tests (or the apps they start), and
    nothing they cache is shared with another session."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("EXPLORER_DATA_DIR", raising=False)
        mp.setenv("KERAS_HOME", str(tmp_path_factory.mktemp("keras-home")))
        mp.setenv("EXPLORER_CIFAR_URL", NO_NETWORK)
        # Each session (each xdist worker) its own Gradio cache: Gradio writes a cached picture in place, and
        # two workers writing the same one could each read the other's half-written file.
        mp.setenv("GRADIO_TEMP_DIR", str(tmp_path_factory.mktemp("gradio")))
        yield


@pytest.fixture
def no_data(monkeypatch, tmp_path):
    """A machine with no CIFAR anywhere, offline: an empty data folder and an empty Keras cache."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras-home"))
    monkeypatch.setenv("EXPLORER_CIFAR_URL", NO_NETWORK)
    monkeypatch.delenv("EXPLORER_DATA_DIR", raising=False)
    return tmp_path / "no-data"


def write_batch(path: Path, images: np.ndarray, labels, key: bytes = b"labels", extra: dict | None = None) -> None:
    """One CIFAR pickle as the original archives hold it: bytes keys, (N, 3072) channel-major uint8."""
    data = np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(len(images), 3072)
    with open(path, "wb") as f:
        pickle.dump({b"batch_label": path.name.encode(), key: [int(v) for v in labels], b"data": data,
                     b"filenames": [f"{path.name}_{i}.png".encode() for i in range(len(images))], **(extra or {})}, f)


def write_cifar10(base: Path, x_train, y_train, x_test, y_test, class_names, readme: str | None = None) -> Path:
    """`base/cifar-10-batches-py` in the layout of cifar-10-python.tar.gz (five training batches)."""
    folder = Path(base) / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for i, (x, y) in enumerate(zip(np.array_split(x_train, 5), np.array_split(y_train, 5), strict=True), 1):
        write_batch(folder / f"data_batch_{i}", x, y)
    write_batch(folder / "test_batch", x_test, y_test)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [c.encode() for c in class_names], b"num_vis": 3072,
                     b"num_cases_per_batch": len(x_train) // 5}, f)
    if readme is not None:
        (Path(base) / "README.md").write_text(readme)
    return folder


def training_images(sample) -> tuple[np.ndarray, np.ndarray]:
    """2,000 training images made from the sample's 1,000: each mirrored, and each moved 2 px."""
    x = np.concatenate([sample.x_test[:, :, ::-1], np.roll(sample.x_test, 2, axis=(1, 2))])
    return x, np.concatenate([sample.y_test, sample.y_test])


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """A CIFAR folder as a user keeps one: CIFAR-10 in the original pickle layout (its test batch is the
    bundled sample, its training batches 2,000 images made from it) and a small CIFAR-100, with a README
    saying where the pixels come from."""
    from explorer.data import sample_set
    base = tmp_path_factory.mktemp("data")
    sample = sample_set()
    x_train, y_train = training_images(sample)
    write_cifar10(base, x_train, y_train, sample.x_test, sample.y_test, sample.class_names,
                  readme="CIFAR written by the tests; pixels decoded from a public JPEG copy of CIFAR-10.\n")
    folder = base / "cifar-100-python"
    folder.mkdir()
    fine = (np.arange(len(x_train)) * 7) % 100  # every class, and not the coarse labels
    for split, x, y in (("train", x_train, fine), ("test", sample.x_test, (np.arange(1000) * 3) % 100)):
        write_batch(folder / split, x, y, key=b"fine_labels", extra={b"coarse_labels": [int(v) // 5 for v in y]})
    with open(folder / "meta", "wb") as f:
        pickle.dump({b"fine_label_names": [n.encode() for n in CIFAR100_NAMES],
                     b"coarse_label_names": [f"super{i}".encode() for i in range(20)]}, f)
    return base


CIFAR100_NAMES = ["apple", "aquarium_fish", "baby"] + [f"class_{i:02d}" for i in range(3, 100)]


@pytest.fixture(scope="session")
def cifar10(data_dir):
    from explorer.data import load_cifar
    return load_cifar("cifar10", data_dir, download=False)


@pytest.fixture(scope="session")
def images(cifar10) -> np.ndarray:
    return cifar10.x_test[:8]


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory, cifar10):
    """A tiny vanilla and a tiny SPT/LSA checkpoint, trained for a few steps on real CIFAR-10."""
    from explorer.recipe import TrainConfig
    from explorer.train import train_new
    out = tmp_path_factory.mktemp("ckpts")
    small = cifar10.subset(train=256, test=64, seed=1)
    paths = {}
    for variant in ("vanilla", "spt_lsa"):
        result = train_new(tiny_config(variant=variant), "tiny", small,
                           TrainConfig(epochs=1, batch_size=64, validation_fraction=0.25), out,
                           name=f"tiny-{variant}", verbose=0)
        paths[variant] = Path(result["checkpoint"])
    return paths


def populate_hf_cache(cache_dir: Path, repo_id: str, folder: Path, commit: str,
                      refs: tuple[str, ...] = ("main",)) -> Path:
    """Lays `folder` out as huggingface_hub's cache does after a download of `repo_id` at `commit`."""
    repo = Path(cache_dir) / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    blobs = repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir(exist_ok=True)
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file():
            import hashlib
            blob = blobs / hashlib.sha256(path.read_bytes()).hexdigest()
            shutil.copyfile(path, blob)
            target = snapshot / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(blob, target.parent), target)
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(commit)
    return snapshot
