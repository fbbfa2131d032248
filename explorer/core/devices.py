"""The devices a run trains on: which accelerator the backend sees, and data parallelism over all of them
(Keras' DataParallel on JAX), with the batch split evenly between them.
"""

from __future__ import annotations

import keras


class DistributionError(ValueError):
    """A data-parallel run that cannot be: not on JAX, or a batch that does not split evenly."""


def device_name() -> str:
    """"GPU (name)" when the backend sees an accelerator, else "CPU"."""
    backend = keras.backend.backend()
    try:
        if backend == "tensorflow":
            import tensorflow as tf
            gpus = tf.config.list_physical_devices("GPU")
            return f"GPU ({gpus[0].name})" if gpus else "CPU"
        if backend == "jax":
            import jax
            device = jax.devices()[0]
            return "CPU" if device.platform == "cpu" else f"GPU ({device.device_kind})"
        if backend == "torch":
            import torch
            return f"GPU ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "CPU"
    except Exception:
        pass
    return "CPU"


def distribute_over_devices() -> int:
    """Makes every model built afterwards data-parallel over all the devices Keras' JAX backend sees (its
    accelerators, else the CPU's), with Keras' own distribution API: the weights replicated on each device,
    every batch split evenly between them, the gradients averaged. Returns how many devices."""
    if keras.backend.backend() != "jax":
        raise DistributionError(f"--distribute needs Keras' JAX backend (KERAS_BACKEND=jax; on a GPU "
                                f"machine with requirements-gpu.txt), not {keras.backend.backend()!r}")
    devices = keras.distribution.list_devices()
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    return len(devices)


def data_parallel_devices() -> int:
    """How many devices share each batch: those of the distribution set by distribute_over_devices, else 1."""
    distribution = keras.distribution.distribution()
    if distribution is None:
        return 1
    mesh = distribution.device_mesh
    return int(mesh.shape[list(mesh.axis_names).index(distribution.batch_dim_name)])


def check_batch_split(batch_size: int, devices: int) -> None:
    if batch_size % devices:
        raise DistributionError(f"a batch of {batch_size} images does not split evenly over {devices} "
                                f"devices; give --batch-size a multiple of {devices}")
