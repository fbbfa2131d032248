"""Faults during training: killed processes, cancels at random steps, a disk that fills up mid-write."""

from __future__ import annotations

import errno
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explorer.checkpoints.store import CheckpointError, clean_stale, list_checkpoints, load_checkpoint
from explorer.finetune.plan import plan_job
from explorer.finetune.runner import FineTuneRunner
from explorer.finetune.state import RunStatus
from explorer.training.recipe import TrainConfig
from explorer.training.runs import train_new
from tests.helpers import ROOT, tiny_config

pytestmark = pytest.mark.slow


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not any(x.startswith(".") for x in p.parts)}


@pytest.fixture
def root(tmp_path, tiny_checkpoints):
    root = tmp_path / "checkpoints"
    root.mkdir()
    shutil.copytree(tiny_checkpoints["vanilla"], root / "earlier")
    return root


def _train_cli(root, data_dir, name, epochs=3, subset=1024):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "explorer.train", "--preset", "tiny", "--data-dir", str(data_dir),
                             "--subset", str(subset), "--test-subset", "100", "--epochs", str(epochs),
                             "--batch-size", "64", "--out", str(root), "--name", name, "--verbose", "0"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_kill_or_cancel_at_random_steps_loses_nothing(root, data_dir, cifar10):
    rng = random.Random(1234)
    before = _digest(root / "earlier")
    runner = FineTuneRunner(root, environ={**os.environ, "PYTHONPATH": str(ROOT)})
    small = cifar10.subset(train=1024, test=64, seed=5)
    for attempt in range(5):
        listed = list_checkpoints(root)
        if attempt % 2 == 0:  # SIGKILL a training process at a random moment
            proc = _train_cli(root, data_dir, f"killed-{attempt}")
            time.sleep(rng.uniform(4.0, 14.0))
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        else:  # cancel the app's worker process at a random step
            stop_at = rng.randint(1, 40)
            runner.start(plan_job([], small, epochs=3, batch_size=32, name=f"cancelled-{attempt}",
                                  scratch=("tiny", "vanilla")))
            while runner.snapshot().members[0].step < stop_at and runner.snapshot().running:
                time.sleep(0.02)
            runner.cancel_as()
            runner.wait(60)
            assert runner.snapshot().status in (RunStatus.CANCELLED, RunStatus.DONE)
        assert _digest(root / "earlier") == before, "an earlier checkpoint changed"
        for folder in list_checkpoints(root):  # whatever is listed is whole and loads
            load_checkpoint(folder)
        new = set(list_checkpoints(root)) - set(listed)
        assert all(f.name.startswith(("killed", "cancelled")) for f in new)
        assert not any(p.name.startswith(".") and p.name.endswith(f"-{attempt}") and p in list_checkpoints(root)
                       for p in root.iterdir())
    # the next run starts cleanly: it cleans up after killed writers and writes a whole checkpoint
    proc = _train_cli(root, data_dir, "after", epochs=1, subset=256)
    out = proc.communicate(timeout=300)[0].decode()
    assert proc.returncode == 0, out[-2000:]
    assert (root / "after").is_dir() and load_checkpoint(root / "after")[1].name == "after"
    assert not list(root.glob(".tmp-*"))
    assert _digest(root / "earlier") == before


def test_stale_temporary_folders_of_dead_writers_are_removed(root):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = root / f".tmp-{dead.pid}-abcd1234-x"
    stale.mkdir()
    (stale / "model.weights.h5").write_bytes(b"half")
    live = root / f".tmp-{os.getpid()}-abcd1234-y"
    live.mkdir()
    assert clean_stale(root) == [stale]
    assert not stale.exists() and live.exists()


def test_full_disk_during_a_checkpoint_write(root, cifar10, monkeypatch):
    import keras
    real_save = keras.saving.save_model

    def fills_up(model, path, **kwargs):
        real_save(model, path, **kwargs)
        with open(Path(path) / "model.weights.h5", "r+b") as f:
            f.truncate(100)  # half-written, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(keras.saving, "save_model", fills_up)
    before = list_checkpoints(root)

    def run():
        return train_new(tiny_config(), "tiny", cifar10.subset(train=64, test=16),
                         TrainConfig(epochs=1, batch_size=32), root, "full", verbose=0)

    with pytest.raises(CheckpointError, match="No space left on device; nothing was saved"):
        run()
    assert list_checkpoints(root) == before
    assert not any(p.name.startswith(".tmp-") for p in root.iterdir())
    monkeypatch.undo()
    run()  # training works again once there is room
    assert (root / "full").is_dir() and load_checkpoint(root / "full")[1].name == "full"
