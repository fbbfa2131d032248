"""The fast GPU path, part by part on the CPU: the device batches draw and apply what the numpy batches do,
several steps per call (JAX) train what one step per call trains, bfloat16 computes what float32 does within
its precision, and a run stopped by its time limit resumes exactly."""

from __future__ import annotations

import json
import types

import keras
import numpy as np
import pytest

from explorer.data.batches import make_batches
from explorer.data.datasets import Dataset
from explorer.data.device_batches import DeviceImages, make_device_batches
from explorer.model.models import build_vit, float32_copy
from explorer.training.fitting import fit
from explorer.training.recipe import TrainConfig
from tests.helpers import run_on_jax, tiny_config

MIXED = dict(mixup_alpha=1.0, cutmix_alpha=1.0, mix_prob=0.75)


def _images(n=96, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, n)


def _dataset(n=200, seed=0):
    x, y = _images(n, seed)
    return Dataset("cifar10", x, y, x[:0], y[:0], [str(i) for i in range(10)])


@pytest.mark.parametrize("augment", [True, False])
def test_device_batches_are_the_numpy_batches(augment):
    x, y = _images()
    numpy_batches = make_batches(x, y, 10, 32, augment, 5, True, repeats=2, **MIXED)
    device_batches = make_device_batches(y, 10, 32, (32, 32), augment, 5, repeats=2, **MIXED)
    table = DeviceImages(*x.shape)
    table.assign(x)
    assert len(numpy_batches) == len(device_batches) == device_batches.steps == 6
    mixed = 0
    for epoch in (0, 3, 4):
        for batches in (numpy_batches, device_batches):
            batches.begin(epoch)  # as a run starts or resumes
        for i in range(len(numpy_batches)):
            images, labels = numpy_batches[i]
            draws, device_labels = device_batches[i]
            device_images = keras.ops.convert_to_numpy(table(draws))
            np.testing.assert_array_equal(device_labels, labels)
            # Crop, flip and CutMix move whole pixels: equal. Mixup's blend is one float32 product apart.
            np.testing.assert_allclose(device_images, images, rtol=0, atol=1e-3)
            mixed += int((labels % 1 != 0).any())
    assert mixed >= 6  # the batches compared were mixed, not only cropped


def test_device_batches_stack_several_steps_per_item():
    _, y = _images()
    one = make_device_batches(y, 10, 16, (32, 32), True, 1, **MIXED)
    four = make_device_batches(y, 10, 16, (32, 32), True, 1, steps_per_call=4, **MIXED)
    one.begin(0)
    four.begin(0)
    assert (len(one), len(four), four.steps) == (6, 2, 6)
    assert [four.steps_in(i) for i in range(len(four))] == [4, 2]
    steps = [one[i] for i in range(len(one))]
    for item, first in ((0, 0), (1, 4)):  # topping up 2 steps would waste a third of the epoch: a short call
        draws, labels = four[item]
        count = four.steps_in(item)
        np.testing.assert_array_equal(labels, np.concatenate([s[1] for s in steps[first:first + count]]))
        for key, value in draws.items():
            np.testing.assert_array_equal(value, np.concatenate([s[0][key] for s in steps[first:first + count]]))
    whole = make_device_batches(y, 10, 16, (32, 32), True, 1, steps_per_call=16, **MIXED)
    assert (len(whole), whole.steps_in(0)) == (1, 6) and len(whole[0][1]) == 6 * 16  # shorter than a call


def test_an_epochs_last_call_is_topped_up_with_steps_to_skip():
    _, y = _images(33 * 16)  # 33 steps of 16: at 4 a call, 8 calls and one real step topped up by 3
    one = make_device_batches(y, 10, 16, (32, 32), True, 1, **MIXED)
    four = make_device_batches(y, 10, 16, (32, 32), True, 1, steps_per_call=4, **MIXED)
    one.begin(0)
    four.begin(0)
    assert (len(four), four.steps, four.steps_in(8)) == (9, 33, 1)
    steps = [one[i] for i in range(len(one))]
    draws, labels = four[8]
    assert len(labels) == 4 * 16
    np.testing.assert_array_equal(labels[:16], steps[32][1])
    assert not labels[16:].any()  # the topping-up steps: labels all 0, which the scan skips
    for key, value in draws.items():
        np.testing.assert_array_equal(value, np.concatenate([steps[32][0][key]] * 4))


def test_the_device_table_is_not_saved_with_the_weights(tmp_path):
    x, _ = _images(8)
    table = DeviceImages(*x.shape)
    table.assign(x)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.table = table
    model.save_weights(tmp_path / "w.weights.h5")
    assert (tmp_path / "w.weights.h5").stat().st_size < 20_000  # 8 images would be 24 KB
    fresh = DeviceImages(*x.shape)
    fresh.load_own_variables({})
    assert not keras.ops.convert_to_numpy(fresh.images).any()


