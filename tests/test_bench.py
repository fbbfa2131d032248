"""The benchmarks' own arithmetic (bench/): what they measure is what they say."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.helpers import write_cifar10

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench_module(name: str):
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_the_throughput_timer_counts_steps_not_reports(monkeypatch):
    """Our loop reports a step at most every 0.25 s: 10 steps a second reported as every third step (and the
    last) is still 10 steps a second, where counting reports would say about 3.4."""
    bench = _bench_module("train_throughput")
    reported = [s for s in range(1, 31) if s % 3 == 0 or s == 30]
    clock = iter([0.1 * s for s in reported])
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    timer = bench.Timer(skip=2)
    for step in reported:
        timer.mark(step)
    assert timer.rate(batch_size=128) == pytest.approx(10 * 128)


def test_the_throughput_timer_refuses_too_few_steps():
    timer = _bench_module("train_throughput").Timer(skip=10)
    timer.mark(5)
    timer.mark(11)
    with pytest.raises(SystemExit, match="fewer than two steps"):
        timer.rate(batch_size=128)


def test_the_quality_bench_rotates_every_image_of_a_zip_through_the_test_part_once():
    """bench/finetune_quality.py --folds: fold 0 is the loader's split itself; over the folds each image is
    held out exactly once, each fold trains on all the others, and each class keeps its share of the test."""
    from explorer.data.datasets import Dataset
    bench = _bench_module("finetune_quality")
    rng = np.random.default_rng(0)
    y = rng.integers(0, 6, 600)
    x = np.arange(600, dtype=np.uint32).view(np.uint8).reshape(600, 1, 1, 4)  # each image says which it is
    ds = Dataset("z", x[:480], y[:480], x[480:], y[480:], [f"c{i}" for i in range(6)])
    ident = lambda images: images.reshape(len(images), 4).view(np.uint32).ravel()  # noqa: E731
    assert bench.fold(ds, 0, 5) is ds
    held = []
    for k in range(5):
        f = bench.fold(ds, k, 5)
        tested, trained = ident(f.x_test), ident(f.x_train)
        assert not set(tested) & set(trained) and len(tested) + len(trained) == 600
        assert (y[tested] == f.y_test).all() and (y[trained] == f.y_train).all()
        share = np.bincount(f.y_test, minlength=6) / np.bincount(y, minlength=6)
        assert share.min() > 0.1 and share.max() < 0.3, share
        held.append(tested)
    assert sorted(np.concatenate(held)) == list(range(600))


def test_the_quality_bench_scores_known_zips_on_test_images_the_draw_does_not_hold(tmp_path, data_dir):
    """The held-out images of a known zip are the rest of its classes' CIFAR-10 test images: none of them is
    in the draw's zip, together they are every test image of those classes, labelled as the zip labels them."""
    from explorer.data.folders import read_image_zip
    bench = _bench_module("finetune_quality")
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    labels = np.arange(10_000) % 10
    pixels = np.arange(10_000, dtype=np.uint32).view(np.uint8).reshape(10_000, 1, 1, 4)
    x = np.zeros((10_000, 32, 32, 3), np.uint8)
    x[:, 0, :4, 0] = pixels[:, 0, 0]  # each image's first row says which it is
    write_cifar10(tmp_path / "data", x[:10], labels[:10], x, labels, names)
    (tmp_path / "data" / "cifar-100-python").symlink_to(data_dir / "cifar-100-python")
    ident = lambda images: images[:, 0, :4, 0].copy().view(np.uint32).ravel()  # noqa: E731
    for draw in (0, 4):
        zipped = read_image_zip(bench.draw_zips(tmp_path, tmp_path / "data", draw)["known"])
        hx, hy = bench.held_out_known(tmp_path / "data", draw)
        inside = np.concatenate([ident(zipped.x_train), ident(zipped.x_test)])
        assert len(inside) == 1_000 and len(hy) == 4_000 and not set(inside) & set(ident(hx))
        known = [names.index(c) for c in bench.KNOWN]
        assert sorted(np.concatenate([inside, ident(hx)])) == sorted(np.flatnonzero(np.isin(labels, known)))
        assert [bench.KNOWN[c] for c in hy] == [names[labels[i]] for i in ident(hx)]
        assert zipped.class_names == list(bench.KNOWN)


def test_the_quality_bench_counts_a_draw_over_its_folds_and_every_known_run_on_held_out_images(capsys):
    """Pooled over folds, a draw's top-1 is images right over images held out (not a mean of fold means);
    every known run is listed with its default - probe on the held-out images, and the worst is found."""
    bench = _bench_module("finetune_quality")
    results = {("six-d0", "m", "n"): (100, None), ("six-d0-f1", "m", "n"): (300, None),
               ("six-d0", "m", "default"): (0.5, 1.0), ("six-d0-f1", "m", "default"): (0.9, 1.0)}
    assert bench.pooled(results, 2, "six", "m", 0, "default") == pytest.approx((50 + 270) / 400)
    for name, probe, default in (("known-d0", 0.80, 0.81), ("known-d0-f1", 0.80, 0.78), ("known-d1", 0.7, 0.7),
                                 ("known-d1-f1", 0.7, 0.75)):
        results[(name, "m", "probe", "held")] = (probe, None)
        results[(name, "m", "default", "held")] = (default, None)
    bench.held_out_runs(["m"], 2, 2, results)
    out = capsys.readouterr().out
    assert "| m | 0 | +1.00 | -2.00 | -0.50 |" in out and "| m | 1 | +0.00 | +5.00 | +2.50 |" in out
    assert "all 4 runs: mean +1.00, worst -2.00, 1 under -1.5" in out

