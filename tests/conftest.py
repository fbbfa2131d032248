"""Shared fixtures: an isolated environment, a CIFAR folder written by the tests, trained tiny checkpoints
(the helpers they are made with are in tests/helpers.py).

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
from PIL import Image

from tests.helpers import (
    CIFAR100_NAMES,
    NO_NETWORK,
    eager_compile,
    pair_folder,
    tiny_config,
    training_images,
    write_batch,
    write_cifar10,
)


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


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """A CIFAR folder as a user keeps one: CIFAR-10 in the original pickle layout (its test batch is the
    bundled sample, its training batches 2,000 images made from it) and a small CIFAR-100, with a README
    saying where the pixels come from."""
    from explorer.data.datasets import sample_set
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


@pytest.fixture(scope="session")
def cifar10(data_dir):
    from explorer.data.datasets import load_cifar
    return load_cifar("cifar10", data_dir, download=False)


@pytest.fixture(scope="session")
def images(cifar10) -> np.ndarray:
    return cifar10.x_test[:8]


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory, cifar10):
    """A tiny vanilla and a tiny SPT/LSA checkpoint, trained for a few steps on real CIFAR-10 (in graph mode,
    as the app trains). Under xdist the two workers share them: each trains one variant in the run's common
    temporary folder while the other trains the other, and both read both (no test writes into them)."""
    from filelock import FileLock

    from explorer.training.recipe import TrainConfig
    from explorer.training.runs import train_new
    small = cifar10.subset(train=256, test=64, seed=1)
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... under xdist
    # the run's own folder, even where --basetemp names one that an earlier run left checkpoints in
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
    out = tmp_path_factory.getbasetemp().parent / f"tiny-ckpts-{run}" if worker else tmp_path_factory.mktemp("ckpts")
    out.mkdir(exist_ok=True)
    variants = ("vanilla", "spt_lsa")
    order = variants[::-1] if worker and int(worker.removeprefix("gw")) % 2 else variants
    for variant in order:
        name = f"tiny-{variant}"
        with FileLock(out / f"{name}.lock"):
            if not (out / name).is_dir():
                train_new(tiny_config(variant=variant), "tiny", small,
                          TrainConfig(epochs=1, batch_size=64, validation_fraction=0.25), out,
                          name=name, verbose=0)
    return {variant: out / f"tiny-{variant}" for variant in variants}


@pytest.fixture
def eager_steps():
    """The model's steps run eagerly for the test (tests/helpers.py's `eager_compile` says when and why)."""
    with eager_compile():
        yield


@pytest.fixture
def root(tmp_path, tiny_checkpoints):
    """A checkpoints folder holding the tiny vanilla model as `shipped` (shared mode's tests)."""
    root = tmp_path / "checkpoints"
    root.mkdir()
    shutil.copytree(tiny_checkpoints["vanilla"], root / "shipped")
    return root


@pytest.fixture(scope="module")
def ex(tmp_path_factory, tiny_checkpoints, data_dir):
    """The app's state over the tiny pair (as A and B of tests/handlers.py) and the CIFAR folder: one per test
    module, shared by its handler tests (test_ui*.py)."""
    from explorer.ui import AppState
    root = pair_folder(tmp_path_factory.mktemp("ui") / "checkpoints", tiny_checkpoints)
    return AppState(root=root, data_dir=str(data_dir))


@pytest.fixture(scope="module")
def image_file(tmp_path_factory, cifar10):
    """Test image 42, named as the app names a test sample (so it knows the true label)."""
    path = tmp_path_factory.mktemp("img") / "cifar10-test-00042-x.png"
    Image.fromarray(cifar10.x_test[42]).save(path)
    return str(path)
