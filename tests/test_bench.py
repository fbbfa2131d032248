"""The benchmarks' own arithmetic (bench/): what they measure is what they say."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

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
