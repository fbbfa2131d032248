"""A Start followed, without Gradio or a worker: its wait in the queue and its run, driven by a runner whose
answers the test scripts, on a clock the test moves."""

from __future__ import annotations

import copy
import threading
import time

import pytest

from explorer.core.card import Epoch
from explorer.core.protocol import Phase
from explorer.finetune import follow
from explorer.finetune.plan import JobError
from explorer.finetune.queue import Busy, QueueFull, QueuePlace, Ticket
from explorer.finetune.state import MemberState, RunState, RunStatus


class Clock:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self, start: float = 1000.0):
        self.t = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


class QueueRunner:
    """A runner whose queue answers as scripted: `ready` in turn from `turns`, `start` raising each of
    `refusals` first; every ticket it gave and left is recorded."""

    def __init__(self, turns: list[bool], refusals: list[Exception] = (), full: bool = False):
        self.turns, self.refusals, self.full = list(turns), list(refusals), full
        self.ticket: Ticket | None = None
        self.left: list[Ticket] = []
        self.started: list[tuple] = []

    def join(self, owner):
        if self.full:
            raise QueueFull("the fine-tuning queue is full")
        self.ticket = Ticket(1, owner, 0.0)
        return self.ticket

    def ready(self, ticket):
        return self.turns.pop(0)

    def position(self, ticket):
        return QueuePlace(len(self.turns) + 1, 3, 60.0 * len(self.turns))

    def start(self, plan, owner, out_dir, ticket):
        if self.refusals:
            raise self.refusals.pop(0)
        self.started.append((plan, owner, out_dir, ticket))
        ticket.started = 42
        return 42

    def leave(self, ticket):
        ticket.cancelled = True
        self.left.append(ticket)


def test_a_waiting_start_hears_its_place_every_second_then_starts():
    runner, clock = QueueRunner([False, False, True]), Clock()
    updates = list(follow.wait_in_queue(runner, "plan", "me", "/out", sleep=clock.sleep))
    assert updates == [follow.InQueue(QueuePlace(3, 3, 120.0)), follow.InQueue(QueuePlace(2, 3, 60.0)),
                       follow.TurnCame(42)]
    assert clock.slept == [follow.QUEUE_POLL_S] * 2
    assert runner.started == [("plan", "me", "/out", runner.ticket)] and runner.left == []


def test_a_turn_another_start_took_first_is_waited_on():
    runner, clock = QueueRunner([True, True], refusals=[Busy("a run is already going on")]), Clock()
    updates = list(follow.wait_in_queue(runner, "plan", "me", "/out", sleep=clock.sleep))
    assert updates == [follow.InQueue(QueuePlace(2, 3, 60.0)), follow.TurnCame(42)]


def test_a_start_that_left_the_queue_starts_nothing_and_gives_its_place_up():
    runner, clock = QueueRunner([False, False, False]), Clock()
    waiting = follow.wait_in_queue(runner, "plan", "me", "/out", sleep=clock.sleep)
    assert isinstance(next(waiting), follow.InQueue)
    runner.ticket.cancelled = True  # the visitor's Cancel (the runner's cancel_as) took it out of the queue
    assert list(waiting) == [follow.LeftQueue()]
    assert runner.started == []


def test_a_wait_its_page_gave_up_keeps_the_place_and_a_refused_one_leaves_it():
    runner = QueueRunner([False] * 5)
    waiting = follow.wait_in_queue(runner, "plan", "me", "/out", sleep=Clock().sleep)
    next(waiting)
    waiting.close()  # the page went away (a reload): the place stays for a page of the visitor's to take up
    assert runner.left == [] and runner.ticket.waiting
    refused = QueueRunner([True], refusals=[JobError("the data is gone")])
    with pytest.raises(JobError, match="the data is gone"):
        list(follow.wait_in_queue(refused, "plan", "me", "/out", sleep=Clock().sleep))
    assert refused.left == [refused.ticket]
    with pytest.raises(QueueFull):
        list(follow.wait_in_queue(QueueRunner([], full=True), "plan", "me", "/out", sleep=Clock().sleep))