@pytest.mark.parametrize("variant,tau_mode", [("vanilla", "layer"), ("spt_lsa", "layer"), ("spt_lsa", "head")])
def test_bfloat16_computes_what_float32_does_within_its_precision(variant, tau_mode):
    config = tiny_config(variant=variant, tau_mode=tau_mode)
    mixed = build_vit(config, 10, precision="mixed_bfloat16")
    plain = build_vit(config, 10)
    plain.set_weights(mixed.get_weights())
    assert keras.config.dtype_policy().name == "float32"  # the global policy is left as it was
    assert all(v.dtype == "float32" for v in mixed.weights)
    x = np.random.default_rng(3).integers(0, 256, (16, 32, 32, 3)).astype("float32")
    low, high = (np.asarray(m.predict_on_batch(x)) for m in (mixed, plain))
    assert low.dtype == np.float32  # the logits (hence the loss) are float32
    # bfloat16 keeps 8 bits of mantissa: the probabilities agree within 0.02 (measured: under 0.01)
    softmax = keras.ops.softmax
    np.testing.assert_allclose(keras.ops.convert_to_numpy(softmax(low)), keras.ops.convert_to_numpy(softmax(high)),
                               atol=0.02)
    attention = mixed.get_layer("block0_attention")
    probe = keras.Model(mixed.inputs, mixed.get_layer("block0_attention").output[1])
    assert np.asarray(probe.predict_on_batch(x)).dtype == np.float32  # the softmax ran in float32
    if variant != "vanilla":
        assert attention.tau.dtype == "float32" and attention.tau._autocast is False  # read as float32
    copy = float32_copy(mixed, config, 10)
    assert copy.dtype_policy.name == "float32"
    assert [type(layer).__name__ for layer in copy.layers] == [type(layer).__name__ for layer in plain.layers]
    np.testing.assert_array_equal(np.asarray(copy.predict_on_batch(x)), high)


def test_a_float32_model_is_unchanged_by_the_mixed_precision_code():
    config = tiny_config(variant="spt_lsa")
    model = build_vit(config, 10)
    assert model.dtype_policy.name == "float32" and float32_copy(model, config, 10) is model
    assert not any(hasattr(layer, "_float32_softmax") for layer in model.layers)


def _fit(recipe: TrainConfig, dataset: Dataset, variant="spt_lsa", **kwargs):
    keras.utils.set_random_seed(recipe.seed)
    model = build_vit(tiny_config(variant=variant, drop_path=0.1), dataset.num_classes, precision=recipe.precision)
    record = fit(model, dataset, recipe, verbose=0, **kwargs)
    return model, record


