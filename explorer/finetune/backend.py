"""The worker's Keras backend, chosen without importing any framework: JAX on a CUDA GPU when the GPU
requirements are installed, JAX on the CPU when it is there (its compiled steps persist on disk), else the
app's own; and the facts about this machine that the Fine-tune tab reports."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from explorer.core.settings import Settings
from explorer.finetune.plan import JobError

BACKENDS = ("tensorflow", "jax", "torch")


def cuda_gpu_present(root: str | os.PathLike = "/") -> bool:
    """Whether an NVIDIA driver shows a GPU (without importing any framework): its files under `root`."""
    gpus = Path(root) / "proc" / "driver" / "nvidia" / "gpus"
    return (gpus.is_dir() and any(gpus.iterdir())) or (Path(root) / "dev" / "nvidia0").exists()


def _gpu_probe(settings: Settings) -> Callable[[], bool]:
    # EXPLORER_DRIVER_ROOT: where the driver's /proc and /dev are seen (a container may mount them elsewhere).
    return lambda: cuda_gpu_present(settings.driver_root)


def jax_cuda_installed(find_spec=importlib.util.find_spec) -> bool:
    return find_spec("jax") is not None and any(
        find_spec(name) is not None for name in ("jax_cuda12_plugin", "jax_cuda13_plugin"))


def jax_installed(find_spec=importlib.util.find_spec) -> bool:
    return find_spec("jax") is not None


def choose_backend(settings: Settings, gpu_present=None, jax_cuda=jax_cuda_installed,
                   jax_cpu=jax_installed) -> tuple[str, str]:
    """(Keras backend for the training worker, why). EXPLORER_TRAIN_BACKEND wins; else JAX when a CUDA GPU
    and JAX with CUDA are both there (the proven GPU route: TensorFlow's wheels here are CPU-only); else JAX
    on the CPU when it is installed (requirements.txt has its CPU wheel): its compiled steps persist on disk
    (JAX's compilation cache), so a new worker, after an app restart say, loads them instead of compiling
    (bench/finetune_speed.py); else the app's own backend (KERAS_BACKEND)."""
    gpu_present = gpu_present or _gpu_probe(settings)
    wanted = settings.train_backend
    if wanted:
        if wanted not in BACKENDS:
            raise JobError(f"EXPLORER_TRAIN_BACKEND={wanted!r} is not one of {BACKENDS}")
        return wanted, "EXPLORER_TRAIN_BACKEND"
    app_backend = settings.keras_backend
    if gpu_present():
        if jax_cuda():
            return "jax", "CUDA GPU with JAX"
        return app_backend, "a CUDA GPU is there, but JAX with CUDA is not installed (requirements-gpu.txt)"
    if jax_cpu():
        return "jax", "no GPU; JAX on the CPU, with its compilation cache"
    return app_backend, "no GPU"


@dataclass(frozen=True)
class Hardware:
    """Where fine-tuning runs will train: the backend chosen and why (`error`: why none can be), whether an
    NVIDIA GPU is there and, with one, whether JAX with CUDA is installed, and whether this is a Space."""

    backend: str | None
    reason: str
    gpu: bool
    jax_cuda: bool
    space: bool
    error: str | None = None


def hardware(settings: Settings, gpu_present=None, jax_cuda=jax_cuda_installed) -> Hardware:
    """This machine as fine-tuning sees it (the probes as for choose_backend)."""
    gpu_present = gpu_present or _gpu_probe(settings)
    space = bool(settings.space_id)
    try:
        backend, reason = choose_backend(settings, gpu_present, jax_cuda)
    except JobError as e:
        return Hardware(None, "", False, False, space, error=str(e))
    gpu = gpu_present()
    return Hardware(backend, reason, gpu, gpu and jax_cuda(), space)
