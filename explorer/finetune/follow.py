"""A Start followed from the app: its wait for a turn in the queue (shared mode), then its run, as generators
of typed updates that the page turns into its components; how far a run has come (the one measure of the
page's bar and status line); and which slots a done run's checkpoints go into. Nothing worded for the page
(explorer/ui/finetune_text.py words it) and nothing of Gradio.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from explorer.core.protocol import Phase
from explorer.finetune.plan import Plan
from explorer.finetune.queue import Busy, QueuePlace, Ticket
from explorer.finetune.state import RunState, RunStatus

TICK_S = 0.5        # a run's snapshot, every half second whatever it is doing: the bar and status line move on
QUEUE_POLL_S = 1.0  # a waiting Start's place, asked every second (which also keeps its ticket alive)
# The curves are redrawn at most every CURVES_EVERY_S during a run: the page turns each matplotlib figure into
# a PNG in the server's process (~0.25 s for the two, holding the GIL), which would otherwise land on other
# visitors' requests at every epoch of a fast run.
CURVES_EVERY_S = 10.0

# Each model's share of the bar, by phase: what precedes its steps (loading, choosing the head, compiling),
# its steps, then evaluating and saving. A phase without steps moves on with time towards its end (half the
# way in PHASE_HALF_S seconds), and between reports a step moves towards the next (half the way in STEP_HALF_S,
# or in half the run's measured seconds per step when longer: on a slow host each step moves the bar through
# the step's own time), so that the bar and the status line never stand still.
# The first model waits while the training process starts. On 2 CPU cores what precedes the steps takes
# about as long as the steps of a small run, whence its share.
SPANS = {Phase.WAITING: (0.0, 0.1), Phase.LOADING: (0.1, 0.15), Phase.HEAD: (0.15, 0.25),
         Phase.COMPILING: (0.25, 0.4), Phase.TRAINING: (0.4, 0.94), Phase.EVALUATING: (0.94, 0.98),
         Phase.SAVING: (0.98, 1.0), Phase.DONE: (1.0, 1.0)}
PHASE_HALF_S = 10.0
STEP_HALF_S = 2.0


def run_fraction(s: RunState, now: float | None = None) -> float:
    """How far the run has come, from 0 to 1, the one measure of the bar and the status line: its models in
    turn, each through its phases, by its steps while it trains and by time in the phases without steps."""
    if not s.members:
        return 0.0
    m = s.members[s.current]
    lo, hi = SPANS[m.phase]
    since = m.since or s.started
    waited = max(0.0, (now if now is not None else time.time()) - since) if since else 0.0
    if m.phase == Phase.TRAINING and m.total_steps:
        half = max(STEP_HALF_S, 0.5 * (m.seconds_per_step or 0.0))
        steps = m.step + (1.0 - 0.5 ** (waited / half))
        own = lo + (hi - lo) * min(1.0, steps / m.total_steps)
    else:
        own = lo + (hi - lo) * (1.0 - 0.5 ** (waited / PHASE_HALF_S))
    return min(1.0, (s.current + own) / len(s.members))


# --- waiting for a turn --------------------------------------------------------------------------------

@dataclass
class InQueue:
    """The Start waits behind another visitor's run: where it stands."""

    place: QueuePlace


@dataclass
class LeftQueue:
    """The Start is no longer waiting and nothing was started: the visitor left the queue (their Cancel), or,
    `dropped`, no page of theirs asked about it for the queue's stale_s."""

    dropped: bool = False


@dataclass
class TurnCame:
    """The Start's turn came: its run has started (by this page, or another page of the visitor's)."""

    run_id: int


