"""The fine-tune worker's backend and the machine's facts (explorer.finetune.backend), as the tab says them."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.core.settings import Settings
from explorer.finetune.backend import choose_backend
from explorer.finetune.plan import JobError
from tests.helpers import ROOT


def settings_of(environ: dict) -> Settings:
    """What a process with this environment (and no other variable) reads."""
    return Settings.from_env(environ)


def test_backend_choice():
    yes, no = (lambda: True), (lambda: False)
    assert choose_backend(settings_of({}), gpu_present=no, jax_cuda=yes, jax_cpu=no) == ("tensorflow", "no GPU")
    # On a CPU, JAX when it is installed: its compiled steps persist on disk across workers
    assert choose_backend(settings_of({}), gpu_present=no, jax_cuda=no, jax_cpu=yes)[0] == "jax"
    assert choose_backend(settings_of({}), gpu_present=yes, jax_cuda=yes) == ("jax", "CUDA GPU with JAX")
    backend, why = choose_backend(settings_of({}), gpu_present=yes, jax_cuda=no)
    assert backend == "tensorflow" and "requirements-gpu.txt" in why
    assert choose_backend(settings_of({"KERAS_BACKEND": "jax"}), gpu_present=no, jax_cuda=no, jax_cpu=no)[0] == "jax"
    assert choose_backend(settings_of({"EXPLORER_TRAIN_BACKEND": "torch"}), gpu_present=yes, jax_cuda=yes)[0] == "torch"
    with pytest.raises(JobError, match="EXPLORER_TRAIN_BACKEND='mxnet'"):
        choose_backend(settings_of({"EXPLORER_TRAIN_BACKEND": "mxnet"}))


def test_jax_cuda_detection_looks_for_the_plugin():
    from explorer.finetune.backend import jax_cuda_installed

    def present(names):
        return lambda name: object() if name in names else None

    assert jax_cuda_installed(present({"jax", "jax_cuda12_plugin"}))
    assert not jax_cuda_installed(present({"jax"}))
    assert not jax_cuda_installed(present({"jax_cuda12_plugin"}))


def fake_driver(root: Path) -> Path:
    """The files an NVIDIA driver shows for one GPU."""
    gpu = root / "proc" / "driver" / "nvidia" / "gpus" / "0000:00:1e.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text("Model: NVIDIA L4\n")
    return root


def test_the_driver_files_say_whether_a_gpu_is_there(tmp_path):
    from explorer.finetune.backend import cuda_gpu_present
    assert not cuda_gpu_present(tmp_path)
    assert cuda_gpu_present(fake_driver(tmp_path))


def test_the_hardware_note_tells_an_idle_gpu_and_the_fix(tmp_path):
    from explorer.finetune.backend import hardware, jax_cuda_installed
    from explorer.ui.finetune_text import hardware_note as say

    def hardware_note(settings, **probes):
        """The tab's note on this machine, its facts found with `probes` (as choose_backend takes them)."""
        return say(hardware(settings, **probes))

    root = str(fake_driver(tmp_path / "gpu"))
    # JAX is there but not its CUDA plugin: what a Space on GPU hardware has with the CPU requirements.
    no_plugin = lambda: jax_cuda_installed(find_spec=lambda name: object() if name == "jax" else None)  # noqa: E731
    note = hardware_note(settings_of({"EXPLORER_DRIVER_ROOT": root}), jax_cuda=no_plugin)
    assert "has an NVIDIA GPU, but runs will train on its CPU" in note and "pip install -r requirements-gpu.txt" in note
    on_space = hardware_note(settings_of({"EXPLORER_DRIVER_ROOT": root, "SPACE_ID": "me/explorer"}), jax_cuda=no_plugin)
    assert "replace this Space's `requirements.txt` with the repository's `requirements-gpu.txt`" in on_space
    assert "**GPU**" in hardware_note(settings_of({"EXPLORER_DRIVER_ROOT": root}), jax_cuda=lambda: True)
    none = hardware_note(settings_of({"EXPLORER_DRIVER_ROOT": str(tmp_path / "none"), "SPACE_ID": "me/explorer"}))
    assert "Duplicate the Space" in none and "ZeroGPU" in none and "PyTorch only" in none
    assert "**CPU**" in hardware_note(settings_of({"EXPLORER_DRIVER_ROOT": str(tmp_path / "none")}))
    assert choose_backend(settings_of({"EXPLORER_DRIVER_ROOT": root}), jax_cuda=no_plugin)[0] == "tensorflow"
    assert choose_backend(settings_of({"EXPLORER_DRIVER_ROOT": root}), jax_cuda=lambda: True)[0] == "jax"


def test_the_gpu_requirements_are_the_apps_plus_jax_cuda_and_stand_alone():
    """A Space on GPU hardware takes requirements-gpu.txt as its requirements.txt: no -r, the same pins."""
    def pins(name):
        lines = [line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines()]
        return [line for line in lines if line]
    gpu, app = pins("requirements-gpu.txt"), pins("requirements.txt")
    assert not any(line.startswith("-r") for line in gpu)
    assert gpu == app + ["jax[cuda12]==0.10.2"]