@pytest.mark.slow  # about 10 s or more (pytest.ini)
def test_training_on_the_device_trains_what_the_numpy_batches_train():
    data = _dataset()
    recipe = dict(epochs=2, batch_size=32, randaugment=0.5, random_erasing=0.25, **MIXED)
    host, host_record = _fit(TrainConfig(**recipe), data)
    device, device_record = _fit(TrainConfig(device_data=True, **recipe), data)
    assert device_record.training.steps == host_record.training.steps == 12
    for a, b in zip(host.get_weights(), device.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert device_record.history[-1].val_top1 == host_record.history[-1].val_top1


def test_a_mixed_precision_run_trains_and_ends_as_float32(tmp_path):
    from explorer.training.runs import train_new
    data = _dataset()
    recipe = TrainConfig(epochs=2, batch_size=32, precision="mixed_bfloat16", device_data=True, **MIXED)
    result = train_new(tiny_config(variant="spt_lsa"), "tiny", data, recipe, tmp_path, "mixed", verbose=0)
    from explorer.checkpoints.store import load_folder
    model, card = load_folder(result.checkpoint)
    assert model.dtype_policy.name == "float32"
    assert all(layer.dtype_policy.name == "float32" for layer in model.layers)
    assert card.training.recipe["precision"] == "mixed_bfloat16"
    assert np.isfinite([e.loss for e in result.history]).all()


class _Clock:
    """A perf_counter that moves one second per reading: how long an epoch takes is then a function of the
    code alone, never of the host's speed."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now


@pytest.mark.slow  # about 10 s or more (pytest.ini)
def test_a_time_limit_stops_at_an_epoch_end_and_the_resumed_run_is_exact(tmp_path, monkeypatch):
    import explorer.training.fitting as fitting
    from explorer.training.backup import METADATA
    data = _dataset()
    recipe = dict(epochs=3, batch_size=32, device_data=True, randaugment=0.5, **MIXED)
    monkeypatch.setattr(fitting, "time", types.SimpleNamespace(perf_counter=_Clock().perf_counter))
    whole, whole_record = _fit(TrainConfig(**recipe), data)
    first_epoch = whole_record.history[0].time_s
    # Room for one epoch but not two: the run stops at the end of the first and keeps it.
    monkeypatch.setattr(fitting, "time", types.SimpleNamespace(perf_counter=_Clock().perf_counter))
    _, stopped = _fit(TrainConfig(time_limit=1.25 * first_epoch + 1, **recipe), data, backup=tmp_path / "b")
    assert stopped.stopped_by == "time_limit" and len(stopped.history) == 1
    assert json.loads((tmp_path / "b" / METADATA).read_text())["epoch"] == 1
    monkeypatch.setattr(fitting, "time", types.SimpleNamespace(perf_counter=_Clock().perf_counter))
    resumed, record = _fit(TrainConfig(**recipe), data, backup=tmp_path / "b")
    assert len(record.history) == 3 and record.stopped_by is None
    for a, b in zip(whole.get_weights(), resumed.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert [e.loss for e in record.history] == [e.loss for e in whole_record.history]


def test_the_recipe_refuses_what_the_fast_path_cannot_do():
    with pytest.raises(ValueError, match="precision must be one of"):
        TrainConfig(precision="float16")
    with pytest.raises(ValueError, match="steps_per_call > 1 needs device_data"):
        TrainConfig(steps_per_call=4)
    with pytest.raises(ValueError, match="time_limit must be positive"):
        TrainConfig(time_limit=0)


def test_the_cli_refuses_a_time_limit_without_a_backup(capsys):
    from explorer.train import main
    with pytest.raises(SystemExit):
        main(["--time-limit", "60"])
    assert "--time-limit needs --backup" in capsys.readouterr().err


def steps_per_call_report() -> dict:
    """On JAX: the same run (9 steps an epoch) at 1, 2, 3 and 4 steps per call into the compiled step: at 2
    each epoch's last call is topped up with a step to skip, 3 divides the epoch, and at 4 topping up would
    waste too much, so the last call is short; the programs each run needed (compiled, or taken from the
    persistent cache as the worker's runs take them: the short call's one-step program is the one-step run's).
    That the device batches train what the numpy batches train is shown on TensorFlow above: the same
    batches, the same step.

    The in-step draw is random erasing's: every Keras random layer in the step draws from a seed generator
    whose state the scan carries from step to step, RandAugment's as erasing's, and a step with RandAugment
    takes about five times as long to compile (21 of 27 CPU-seconds at -O0) for nothing more shown here."""
    import tempfile

    import jax

    from explorer.finetune.compiling import CompileCounter
    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp())
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    counter = CompileCounter()
    data = _dataset(320)
    recipe = dict(epochs=2, batch_size=32, random_erasing=0.5, **MIXED)
    out = {"backend": keras.backend.backend()}
    runs = {"one": TrainConfig(device_data=True, **recipe)}
    runs.update({str(k): TrainConfig(device_data=True, steps_per_call=k, **recipe) for k in (2, 3, 4)})
    weights = {}
    for name, recipe in runs.items():
        before = sum(counter.counts())
        model, record = _fit(recipe, data)
        weights[name] = model.get_weights()
        out[name] = {"steps": record.training.steps, "loss": record.history[-1].loss,
                     "programs": sum(counter.counts()) - before}

    def apart(a, b):
        return max(float(np.abs(x - y).max()) for x, y in zip(weights[a], weights[b], strict=True))

    out.update({f"{k}_vs_one": apart("one", str(k)) for k in (2, 3, 4)})
    return out


@pytest.mark.slow
def test_several_steps_per_call_train_what_one_step_per_call_trains_on_jax():
    report = run_on_jax("tests.test_fast_path:steps_per_call_report", timeout=1200)
    assert report["backend"] == "jax"
    assert {report[k]["steps"] for k in ("one", "2", "3", "4")} == {18}, report
    assert max(report[f"{k}_vs_one"] for k in (2, 3, 4)) < 1e-5, report
    # The topped-up last call needs no program of its own: as many as the run whose epochs divide into calls;
    # a short last call needs a step of its own.
    assert report["2"]["programs"] == report["3"]["programs"] == report["4"]["programs"] - 1, report


@pytest.mark.slow  # about 10 s or more (pytest.ini)
def test_the_bench_refuses_a_setting_it_lacks():
    """bench/fast_path.py's --only names settings (tests/test_window.py runs the bench as a GPU session does)."""
    import subprocess
    import sys
    bad = subprocess.run([sys.executable, "bench/fast_path.py", "--preset", "tiny", "--only",
                          "host float32,device fp8"], capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "no setting 'device fp8'" in bad.stderr
