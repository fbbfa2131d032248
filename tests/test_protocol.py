"""What the app and its worker send each other: every command and event is the line it always was and comes
back as itself, a phase that is no Phase fails where it is made, a line that is no message is refused by
its reader, and each event line changes a run's state (state.py, the runner) as it should."""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import replace

import pytest

from explorer.core.card import Epoch, Metrics, Training
from explorer.core.protocol import (
    COMMANDS,
    EVENTS,
    BatchEnd,
    Cancel,
    Done,
    EpochEnd,
    Exiting,
    Failed,
    JobEnd,
    Measure,
    Measured,
    MemberDone,
    MemberRecipe,
    MemberStarted,
    Outcome,
    Phase,
    PhaseBegun,
    Ping,
    Pong,
    ProtocolError,
    Ready,
    RunJob,
    Shape,
    Started,
    Warm,
    Warmed,
    decode_command,
    decode_event,
    encode,
)
from explorer.finetune.state import MemberState, RunState, RunStatus, WorkerFigures, apply_event
from explorer.training.recipe import TrainConfig

EPOCH = {"epoch": 2, "time_s": 1.5, "learning_rate": 0.001, "loss": 0.7, "top1": 0.6, "val_top1": 0.55,
         "tau": [[2.0, 2.1]]}
# Every message, as its class builds it and as its line reads: the lines are what the worker and the app
# have always written, so a worker of an older checkout and a newer app still understand each other.
MESSAGES = [
    (RunJob(3, "/tmp/.tmp-1-job-ab"), {"kind": "job", "id": 3, "dir": "/tmp/.tmp-1-job-ab"}),
    (Warm(["checkpoints/a"], [Shape(3, 100)]),
     {"kind": "warm", "bases": ["checkpoints/a"], "shapes": [{"classes": 3, "images": 100}]}),
    (Measure(["checkpoints/a"], 5, 32), {"kind": "measure", "bases": ["checkpoints/a"], "classes": 5, "batch": 32,
                                         "frozen": False}),
    (Ping(7), {"kind": "ping", "id": 7}),
    (Cancel(3), {"kind": "cancel", "id": 3}),
    (Ready("CPU", "jax", 1234, 2.5), {"kind": "ready", "device": "CPU", "backend": "jax", "pid": 1234,
                                      "imports_s": 2.5}),
    (Exiting("idle for 600 s"), {"kind": "exit", "why": "idle for 600 s"}),
    (Pong(7), {"kind": "pong", "id": 7}),
    (Warmed(seconds=4.2), {"kind": "warmed", "seconds": 4.2}),
    (Warmed(error="OSError: gone"), {"kind": "warmed", "error": "OSError: gone"}),
    (Measured("checkpoints/a", 9.5, Training(steps=6, batch_size=32), 32),
     {"kind": "measured", "base": "checkpoints/a", "seconds": 9.5, "training": {"steps": 6, "batch_size": 32},
      "tests": 32}),
    (Measured("checkpoints/a", error="OSError: gone"),
     {"kind": "measured", "base": "checkpoints/a", "training": None, "tests": 0, "error": "OSError: gone"}),
    (Started("CPU", "jax", job=3), {"kind": "started", "device": "CPU", "backend": "jax", "job": 3}),
    (MemberStarted(MemberRecipe(2, 16, 5e-4, 0.05), member=1, job=3),
     {"kind": "member", "recipe": {"epochs": 2, "batch_size": 16, "learning_rate": 5e-4, "weight_decay": 0.05,
                                   "freeze_backbone": False}, "member": 1, "job": 3}),
    (PhaseBegun(Phase.HEAD, member=0, job=3), {"kind": "phase", "phase": "choosing the head", "member": 0, "job": 3}),
    (BatchEnd(12, 40, 1, 0.75, 3.25, member=0, job=3),
     {"kind": "batch", "step": 12, "total_steps": 40, "epoch": 1, "loss": 0.75, "elapsed": 3.25, "member": 0,
      "job": 3}),
    (EpochEnd(Epoch.from_json(EPOCH), member=0, job=3), {"kind": "epoch", **EPOCH, "member": 0, "job": 3}),
    (EpochEnd(Epoch.from_json({"epoch": 0, "head": "base rows", "val_top1": 0.5}), member=1),
     {"kind": "epoch", "epoch": 0, "head": "base rows", "val_top1": 0.5, "member": 1}),
    (MemberDone("mine-A", Metrics(test_top1=0.8), Training(epochs=2), [0, 2, 1], 12.5, member=0, job=3),
     {"kind": "member_done", "folder": "mine-A", "metrics": {"test_top1": 0.8}, "training": {"epochs": 2},
      "predictions": [0, 2, 1], "seconds": 12.5, "member": 0, "job": 3}),
    (Done(job=3), {"kind": "done", "job": 3}),
    (Failed("ValueError: no", job=3), {"kind": "error", "error": "ValueError: no", "job": 3}),
    (Failed("ValueError: no"), {"kind": "error", "error": "ValueError: no"}),
    (JobEnd(Outcome.DONE, 2, 5, None, job=3),
     {"kind": "job_end", "outcome": "done", "loads": 2, "compiles": 5, "cache_hits": None, "job": 3}),
]


