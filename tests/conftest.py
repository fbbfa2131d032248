"""Shared fixtures: tiny configs, the offline CIFAR folder, a trained tiny checkpoint, an HF cache."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ["HF_HUB_OFFLINE"] = "1"  # no test may reach the network, and none waits on retries

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("EXPLORER_TEST_DATA", ROOT.parent / "shared" / "data"))

TINY = dict(image_size=32, input_size=16, patch_size=4, num_layers=2, projection_dim=16, num_heads=2,
            key_dim=8, mlp_units=(32, 16), head="pool", head_units=(), dropout=0.0, head_dropout=0.0)

# Every variant and tau mode that differs in weights: vanilla and spt have no tau.
VARIANT_MODES = [("vanilla", "layer"), ("spt", "layer"), ("lsa", "layer"), ("lsa", "head"),
                 ("spt_lsa", "layer"), ("spt_lsa", "head")]


def tiny_config(**overrides):
    from explorer.config import ViTConfig
    return ViTConfig(**{**TINY, **overrides})


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "cifar-10-batches-py" / "batches.meta").is_file():
        pytest.fail(f"offline CIFAR data not found at {DATA_DIR}; it must sit beside the project")
    return DATA_DIR


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
    from explorer.train import TrainConfig, train_new
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
