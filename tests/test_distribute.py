"""Training past one device: `python -m explorer.train --distribute` (Keras' DataParallel on JAX) over two
virtual CPU devices trains as one device does, and its checkpoint predicts the same in the TensorFlow app."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from explorer.checkpoints.store import load_checkpoint
from explorer.core.devices import DistributionError, check_batch_split, distribute_over_devices
from explorer.model.predict import predict_logits
from explorer.train import main
from tests.helpers import ROOT

# The CLI in a process of its own, recording what the run's finish_run was given and returned: the test
# predictions and logits of the trained model, and the devices its weights live on.
_RUN = """
import dataclasses, json, sys
from explorer.model import predict
from explorer import train
from explorer.training import runs as training
finish, seen = training.finish_run, {}
def record(model, record, config, preset, dataset, *args, **kwargs):
    result = finish(model, record, config, preset, dataset, *args, **kwargs)
    seen.update(dataclasses.asdict(result), logits=predict.predict_logits(model, dataset.x_test).tolist(),
                weight_devices=sorted(str(d) for d in model.weights[0].value.sharding.device_set))
    return result
training.finish_run = record
code = train.main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump(seen, f)
sys.exit(code)
"""


def jax_env() -> dict:
    """Keras on JAX's CPU wheel with two virtual devices, whatever the tester's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    return {**env, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


def train_args(data_dir, out, name, *extra):
    # 256 images: 230 to train on (the last batch of an epoch topped up), 26 to validate; 75 test images,
    # which a two-device model predicts as 76 (one repeated).
    return ["--preset", "tiny", "--variant", "spt_lsa", "--data-dir", str(data_dir), "--subset", "256",
            "--val-fraction", "0.1", "--test-subset", "75", "--epochs", "3", "--batch-size", "32",
            "--out", str(out), "--name", name, "--verbose", "0", *extra]


def start(tmp_path, data_dir, name, *extra):
    command = [sys.executable, "-c", _RUN, str(tmp_path / f"{name}.json"),
               *train_args(data_dir, tmp_path, name, *extra)]
    with open(tmp_path / f"{name}.out", "w") as out, open(tmp_path / f"{name}.err", "w") as err:
        return subprocess.Popen(command, env=jax_env(), stdout=out, stderr=err)


def finished(proc, tmp_path, name) -> dict:
    assert proc.wait(timeout=600) == 0, (tmp_path / f"{name}.err").read_text()[-3000:]
    return {**json.loads((tmp_path / f"{name}.json").read_text()), "stdout": (tmp_path / f"{name}.out").read_text()}


@pytest.mark.slow
def test_two_devices_train_as_one_and_the_app_predicts_what_the_run_predicted(data_dir, cifar10, tmp_path):
    # The same run on one device and on two, side by side.
    procs = {name: start(tmp_path, data_dir, name, *extra)
             for name, extra in (("one", ()), ("two", ("--distribute",)))}
    one, two = (finished(procs[name], tmp_path, name) for name in ("one", "two"))
    assert len(one["weight_devices"]) == 1
    assert len(two["weight_devices"]) == 2 and "data-parallel over 2 devices" in two["stdout"]
    assert (one["training"]["devices"], one["training"]["device"]) == (1, "CPU")
    assert (two["training"]["devices"], two["training"]["device"]) == (2, "2 × CPU")
    assert two["training"]["steps"] == one["training"]["steps"] == 3 * 8
    for key in ("loss", "val_loss", "top1", "val_top1"):
        curve_one, curve_two = ([e[key] for e in run["history"]] for run in (one, two))
        np.testing.assert_allclose(curve_two, curve_one, rtol=1e-5, err_msg=key)
    np.testing.assert_allclose(two["logits"], one["logits"], rtol=0, atol=1e-4)
    model, card = load_checkpoint(two["checkpoint"])  # the app, on TensorFlow
    assert card.versions["backend"] == "jax" and card.training.devices == 2
    x_test = cifar10.subset(test=75, seed=0).x_test
    logits = predict_logits(model, x_test)
    assert len(two["test_predictions"]) == 75
    assert logits.argmax(-1).tolist() == two["test_predictions"]
    np.testing.assert_allclose(logits, two["logits"], rtol=0, atol=1e-4)


def test_distribute_is_refused_off_jax_before_any_data_is_read(tmp_path, capsys):
    with pytest.raises(DistributionError, match="needs Keras' JAX backend .* not 'tensorflow'"):
        distribute_over_devices()
    assert main(["--distribute", "--dataset", str(tmp_path / "missing.zip"), "--out", str(tmp_path)]) == 2
    assert "--distribute needs Keras' JAX backend" in capsys.readouterr().err


def test_a_batch_must_split_evenly_over_the_devices(tmp_path):
    check_batch_split(32, 2)
    with pytest.raises(DistributionError, match="a batch of 33 images does not split evenly over 2 devices; "
                                                "give --batch-size a multiple of 2"):
        check_batch_split(33, 2)
    command = [sys.executable, "-m", "explorer.train", "--distribute", "--batch-size", "33",
               "--dataset", str(tmp_path / "missing.zip"), "--out", str(tmp_path)]
    out = subprocess.run(command, env=jax_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "does not split evenly over 2 devices" in out.stderr and "missing.zip" not in out.stderr
