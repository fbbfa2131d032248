"""Training that survives interruption: a run killed mid-way and resumed ends as if it never stopped."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import keras
import numpy as np
import pytest

from explorer.checkpoints.store import list_checkpoints, load_checkpoint, read_card
from explorer.core.protocol import EpochEnd
from explorer.model.models import build_vit
from explorer.training.backup import METADATA, RUN, BackupError, check, run_identity
from explorer.training.fitting import Cancelled, fit
from explorer.training.recipe import TrainConfig
from tests.helpers import ROOT, tiny_config

# Timings differ between runs; everything else in an epoch record must be equal.
TIMING = ("time_s",)


def train_command(data_dir, out, name, *extra):
    return [sys.executable, "-m", "explorer.train", "--preset", "tiny", "--variant", "spt_lsa",
            "--data-dir", str(data_dir), "--subset", "600", "--test-subset", "100", "--epochs", "4",
            "--batch-size", "64", "--threads", "1", "--cutmix", "1", "--mixup", "0.2", "--mix-prob", "0.5",
            "--out", str(out), "--name", name, "--verbose", "0", *extra]


def env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "tensorflow"}


def weights_and_card(folder):
    model, _ = load_checkpoint(folder)
    return model.get_weights(), read_card(folder).to_json()


def without_timing(history):
    return [{k: v for k, v in e.items() if k not in TIMING} for e in history]


@pytest.mark.slow
def test_killed_and_resumed_run_equals_an_uninterrupted_one(data_dir, tmp_path):
    straight = subprocess.run(train_command(data_dir, tmp_path / "a", "run"), env=env(),
                              capture_output=True, text=True, timeout=900)
    assert straight.returncode == 0, straight.stderr[-2000:]

    backup = tmp_path / "backup"
    command = train_command(data_dir, tmp_path / "b", "run", "--backup", str(backup))
    proc = subprocess.Popen(command, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    meta = backup / METADATA
    while time.monotonic() < deadline:  # killed with no warning once two of four epochs are backed up
        if meta.is_file() and json.loads(meta.read_text())["epoch"] >= 2:
            break
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = json.loads(meta.read_text())["epoch"]
    assert 2 <= killed_at < 4 and not list_checkpoints(tmp_path / "b")

    resumed = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming from backup {backup}: {killed_at} of 4 epochs done" in resumed.stdout
    assert not backup.exists()  # the checkpoint is written: the backup has done its job

    [a], [b] = list_checkpoints(tmp_path / "a"), list_checkpoints(tmp_path / "b")
    (wa, ca), (wb, cb) = weights_and_card(a), weights_and_card(b)
    assert len(wa) == len(wb) and all(np.array_equal(x, y) for x, y in zip(wa, wb, strict=True))
    assert without_timing(ca["history"]) == without_timing(cb["history"]) and len(cb["history"]) == 4
    assert ca["metrics"] == cb["metrics"]
    assert ca["training"]["steps"] == cb["training"]["steps"]


@pytest.mark.slow
def test_a_backup_of_another_run_is_refused_with_the_reason(data_dir, tmp_path):
    backup = tmp_path / "backup"
    # A time budget stops the run after its first step; the backup (no epoch completed) stays for a longer go.
    first = subprocess.run(train_command(data_dir, tmp_path, "one", "--backup", str(backup), "--max-seconds", "0.01"),
                           env=env(), capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (backup / RUN).is_file() and not (backup / METADATA).exists()
    other = subprocess.run(train_command(data_dir, tmp_path, "two", "--backup", str(backup), "--lr", "5e-4"),
                           env=env(), capture_output=True, text=True, timeout=600)
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert "is of a different run: recipe.learning_rate was 0.001, this run's is 0.0005" in other.stderr
    assert [p.name for p in list_checkpoints(tmp_path)] == ["one"]


@pytest.mark.usefixtures("eager_steps")
def test_fit_resumes_in_process_and_refuses_a_different_model(cifar10, tmp_path):
    data = cifar10.subset(train=256, test=0)
    recipe = TrainConfig(epochs=2, batch_size=64, validation_fraction=0.25, keep_best=True)
    backup = tmp_path / "b"
    first = fit(build_vit(tiny_config(variant="lsa"), 10), data, recipe, verbose=0, backup=backup)
    again = fit(build_vit(tiny_config(variant="lsa"), 10), data, recipe, verbose=0, backup=backup)
    # Two epochs done: the second call restores them, trains none, and reports the same run.
    assert again.training.steps == first.training.steps and again.history == first.history
    assert again.metrics == first.metrics and again.training.kept_epoch == first.training.kept_epoch
    with pytest.raises(BackupError, match=r"different run: architecture was"):
        fit(build_vit(tiny_config(variant="vanilla"), 10), data, recipe, verbose=0, backup=backup)


def test_a_folder_of_other_weights_is_not_taken_for_a_backup(tmp_path):
    (tmp_path / "latest.weights.h5").write_bytes(b"x")
    with pytest.raises(BackupError, match="no run.json"):
        check(tmp_path, {"recipe": {}})
    assert check(tmp_path / "new", {"recipe": {"seed": 0}}) == 0
    assert json.loads((tmp_path / "new" / RUN).read_text()) == {"recipe": {"seed": 0}}


def test_a_recipe_without_the_later_options_keeps_the_identity_older_backups_hold(cifar10):
    """Backups written before the in-step augmentations, repeats and named recipes existed still resume."""
    model = build_vit(tiny_config(), 10)
    later = {"randaugment", "random_erasing", "repeats", "name"}
    assert not later & set(run_identity(model, cifar10, TrainConfig())["recipe"])
    paper = run_identity(model, cifar10, TrainConfig(randaugment=0.5, random_erasing=0.25, repeats=3, name="paper"))
    assert {k: paper["recipe"][k] for k in later - {"name"}} == {"randaugment": 0.5, "random_erasing": 0.25,
                                                                "repeats": 3}
    assert "name" not in paper["recipe"]  # where the values came from changes nothing computed


@pytest.mark.slow
def test_a_run_with_stochastic_depth_and_in_step_augmentation_resumes_as_if_never_stopped(cifar10, tmp_path):
    """What the training step draws (drop path, RandAugment, random erasing) is a function of the seed, the
    epoch and the step, like the numpy batches: a run stopped mid-epoch and resumed ends with the same weights."""
    data = cifar10.subset(train=192, test=0)
    recipe = TrainConfig(epochs=2, batch_size=32, validation_fraction=0.0, randaugment=0.5, random_erasing=0.5,
                     mixup_alpha=1.0, cutmix_alpha=1.0, mix_prob=0.5)
    config = tiny_config(num_layers=3, drop_path=0.3)

    def build():
        keras.utils.set_random_seed(0)  # the same starting weights for all three
        return build_vit(config, 10)

    straight = build()
    fit(straight, data, recipe, verbose=0)

    backup, cancel = tmp_path / "b", threading.Event()

    def stop_in_the_second_epoch(event):
        # Batch events are throttled (PROGRESS_EVERY_S), so on a fast host none may come between an epoch's
        # first and last step: cancel when the first epoch is recorded; the run stops after the next step.
        if isinstance(event, EpochEnd) and event.record.epoch == 1:
            cancel.set()

    with pytest.raises(Cancelled):
        fit(build(), data, recipe, verbose=0, backup=backup, progress=stop_in_the_second_epoch, cancel=cancel)
    assert json.loads((backup / METADATA).read_text())["epoch"] == 1
    resumed = build()
    fit(resumed, data, recipe, verbose=0, backup=backup)
    for a, b in zip(straight.get_weights(), resumed.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