def test_every_kind_has_an_example_here():
    assert {m.KIND for m, _ in MESSAGES} == set(EVENTS) | set(COMMANDS)


@pytest.mark.parametrize("message, line", MESSAGES, ids=[f"{m.KIND}-{i}" for i, (m, _) in enumerate(MESSAGES)])
def test_every_message_is_its_line_and_comes_back_as_itself(message, line):
    assert json.loads(encode(message)) == line
    assert encode(message).endswith("\n") and encode(message).count("\n") == 1
    decode = decode_command if message.KIND in COMMANDS else decode_event
    assert decode(encode(message)) == message
    assert decode(json.dumps(line).encode()) == message  # as the app's reader gets it: bytes


def test_numpy_numbers_go_out_as_plain_numbers():
    import numpy as np
    line = encode(MemberDone("a", Metrics(test_top1=np.float32(0.5)), Training(), [], np.float64(1.5), member=0))
    assert json.loads(line)["metrics"] == {"test_top1": 0.5} and json.loads(line)["seconds"] == 1.5


def test_a_phase_that_is_no_phase_fails_where_the_event_is_made():
    assert PhaseBegun("compiling").phase is Phase.COMPILING  # a Phase's own name is one
    with pytest.raises(ValueError, match="'compilng' is not a valid Phase"):
        PhaseBegun("compilng")
    with pytest.raises(ValueError, match="is not a valid Outcome"):
        JobEnd("finished", 1)
    with pytest.raises(ProtocolError, match="'phase' line"):
        decode_event('{"kind": "phase", "phase": "thinking", "member": 0}')


@pytest.mark.parametrize("line, message", [
    ("Traceback (most recent call last):", "not a JSON line"),
    ("[1, 2]", "no message of kind None"),
    ('{"kind": "bogus"}', "no message of kind 'bogus'"),
    ('{"kind": "job", "id": 1, "dir": "x"}', "no message of kind 'job'"),  # a command is no event
    ('{"kind": "batch", "step": 1, "total_steps": 2, "member": 0}', "missing 3 required"),
    ('{"kind": "error", "message": "renamed"}', "no field \\['message'\\]"),
])
def test_a_line_that_is_no_event_is_refused(line, message):
    with pytest.raises(ProtocolError, match=message):
        decode_event(line)


def _run(*labels) -> RunState:
    return RunState(status=RunStatus.STARTING, run_id=3, started=1.0,
                    members=[MemberState(tag, f"{tag}: model") for tag in labels])


def _apply(s: RunState, line: dict) -> RunState:
    apply_event(s, decode_event(json.dumps(line)))
    return s