def test_a_page_that_takes_up_a_wait_hears_its_place_then_whatever_became_of_it():
    """Two pages of one visitor wait on one ticket (a reload, another tab): the one whose turn it is starts the
    run and the other follows the same run; a ticket dropped while no page asked says so."""
    runner = QueueRunner([False, True, False])
    ticket = runner.join("me")
    one = follow.wait_in_queue(runner, "plan", "me", "/out", ticket, sleep=Clock().sleep)
    two = follow.wait_in_queue(runner, "plan", "me", "/out", ticket, sleep=Clock().sleep)
    assert isinstance(next(one), follow.InQueue)
    assert next(two) == follow.TurnCame(42) and list(one) == [follow.TurnCame(42)]
    assert len(runner.started) == 1
    gone = Ticket(2, "me", 0.0, dropped=True)
    assert list(follow.wait_in_queue(runner, "plan", "me", "/out", gone)) == [follow.LeftQueue(dropped=True)]


def running(epochs: tuple[int, int], started: float, run_id: int = 5) -> RunState:
    members = [MemberState("A", "A: one", Phase.TRAINING, [Epoch(epoch=e) for e in range(epochs[0])], step=3,
                           total_steps=10, since=started),
               MemberState("B", "B: two", history=[Epoch(epoch=e) for e in range(epochs[1])])]
    return RunState(status=RunStatus.TRAINING, members=members, started=started, run_id=run_id,
                    device="CPU")


class RunRunner:
    """A runner whose run goes through `states`, one snapshot each (the last one repeated)."""

    def __init__(self, states: list[RunState]):
        self.states = states
        self.asked = 0

    def snapshot(self, run_id):
        state = self.states[min(self.asked, len(self.states) - 1)]
        self.asked += 1
        return copy.deepcopy(state)


def test_a_run_ticks_every_half_second_and_its_curves_come_at_most_every_ten_seconds_when_they_changed():
    clock = Clock()
    # 0 s: no epoch yet; 1 s: A's first epoch; 12 s: A's second; then nothing new until it fails at 40 s.
    script = ([running((0, 0), clock.t)] * 2 + [running((1, 0), clock.t)] * 22 + [running((2, 0), clock.t)] * 56)
    failed = copy.deepcopy(script[-1])
    failed.status, failed.error = RunStatus.FAILED, "the worker died"
    finished = []
    updates = list(follow.follow_run(RunRunner(script + [failed]), 5, lambda s: finished.append(s) or "outputs",
                                     clock=clock, wall=clock, sleep=clock.sleep))
    ticks, end = updates[:-1], updates[-1]
    assert all(isinstance(u, follow.Tick) for u in ticks) and len(ticks) == len(script)
    assert clock.slept == [follow.TICK_S] * len(script)
    # Each tick's fraction is the run's measure at the moment it carries, which is the moment it was taken.
    assert [u.now for u in ticks] == [1000.0 + 0.5 * i for i in range(len(script))]
    assert all(u.fraction == follow.run_fraction(u.state, u.now) for u in ticks)
    # The curves: at once, then for A's first epoch only once 10 s have passed, for its second at the next tick
    # 10 s after that, and never again while the epochs stand still.
    due = [u.now - 1000.0 for u in ticks if u.curves_due]
    assert due == [0.0, 10.0, 20.0], due
    assert isinstance(end, follow.Ended) and end.outputs == "outputs" and end.state.status == RunStatus.FAILED
    assert [s.status for s in finished] == [RunStatus.FAILED]


def test_a_done_runs_outputs_are_made_meanwhile_with_its_counter_moving():
    clock = Clock(2000.0)
    done = running((3, 3), 1990.0)
    done.status = RunStatus.DONE
    ready = threading.Event()

    def finish(state):
        ready.wait(5)
        return {"status": "loaded"}

    run = follow.follow_run(RunRunner([done]), 5, finish, clock=clock, wall=clock, sleep=clock.sleep)
    first = next(run)
    assert first == follow.Loading(first.state, 10.0) and first.state.status == RunStatus.DONE
    ready.set()
    rest = list(run)
    assert all(isinstance(u, follow.Loading) for u in rest[:-1]) and rest[-1].outputs == {"status": "loaded"}
    assert clock.slept == []  # a done run is not polled again


