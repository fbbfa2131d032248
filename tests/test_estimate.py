"""What a fine-tune will cost (explorer.finetune.estimate): a pace read from a run's record, each model's work
as the worker will choose it, the time left that falls as the run goes, and the machine's pace book."""

from __future__ import annotations

import json

import numpy as np
import pytest

from explorer.core.card import Card, Timing, Training
from explorer.core.protocol import BatchEnd, MemberStarted, Phase, PhaseBegun, Started
from explorer.data.datasets import Dataset
from explorer.finetune.estimate import (
    Needed,
    Pace,
    PaceBook,
    Work,
    architecture,
    estimate,
    plan_work,
    time_left,
)
from explorer.finetune.plan import plan_job
from explorer.finetune.state import Estimate, MemberCost, MemberState, RunState, RunStatus, apply_event


def _training(**timing) -> Training:
    return Training(steps=11, batch_size=32, train_images=320, validation_images=40, epochs=1, epochs_trained=1,
                    wall_time_s=14.0, timing=Timing(**{"first_step_s": 4.0, "steps_s": 12.0, "validation_s": 0.04,
                                                       "prepare_s": 3.0, "compiled": True, **timing}))


def test_a_pace_is_read_from_where_a_runs_time_went():
    pace = Pace.from_run(_training(), seconds=20.0, tests=40, measured="measure")
    step = (12.0 - 4.0) / 10  # the steps after the first
    assert pace.step_s == pytest.approx(step / 32) and pace.compile_s == pytest.approx(4.0 - step)
    assert pace.forward_s == pytest.approx(0.04 / 40)  # one epoch's validation of 40 images
    assert pace.prepare_s == pytest.approx(3.0 - 0.001 * (2 * 320 + 40))  # beyond the head's forward passes
    assert pace.finish_s == pytest.approx(20.0 - 3.0 - 14.0 - 0.001 * 40)
    assert pace.measured == "measure"
    # A run whose step was compiled already says nothing of compiling; a record without timing, nothing.
    assert Pace.from_run(_training(compiled=False), 20.0, 40).compile_s is None
    assert Pace.from_run(Training(steps=11, batch_size=32), 20.0, 40) is None
    assert Pace.from_run(None, None, 0) is None
    # A forward pass timed apart (a Measure's, compiled) stands for the validation's, which held a compile.
    apart = Pace.from_run(_training(validation_s=4.0), 20.0, 40, "measure", forward_s=0.001)
    assert apart.forward_s == 0.001 and apart.prepare_s == pytest.approx(pace.prepare_s)


def test_each_models_work_is_what_the_worker_will_run(tiny_checkpoints):
    """The split and recipe each model gets, counted from the plan the way the worker's run_job chooses them:
    a base that knows the classes gets its lower rate, not other steps; a batch size asked for is kept."""
    from tests.helpers import plan_members
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 255, (500, 32, 32, 3), dtype=np.uint8), np.arange(500) % 5
    ds = Dataset("five", x, y, x[:100], y[:100], ["airplane", "cat", "dog", "c3", "c4"])
    plan = plan_job(plan_members(tiny_checkpoints, "A", "B"), ds)
    work = plan_work(plan)
    assert work[0] == work[1] and (work[0].fit, work[0].validation, work[0].test) == (450, 50, 100)
    assert work[0].batch == 16 and work[0].steps == work[0].epochs * 29
    assert abs(work[0].steps * work[0].batch - 4000) < 29 * 16  # the recipe's image budget
    asked = plan_work(plan_job(plan_members(tiny_checkpoints, "A"), ds, batch_size=64, epochs=3))
    assert asked == [Work(450, 50, 100, 3, 64)] and asked[0].steps == 3 * 8


