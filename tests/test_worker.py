"""The long-lived fine-tuning worker through the runner, as the app uses it: runs reuse one worker and
compile nothing the second time, Cancel, a killed or hung worker, the idle timeout, visitors' isolation and
the compilation cache's bound."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from explorer.checkpoints.store import list_checkpoints, read_card
from explorer.data.datasets import Dataset
from explorer.finetune.plan import Base, plan_job
from explorer.finetune.runner import FineTuneRunner
from explorer.finetune.state import RunStatus
from tests.helpers import JAX_CPU_XLA_FLAGS, worker_pid

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra):
    """The worker's environment: the app's settings, on JAX, compiling at XLA's lowest optimisation level
    (JAX_CPU_XLA_FLAGS: these tests compare runs compiled alike, and count compilations, which the level
    does not change; a fresh worker's compiling, most of its time, costs about half as much)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXPLORER_")}
    return {**env, "PYTHONPATH": str(ROOT), "EXPLORER_TRAIN_BACKEND": "jax", "EXPLORER_WORKER_PRIORITY": "normal",
            "XLA_FLAGS": JAX_CPU_XLA_FLAGS, **extra}


def _members(tiny_checkpoints, *tags):
    refs = {"A": "vanilla", "B": "spt_lsa"}
    return [Base(tag, f"{tag}: tiny {refs[tag]}", str(tiny_checkpoints[refs[tag]]),
                 read_card(tiny_checkpoints[refs[tag]])) for tag in tags]


def _run(runner, plan, owner=None, out_dir=None):
    runner.start(plan, owner, out_dir)
    runner.wait(300)
    s = runner.snapshot()
    assert s.status == RunStatus.DONE, s.error
    return s


def _no_leftovers(out: Path) -> bool:
    return not out.exists() or not [p for p in out.iterdir() if p.name.startswith(".tmp-")]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_a_second_run_of_the_same_shape_reuses_the_worker_and_compiles_nothing(tiny_checkpoints, cifar10,
                                                                               tmp_path):
    runner = FineTuneRunner(tmp_path / "out", environ=_env(), compile_cache=tmp_path / "cache")
    plan = plan_job(_members(tiny_checkpoints, "A", "B"), cifar10.subset(train=48, test=16, seed=1), epochs=2)
    try:
        first = _run(runner, plan)
        second = _run(runner, plan)
        assert runner.supervisor.started == 1 and first.worker.pid == second.worker.pid
        assert first.worker.compiles > 0 and first.worker.loads == 2
        # the second run: no model loaded, no step compiled (JAX's own count of XLA compilations)
        assert second.worker.loads == 2 and second.worker.compiles == 0, second.worker
        assert all(not m.training.timing.compiled for m in second.members)
        # ... and it trains the same models: the base's weights and a fresh optimizer every run
        for a, b in zip(first.members, second.members, strict=True):
            assert a.predictions == b.predictions
            assert a.metrics.test_top1 == pytest.approx(b.metrics.test_top1)
            assert [e.loss for e in a.history[1:]] == pytest.approx([e.loss for e in b.history[1:]], rel=1e-4)
        # a new worker (the app restarted) loads the steps from the compilation cache instead of compiling
        runner.shutdown()
        again = FineTuneRunner(tmp_path / "out", environ=_env(), compile_cache=tmp_path / "cache")
        third = _run(again, plan)
        assert third.worker.cache_hits > 0 and third.worker.compiles == 0, third.worker
        again.shutdown()
    finally:
        runner.shutdown()


@pytest.mark.slow
def test_cancel_in_a_warm_worker_stops_the_run_at_once_and_the_worker_serves_on(tiny_checkpoints, cifar10,
                                                                                  tmp_path):
    out = tmp_path / "out"
    runner = FineTuneRunner(out, environ=_env(), compile_cache=tmp_path / "cache")
    try:
        _run(runner, plan_job(_members(tiny_checkpoints, "A"), cifar10.subset(train=48, test=16, seed=1), epochs=1))
        pid = worker_pid(runner)
        long = plan_job(_members(tiny_checkpoints, "A", "B"), cifar10.subset(train=2000, test=40, seed=2), epochs=30,
                        name="cancelled")
        runner.start(long)
        deadline = time.time() + 120
        while time.time() < deadline and not runner.snapshot().members[0].step:
            time.sleep(0.05)
        assert runner.snapshot().members[0].step > 0
        began = time.time()
        assert runner.cancel_as() == "cancelling"
        runner.wait(30)
        assert time.time() - began < 5
        s = runner.snapshot()
        assert s.status == RunStatus.CANCELLED and not s.running and s.error is None
        assert not [c for c in list_checkpoints(out) if "cancelled" in str(c)] and _no_leftovers(out)
        assert worker_pid(runner) == pid, "the worker stopped the job, not itself"
        _run(runner, plan_job(_members(tiny_checkpoints, "A"), cifar10.subset(train=48, test=16, seed=1), epochs=1))
        assert runner.supervisor.started == 1
    finally:
        runner.shutdown()


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_a_hung_one_fails_its_run_and_is_replaced(tiny_checkpoints, cifar10,
                                                                                  tmp_path):
    out = tmp_path / "out"
    # hang_s well above a slow host's silent start (imports, compiling): only a stopped worker is that quiet
    runner = FineTuneRunner(out, environ=_env(), compile_cache=tmp_path / "cache", hang_s=60)
    data = cifar10.subset(train=400, test=40, seed=2)
    plan = plan_job(_members(tiny_checkpoints, "A"), data, epochs=1)
    try:
        _run(runner, plan)
        first = worker_pid(runner)
        os.kill(first, signal.SIGKILL)  # between runs (the kernel's OOM killer, say)
        deadline = time.time() + 10
        while time.time() < deadline and worker_pid(runner) is not None:
            time.sleep(0.05)
        _run(runner, plan)
        second = worker_pid(runner)
        assert second != first and runner.supervisor.started == 2
        # hung in the middle of a run (the same shape: nothing to compile): it says nothing for hang_s, so the
        # run fails and the worker goes
        runner.start(plan_job(_members(tiny_checkpoints, "A"), data, epochs=30))
        deadline = time.time() + 120
        while time.time() < deadline and not runner.snapshot().members[0].step:
            time.sleep(0.05)
        os.kill(second, signal.SIGSTOP)
        runner.wait(180)
        s = runner.snapshot()
        assert s.status == RunStatus.FAILED and "stopped responding" in s.error
        deadline = time.time() + 10
        while time.time() < deadline and _alive(second):
            time.sleep(0.1)
        assert not _alive(second) and _no_leftovers(out)
        _run(runner, plan)
        assert runner.supervisor.started == 3
    finally:
        runner.shutdown()


@pytest.mark.slow
def test_an_idle_worker_ends_and_the_next_start_brings_a_new_one(tiny_checkpoints, cifar10, tmp_path):
    runner = FineTuneRunner(tmp_path / "out", environ=_env(), compile_cache=tmp_path / "cache", idle_s=2)
    plan = plan_job(_members(tiny_checkpoints, "A"), cifar10.subset(train=48, test=16, seed=1), epochs=1)
    try:
        _run(runner, plan)
        pid = worker_pid(runner)
        deadline = time.time() + 30
        while time.time() < deadline and (_alive(pid) or worker_pid(runner) is not None):
            time.sleep(0.2)
        assert not _alive(pid) and worker_pid(runner) is None
        _run(runner, plan)
        assert runner.supervisor.started == 2
    finally:
        runner.shutdown()


@pytest.mark.slow
def test_one_visitors_run_carries_nothing_into_the_next_visitors(tiny_checkpoints, cifar10, tmp_path):
    """Shared mode: X's run on X's images, then Y's on Y's in the same warm worker; Y's result is what a
    fresh worker gives Y, and each visitor's checkpoints are in their own folder."""
    x_data = cifar10.subset(train=96, test=16, seed=3)
    y_data = cifar10.subset(train=48, test=16, seed=4)
    y_plan = plan_job(_members(tiny_checkpoints, "A", "B"), y_data, epochs=2, name="y")
    warm = FineTuneRunner(tmp_path / "out", environ=_env(), compile_cache=tmp_path / "cache")
    fresh = FineTuneRunner(tmp_path / "fresh", environ=_env(), compile_cache=tmp_path / "cache")
    try:
        _run(warm, plan_job(_members(tiny_checkpoints, "A", "B"), x_data, epochs=3, name="x"), "X",
             tmp_path / "out" / "X")
        after_x = _run(warm, y_plan, "Y", tmp_path / "out" / "Y")
        alone = _run(fresh, y_plan, "Y", tmp_path / "fresh" / "Y")
        for a, b in zip(after_x.members, alone.members, strict=True):
            assert a.predictions == b.predictions
            assert [e.loss for e in a.history[1:]] == pytest.approx([e.loss for e in b.history[1:]], rel=1e-4)
        assert [p.name for p in (tmp_path / "out" / "Y").iterdir()] and \
            all(p.name.startswith("y") for p in (tmp_path / "out" / "Y").iterdir())
        assert all(p.name.startswith("x") for p in (tmp_path / "out" / "X").iterdir())
    finally:
        warm.shutdown()
        fresh.shutdown()


@pytest.mark.slow
def test_the_compilation_cache_stays_within_its_bound(tiny_checkpoints, cifar10, tmp_path):
    cache = tmp_path / "cache"
    bound_mb = 0.4
    runner = FineTuneRunner(tmp_path / "out", environ=_env(EXPLORER_COMPILE_CACHE_MB=str(bound_mb)),
                            compile_cache=cache)
    try:
        for classes in (["cat", "dog"], ["cat", "dog", "ship"]):  # two shapes: more programs than fit
            ids = [cifar10.class_names.index(c) for c in classes]
            index = np.flatnonzero(np.isin(cifar10.y_train, ids))[:48]
            y = np.asarray([ids.index(v) for v in cifar10.y_train[index]])
            ds = Dataset("mine", cifar10.x_train[index], y, cifar10.x_train[index[:8]], y[:8], classes)
            _run(runner, plan_job(_members(tiny_checkpoints, "A", "B"), ds, epochs=1, train_on_all=True))
        size = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
        assert 0 < size <= bound_mb * 2**20, size
    finally:
        runner.shutdown()


@pytest.mark.slow
def test_a_prepared_worker_has_compiled_a_job_of_the_warmed_shape(tiny_checkpoints, cifar10, tmp_path):
    """What the app does at start on a GPU: the worker compiles the shipped pair's steps for the warm-up shapes
    in the background; a Start of that shape then compiles nothing."""
    runner = FineTuneRunner(tmp_path / "out", environ=_env(), compile_cache=tmp_path / "cache")
    data = cifar10.subset(train=60, test=16, seed=5)
    try:
        runner.prepare([str(tiny_checkpoints["vanilla"]), str(tiny_checkpoints["spt_lsa"])],
                       [{"classes": data.num_classes, "images": len(data.x_train)}])
        s = _run(runner, plan_job(_members(tiny_checkpoints, "A", "B"), data, epochs=1))
        assert runner.supervisor.started == 1 and s.worker.compiles == 0, s.worker
    finally:
        runner.shutdown()


def test_worker_settings_that_are_not_positive_numbers_are_refused_by_name(tmp_path):
    for name in ("EXPLORER_WORKER_IDLE_S", "EXPLORER_WORKER_HANG_S", "EXPLORER_COMPILE_CACHE_MB"):
        for bad in ("ten", "0", "-5"):
            with pytest.raises(ValueError, match=f"{name}='{bad}': expected a positive number"):
                FineTuneRunner(tmp_path / "out", environ=_env(**{name: bad}))


def test_the_worker_command_answers_help_and_refuses_what_is_not_a_job_folder(tmp_path, capsys):
    from explorer.finetune.serve import main
    assert main(["--help"]) == 0 and "python -m explorer.finetune --serve" in capsys.readouterr().out
    assert main([str(tmp_path / "nothing")]) == 2
    assert f"error: {tmp_path / 'nothing'} is not a job folder" in capsys.readouterr().err
    assert main(["a", "b"]) == 2 and "usage:" in capsys.readouterr().err