def test_the_ticks_go_on_while_the_curves_draw_and_the_next_tick_carries_them():
    """On a slow host drawing the curves took 2-3.5 s, and the status line's counter stood still that long."""
    clock = Clock()
    # A's first epoch at once, its second 15 s on: two drawings due, the first one slow.
    script = [running((1, 0), clock.t)] * 30 + [running((2, 0), clock.t)] * 3000
    go, drew = threading.Event(), []

    def draw(state):
        if not drew:
            go.wait(10)
        drew.append(len(state.members[0].history))
        return {"curves": len(state.members[0].history)}

    run = follow.follow_run(RunRunner(script), 5, lambda s: None, draw=draw, clock=clock, wall=clock,
                            sleep=clock.sleep)
    ticks = [next(run) for _ in range(20)]  # 10 s of ticks while the first drawing waits
    assert ticks[0].curves_due and not any(t.curves_due for t in ticks[1:])
    assert [t.drawn for t in ticks] == [None] * 20 and drew == []
    assert [t.now - 1000.0 for t in ticks] == [0.5 * i for i in range(20)]  # every half second meanwhile
    go.set()
    for _ in range(100):  # the drawing made (its thread's own time, not the test's clock)
        if drew:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    ticks.append(next(run))
    assert ticks[-1].drawn == {"curves": 1} and not ticks[-1].curves_due  # the next tick carries it, once
    ticks += [next(run) for _ in range(2500)]  # 15 s on the second epoch is due; then drawn and carried
    carried = [(i, t.drawn) for i, t in enumerate(ticks) if t.drawn is not None]
    due = [i for i, t in enumerate(ticks) if t.curves_due]
    assert [d for _, d in carried] == [{"curves": 1}, {"curves": 2}] and due == [0, 30], (carried, due)
    assert drew == [1, 2] and carried[1][0] > 30
    run.close()


def test_a_run_the_runner_no_longer_keeps_shows_nothing():
    gone = running((0, 0), 1.0, run_id=6)  # another run's state: ours is too long gone
    assert list(follow.follow_run(RunRunner([gone]), 5, lambda s: None, sleep=Clock().sleep)) == []


def test_a_done_runs_checkpoints_go_into_the_slots_they_came_from(tmp_path):
    pair = running((1, 1), 1.0)
    pair.members[0].checkpoint, pair.members[1].checkpoint = (str(tmp_path / "finetuned" / n) for n in ("x-A", "x-B"))
    refs = follow.checkpoint_refs(pair, tmp_path)
    assert refs == ["finetuned/x-A", "finetuned/x-B"]
    assert follow.new_slots(pair, refs, "a", "b") == ("finetuned/x-A", "finetuned/x-B")
    alone = running((1, 0), 1.0)
    alone.members = alone.members[:1]
    assert follow.new_slots(alone, ["finetuned/y"], "a", "b") == ("finetuned/y", "b")
    alone.members[0].tag = "B"
    assert follow.new_slots(alone, ["finetuned/y"], "a", "b") == ("a", "finetuned/y")
    alone.members[0].tag = ""  # a new model from scratch: into slot B
    assert follow.new_slots(alone, ["finetuned/y"], "a", "b") == ("a", "finetuned/y")


def test_between_reports_a_step_moves_the_bar_at_the_runs_own_pace():
    """On a slow host (10 s a step, measured from the run's reports) the bar crosses a step in about the
    step's time, and in every 5 s of it moves by a tenth of a percent or more; a fast run's step moves as
    before (half the way in STEP_HALF_S)."""
    def member(**pace):
        return MemberState("A", "A", phase=Phase.TRAINING, step=10, total_steps=40, since=100.0, **pace)

    slow = RunState(status=RunStatus.TRAINING, members=[member(first_step=(2, 10.0), elapsed=90.0)], started=1.0)
    assert slow.members[0].seconds_per_step == pytest.approx(10.0)
    shown = [round(100 * follow.run_fraction(slow, 100.0 + t), 1) for t in range(0, 16, 5)]
    assert all(b - a >= 0.1 for a, b in zip(shown, shown[1:], strict=False)), shown
    fast = RunState(status=RunStatus.TRAINING, members=[member(first_step=(2, 1.0), elapsed=2.6)], started=1.0)
    one_step = (follow.SPANS[Phase.TRAINING][1] - follow.SPANS[Phase.TRAINING][0]) / 40
    moved = follow.run_fraction(fast, 100.0 + follow.STEP_HALF_S) - follow.run_fraction(fast, 100.0)
    assert moved == pytest.approx(one_step / 2)