def test_the_estimate_adds_the_work_at_each_models_pace_and_asks_for_what_is_missing(tiny_checkpoints):
    from tests.helpers import plan_members
    members = plan_members(tiny_checkpoints, "A", "B")
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 255, (200, 32, 32, 3), dtype=np.uint8), np.arange(200) % 4
    plan = plan_job(members, Dataset("four", x, y, x[:40], y[:40], ["p", "q", "r", "s"]))
    book = PaceBook()
    needed = estimate(plan, [m.card for m in members], book, lambda m, w: False, worker_up=True)
    assert isinstance(needed, Needed) and set(needed.bases.values()) == {m.folder for m in members}
    assert (needed.classes, needed.batch, needed.frozen) == (4, plan_work(plan)[0].batch, False)
    pace = Pace(step_s=0.01, compile_s=5.0, forward_s=0.002, prepare_s=1.0, finish_s=0.5, measured="measure")
    for m in members:
        book.record(architecture(m.card), pace)
    book.record_start(8.0)
    w = plan_work(plan)[0]
    cold = estimate(plan, [m.card for m in members], book, lambda m, w: False, worker_up=False)
    warm = estimate(plan, [m.card for m in members], book, lambda m, w: m.tag == "A", worker_up=True)
    assert isinstance(cold, Estimate) and cold.measured == "measure" and cold.start_s == 8.0
    before = 1.0 + 0.002 * (2 * w.fit + w.validation) + 5.0 + w.steps * w.batch * 0.01 + w.epochs * w.validation * 0.002
    after = 0.5 + 0.002 * (w.test + w.validation)
    assert cold.members[0] == MemberCost("A: tiny", pytest.approx(before), pytest.approx(after))
    assert cold.seconds == pytest.approx(8.0 + 2 * cold.members[0].seconds)
    assert warm.start_s == 0 and warm.members[0].seconds == pytest.approx(cold.members[0].seconds - 5.0)
    assert warm.members[1].seconds == pytest.approx(cold.members[1].seconds)


def test_the_time_left_falls_as_the_run_goes_and_follows_the_measured_pace():
    planned = Estimate(6.0, [MemberCost("A", 40.0, 4.0), MemberCost("B", 60.0, 6.0)], "run")
    s = RunState(status=RunStatus.STARTING, started=1000.0, members=[MemberState("A", "A"), MemberState("B", "B")],
                 planned=planned)
    seen = [time_left(s, planned, now=1000.0)]
    assert seen[0] == pytest.approx(116.0)
    s.ready_at = 1005.0
    apply_event(s, Started("CPU", "tensorflow"))
    apply_event(s, MemberStarted(member=0))
    apply_event(s, PhaseBegun(Phase.HEAD, member=0))
    s.members[0].began = 1005.0
    seen.append(time_left(s, planned, now=1010.0))
    # A trains at 0.5 s a step for 60 steps (faster than planned): the time left follows its pace.
    for step in range(1, 61):
        apply_event(s, BatchEnd(step, 60, 0, 1.0, 3.0 + 0.5 * step, member=0))
        seen.append(time_left(s, planned, now=1010.0 + 0.5 * step))
    assert seen[-1] == pytest.approx(4.0 + 66.0)  # A's scoring, then B as planned
    apply_event(s, PhaseBegun(Phase.EVALUATING, member=0))
    s.members[0].trained = 1050.0
    seen += [time_left(s, planned, now=1050.0 + t) for t in (0, 2, 4, 9)]  # its scoring spent, as it goes
    assert seen[-1] == pytest.approx(66.0)
    s.current = 1
    s.members[1].began = 2000.0
    seen += [time_left(s, planned, now=2000.0 + t) for t in (0, 10, 30)]
    assert all(b <= a + 1e-9 for a, b in zip(seen, seen[1:], strict=False)), seen
    assert time_left(s, planned, now=2000.0 + 30) == pytest.approx(66.0 - 30)
    s.status = RunStatus.DONE
    assert time_left(s, planned) is None and time_left(RunState(), None) is None


def test_the_pace_book_is_this_machines_and_a_runs_pace_stands_over_a_measure(tmp_path):
    path = tmp_path / ".paces.json"
    measured = Pace(0.01, 5.0, 0.002, 1.0, 0.5, "measure")
    book = PaceBook.open(path)
    book.record("arch", measured)
    book.record_start(7.0)
    again = PaceBook.open(path)
    assert again.pace("arch") == measured and again.start_s() == 7.0
    ran = Pace(0.02, None, 0.003, 1.0, 0.5, "run")  # a run that found its step compiled
    again.record("arch", ran)
    assert again.pace("arch").step_s == 0.02 and again.pace("arch").compile_s == 5.0  # the compile seen before
    again.record("arch", measured)
    assert again.pace("arch").measured == "run"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "host": "another machine"}))
    assert PaceBook.open(path).pace("arch") is None  # another host's paces are not this one's
    path.write_text("{not json")
    assert PaceBook.open(path).paces == {} and PaceBook.open(tmp_path / "none.json").start_s() == 0.0
    assert PaceBook.open(None).pace("arch") is None


def test_the_architecture_key_is_the_configuration_not_the_weights():
    a = Card(name="a", config={"image_size": 32, "num_layers": 2})
    assert architecture(a) == architecture(Card(name="b", config={"num_layers": 2, "image_size": 32}))
    assert architecture(a) != architecture(Card(name="a", config={"image_size": 32, "num_layers": 3}))