def test_each_event_line_changes_the_run_as_it_says():
    s = _apply(_run("A", "B"), {"kind": "started", "device": "CPU", "backend": "jax", "job": 3})
    assert (s.device, s.backend, s.status) == ("CPU", "jax", RunStatus.STARTING) and s.ready_at is not None
    # an older worker sent the whole TrainConfig: the app reads what it shows of it
    old = {**TrainConfig(epochs=2, batch_size=16).__dict__, "name": "fine-tune"}
    s = _apply(s, {"kind": "member", "member": 1, "recipe": old, "job": 3})
    b = s.members[1]
    assert (s.current, s.status, b.phase) == (1, RunStatus.TRAINING, Phase.LOADING)
    assert b.recipe == MemberRecipe(2, 16, TrainConfig().learning_rate, TrainConfig().weight_decay)
    assert s.members[0].phase == Phase.WAITING
    for phase in Phase:
        _apply(s, {"kind": "phase", "phase": phase.value, "member": 1, "job": 3})
        assert b.phase is phase
    _apply(s, {"kind": "epoch", **EPOCH, "member": 1, "job": 3})
    assert [e.to_json() for e in b.history] == [EPOCH]  # the record alone: no kind, member or job
    since = b.since
    _apply(s, {"kind": "batch", "step": 5, "total_steps": 8, "epoch": 2, "loss": 0.5, "elapsed": 1.0, "member": 1,
               "job": 3})
    assert (b.step, b.total_steps, b.last_loss, b.phase) == (5, 8, 0.5, Phase.TRAINING) and b.since >= since
    _apply(s, {"kind": "member_done", "member": 1, "folder": "x-B", "metrics": {"test_top1": 0.9},
               "training": {"epochs": 2}, "predictions": [1, 0], "seconds": 3.5, "job": 3})
    assert (b.folder, b.metrics, b.training, b.predictions, b.seconds, b.phase) == \
        ("x-B", Metrics(test_top1=0.9), Training(epochs=2), [1, 0], 3.5, Phase.DONE)
    _apply(s, {"kind": "error", "error": "RuntimeError: out of memory", "job": 3})
    assert s.error == "RuntimeError: out of memory"
    before = repr(s)
    for line in ({"kind": "done", "job": 3}, {"kind": "ready", "device": "CPU", "backend": "jax", "pid": 1,
                                              "imports_s": 1.0},
                 {"kind": "exit", "why": "idle"}, {"kind": "pong", "id": 1}, {"kind": "warmed", "seconds": 1.0}):
        _apply(s, line)
    assert repr(s) == before  # the worker's other events are not the run's


def test_a_batch_line_after_a_cancel_leaves_the_run_cancelled():
    s = _run("A")
    s.status = RunStatus.CANCELLED
    _apply(s, {"kind": "batch", "step": 1, "total_steps": 2, "epoch": 0, "loss": 1.0, "elapsed": 0.1, "member": 0})
    assert s.status == RunStatus.CANCELLED and s.members[0].step == 1


class _Worker:
    """Stands for a worker process in the runner: what the runner reads of one that has ended its job."""

    pid = 4321

    def send(self, command) -> bool:
        return True

    def kill(self) -> None:
        pass


@pytest.mark.parametrize("outcome, status, error", [
    ("cancelled", RunStatus.CANCELLED, None), ("error", RunStatus.FAILED, "the training process reported an error")])
def test_a_job_end_line_ends_the_run_and_tells_what_the_worker_did(tmp_path, outcome, status, error):
    from explorer.finetune.runner import FineTuneRunner
    runner = FineTuneRunner(tmp_path, environ={})
    worker = runner.supervisor.current = _Worker()
    runner._state = _run("A")
    line = {"kind": "job_end", "outcome": outcome, "loads": 2, "compiles": 0, "cache_hits": 3}
    runner._on_worker_event(worker, decode_event(json.dumps({**line, "job": 2})))  # another job's: not this run's
    assert runner.snapshot().running
    runner._on_worker_event(worker, decode_event(json.dumps({**line, "job": 3})))
    s = runner.snapshot()
    assert (s.running, s.status, s.error) == (False, status, error)
    assert s.worker == WorkerFigures(loads=2, compiles=0, cache_hits=3, pid=4321)


def test_the_workers_input_sets_a_cancel_at_once_and_queues_the_rest():
    from explorer.finetune.serve import _read_commands
    commands, cancels = queue.Queue(), {}
    lines = [encode(RunJob(3, "/jobs/3")), "not a command\n", encode(Cancel(3)), encode(Cancel(9)),
             encode(Ping(1)), encode(Warm(["a"], [Shape(2, 10)]))]
    _read_commands(iter(lines), commands, cancels)
    (job, cancel), ping, warm = commands.get_nowait(), commands.get_nowait(), commands.get_nowait()
    assert job == RunJob(3, "/jobs/3") and isinstance(cancel, threading.Event) and cancel.is_set()
    assert ping == (Ping(1), None) and warm == (Warm(["a"], [Shape(2, 10)]), None)
    assert commands.get_nowait() is None and commands.empty()  # the input closed


def test_a_training_functions_events_are_tagged_with_their_model_and_job():
    event = replace(replace(BatchEnd(1, 2, 0, 0.5, 0.1), member=1), job=4)
    assert json.loads(encode(event))["member"] == 1 and json.loads(encode(event))["job"] == 4
    assert "member" not in json.loads(encode(BatchEnd(1, 2, 0, 0.5, 0.1)))