def wait_in_queue(runner, plan: Plan, owner: str | None, out_dir: str | os.PathLike, ticket: Ticket | None = None,
                  sleep: Callable[[float], None] = time.sleep) -> Iterator[InQueue | LeftQueue | TurnCame]:
    """Joins `runner`'s queue (a FineTuneRunner's), or waits on `ticket`, a place it gave before (a page that
    takes up the wait of a page closed or reloaded, or of another tab), for this Start's turn: its place every
    QUEUE_POLL_S, then TurnCame (or LeftQueue, the last update either way). QueueFull when the queue is full;
    the runner's JobError when the plan cannot start, which gives the place up. A wait given up (its page
    closed: the generator closed) keeps the place until the queue drops it for not being asked about."""
    ticket = ticket or runner.join(owner)
    try:
        while True:
            if ticket.waiting and runner.ready(ticket):
                try:
                    runner.start(plan, owner, out_dir, ticket)
                except Busy:  # another Start took the turn between the two questions: wait on
                    pass
            if ticket.started is not None:
                yield TurnCame(ticket.started)
                return
            if not ticket.waiting:
                yield LeftQueue(dropped=ticket.dropped)
                return
            yield InQueue(runner.position(ticket))
            sleep(QUEUE_POLL_S)
    except GeneratorExit:
        raise
    except BaseException:
        runner.leave(ticket)
        raise


# --- following a run ---------------------------------------------------------------------------------

@dataclass
class Tick:
    """A running run's snapshot: `fraction` (run_fraction) as of `now` (the wall clock), which the status line
    and the bar both go by; `curves_due` when its curves have changed and may be redrawn (follow_run's `draw`
    is then given this snapshot); `drawn`, what `draw` made of an earlier snapshot, once it is made."""

    state: RunState
    now: float
    fraction: float
    curves_due: bool = False
    drawn: object = None


@dataclass
class Loading:
    """A done run whose outputs (its new models in the slots) are being made: `seconds` since its Start."""

    state: RunState
    seconds: float


@dataclass
class Ended:
    """The run has ended (done, failed or cancelled): `outputs` is what `finish` made of its final state."""

    state: RunState
    outputs: object


def follow_run(runner, run_id: int, finish: Callable[[RunState], object],
               draw: Callable[[RunState], object] | None = None,
               clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
               sleep: Callable[[float], None] = time.sleep) -> Iterator[Tick | Loading | Ended]:
    """Follows run `run_id` of `runner` (a FineTuneRunner's) until it ends: a Tick every TICK_S, curves due at
    most every CURVES_EVERY_S (by `clock`) and only when a model has more epochs; then Ended with
    `finish(state)`, for a done run made in a thread meanwhile, with a Loading every TICK_S until it is. A run
    too long gone for the runner to keep yields nothing.

    `draw(state)` makes the curves of a Tick whose curves are due, in a thread beside: the ticks go on while it
    draws (a second or more on a slow host, where the status line's counter stood still that long), and the
    first Tick after it is made carries it (`drawn`; the newest, when two were made meanwhile)."""
    shown, drawn_at = None, None
    pool, drawing = concurrent.futures.ThreadPoolExecutor(1), []
    try:
        while True:
            state = runner.snapshot(run_id)
            if state.run_id != run_id:
                return
            if not state.running:
                yield from _ended(state, finish, wall)
                return
            epochs = tuple(len(m.history) for m in state.members)
            now = wall()
            due = epochs != shown and (drawn_at is None or clock() - drawn_at >= CURVES_EVERY_S)
            if due:
                shown, drawn_at = epochs, clock()
                if draw is not None:
                    drawing.append(pool.submit(draw, state))
            made = None
            while drawing and drawing[0].done():
                made = drawing.pop(0).result()
            yield Tick(state, now, run_fraction(state, now), due, made)
            sleep(TICK_S)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _ended(state: RunState, finish: Callable[[RunState], object], wall: Callable[[], float]):
    if state.status != RunStatus.DONE:
        yield Ended(state, finish(state))
        return
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        outputs = pool.submit(finish, state)
        while not outputs.done():
            yield Loading(state, wall() - state.started)
            concurrent.futures.wait([outputs], timeout=TICK_S)
        yield Ended(state, outputs.result())


def checkpoint_refs(state: RunState, root: str | os.PathLike) -> list[str]:
    """A done run's checkpoints, as references relative to `root` (the slots' lists name them so)."""
    return [os.path.relpath(m.checkpoint, Path(root)) for m in state.members]


def new_slots(state: RunState, refs: list[str], a: str | None, b: str | None) -> tuple[str | None, str | None]:
    """The slots (A, B) once a done run's checkpoints `refs` have gone into those they came from: both for a
    pair, else the slot its one member came from (A by its tag, else B)."""
    if len(refs) == 2:
        return refs[0], refs[1]
    return (refs[0], b) if state.members[0].tag == "A" else (a, refs[0])
