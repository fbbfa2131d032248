"""The GPU route, run on CPU: a fine-tuning job in the worker process on Keras' JAX backend (what
finetune.backend.choose_backend picks on a GPU machine), its checkpoints read back by the app on TensorFlow."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from explorer.checkpoints.store import load_checkpoint
from explorer.finetune.plan import Base, plan_job
from explorer.finetune.runner import FineTuneRunner
from explorer.finetune.state import RunStatus
from explorer.model.predict import predict_logits
from tests.helpers import ROOT


def jax_version() -> str:
    from importlib.metadata import version
    return version("jax")


# Loads each checkpoint on JAX and saves its logits for the images given: what the worker's model computes.
_JAX_LOGITS = """
import sys
import numpy as np
from explorer.checkpoints.store import load_checkpoint
from explorer.model.predict import predict_logits
x = np.load(sys.argv[1])
np.savez(sys.argv[2], *[predict_logits(load_checkpoint(folder)[0], x) for folder in sys.argv[3:]])
"""


def jax_env() -> dict:
    """The worker's environment on JAX's CPU wheel, whatever the tester's JAX or XLA settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_")) and k != "KERAS_BACKEND"}
    return {**env, "PYTHONPATH": str(ROOT), "EXPLORER_TRAIN_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}


def test_jax_is_installed_at_the_gpu_requirements_version():
    import jax
    pins = {}
    for name in ("requirements-test.txt", "requirements-gpu.txt"):
        for line in (ROOT / name).read_text().splitlines():
            if line.startswith("jax"):
                pins[name] = line.split("==")[1].strip()
    assert pins["requirements-test.txt"] == pins["requirements-gpu.txt"] == jax.__version__, pins


@pytest.mark.slow
def test_a_pair_job_on_jax_predicts_in_the_app_what_the_worker_predicted(tiny_checkpoints, cifar10, tmp_path):
    members = [Base(tag, f"{tag}: tiny", str(folder), load_checkpoint(folder)[1])
               for tag, folder in (("A", tiny_checkpoints["vanilla"]), ("B", tiny_checkpoints["spt_lsa"]))]
    plan = plan_job(members, cifar10.subset(train=160, test=40, seed=2), epochs=2, name="on-jax")
    runner = FineTuneRunner(tmp_path / "out", environ=jax_env())
    runner.start(plan)
    runner.wait(300)
    s = runner.snapshot()
    assert s.status == RunStatus.DONE, s.error
    assert (s.backend, s.backend_reason, s.device) == ("jax", "EXPLORER_TRAIN_BACKEND", "CPU")
    x_test = plan.dataset.x_test
    np.save(tmp_path / "x.npy", x_test)
    folders = [m.checkpoint for m in s.members]
    env = {**jax_env(), "KERAS_BACKEND": "jax"}
    out = subprocess.run([sys.executable, "-c", _JAX_LOGITS, str(tmp_path / "x.npy"), str(tmp_path / "jax.npz"),
                          *folders], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    with np.load(tmp_path / "jax.npz") as saved:
        jax_logits = [saved[f"arr_{i}"] for i in range(len(folders))]
    for m, on_jax in zip(s.members, jax_logits, strict=True):
        model, card = load_checkpoint(m.checkpoint)
        assert card.versions["backend"] == "jax" and card.training.device == "CPU"
        assert card.versions["jax"] == jax_version() and "tensorflow" not in card.versions
        assert [e.epoch for e in m.history] == [0, 1, 2] and len(m.predictions) == len(x_test)
        logits = predict_logits(model, x_test)  # the app, on TensorFlow
        assert logits.argmax(-1).tolist() == m.predictions
        assert on_jax.argmax(-1).tolist() == m.predictions
        np.testing.assert_allclose(logits, on_jax, rtol=0, atol=1e-4)
        top1 = float(np.mean(logits.argmax(-1) == plan.dataset.y_test))
        assert m.metrics.test_top1 == pytest.approx(top1)
