"""A run as the app knows it: its state and each model's, changed by the worker's events; what a Cancel
did. Data for the page to say (explorer/ui/finetune_text.py), nothing worded for it."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from enum import StrEnum

from explorer.core.card import Epoch, Metrics, Training
from explorer.core.protocol import (
    BatchEnd,
    EpochEnd,
    Event,
    Failed,
    MemberDone,
    MemberEvent,
    MemberRecipe,
    MemberStarted,
    Phase,
    PhaseBegun,
    Started,
)

ENDED_KEPT = 16  # the ended runs whose final state EndedRuns keeps


class RunStatus(StrEnum):
    """Where a run stands, as the app knows it: the one place its states are named (what the page says is
    explorer/ui/finetune_text.py's)."""

    IDLE = "idle"            # no run yet
    STARTING = "starting"    # sent to the worker, which has not reported a model yet (a new one imports first)
    TRAINING = "training"    # the worker reports its models
    DONE = "done"            # every model finished and the checkpoints are in place
    CANCELLED = "cancelled"  # stopped by its owner (or the app's end): nothing saved
    FAILED = "failed"        # the worker reported an error, crashed or hung: nothing saved

    @property
    def going(self) -> bool:
        """Whether a run in this state is going on (a Start must wait or queue)."""
        return self in (RunStatus.STARTING, RunStatus.TRAINING)


@dataclass(frozen=True)
class WorkerFigures:
    """What the worker said at a run's end: models it loaded and steps it compiled for the job, its compiled
    steps found in the compilation cache on disk (None where the backend keeps none), and its process id."""

    loads: int
    compiles: int
    cache_hits: int | None
    pid: int


class CancelAnswer(StrEnum):
    """What a visitor's Cancel did."""

    CANCELLING = "cancelling"  # their run was going on: told to stop at its next step, nothing is saved
    CANCELLED = "cancelled"  # their run was going on and has ended (no worker had it yet), nothing saved
    LEFT = "left"            # they were waiting in the queue, and left it
    NOT_YOURS = "not yours"  # another visitor's run is going on, and goes on
    NONE = "none"            # nothing was going on


@dataclass
class MemberState:
    """One model of a run as the worker reports it."""

    tag: str
    label: str
    phase: Phase = Phase.WAITING
    history: list[Epoch] = field(default_factory=list)
    step: int = 0
    total_steps: int = 0
    last_loss: float | None = None
    checkpoint: str | None = None     # the final folder, once the whole run succeeded
    folder: str | None = None         # its name in the staging folder
    metrics: Metrics | None = None
    training: Training | None = None
    predictions: list | None = None
    recipe: MemberRecipe | None = None  # as chosen for the data
    seconds: float | None = None      # the worker's time for this model, from loading it to its checkpoint
    since: float = 0.0                # when its phase began, or while it trains its last step ended (time.time())
    began: float = 0.0                # when the worker began it (time.time())
    trained: float = 0.0              # when its steps ended and its evaluation began (time.time())
    first_step: tuple[int, float] | None = None  # (step, seconds into the fit) of its first reported step
    elapsed: float = 0.0              # seconds into the fit at its last reported step

    @property
    def seconds_per_step(self) -> float | None:
        """Its steps' measured pace since its first reported step (which held the compile); None before two."""
        if self.first_step is None or self.step <= self.first_step[0]:
            return None
        return (self.elapsed - self.first_step[1]) / (self.step - self.first_step[0])


@dataclass(frozen=True)
class MemberCost:
    """One model's part of a run's estimate (explorer.finetune.estimate): its label, its seconds until its
    training ends and after."""

    label: str
    training_s: float
    after_s: float

    @property
    def seconds(self) -> float:
        return self.training_s + self.after_s


@dataclass(frozen=True)
class Estimate:
    """What a run will cost on this machine: the worker's start when none is up, then each model's part."""

    start_s: float
    members: list[MemberCost]
    measured: str  # "measure" when a Measure's few steps set a pace, "run" when earlier runs set them all

    @property
    def seconds(self) -> float:
        return self.start_s + sum(m.seconds for m in self.members)


@dataclass
class RunState:
    status: RunStatus = RunStatus.IDLE
    members: list[MemberState] = field(default_factory=list)
    current: int = 0
    error: str | None = None
    started: float = 0.0
    ended: float | None = None
    device: str = ""
    backend: str = ""
    backend_reason: str = ""
    description: str = ""
    run_id: int = 0
    owner: str | None = None
    ready_at: float | None = None     # when the worker took the job up (a new worker: after its imports)
    worker: WorkerFigures | None = None  # what the worker said at the end (None before)
    cancelling: bool = False          # Cancel was pressed; the run ends (and says "cancelled") once stopped
    planned: Estimate | None = None   # what it was estimated to cost before it started (estimate.py)

    @property
    def running(self) -> bool:
        return self.status.going

    @property
    def elapsed(self) -> float:
        return (self.ended or time.time()) - self.started if self.started else 0.0


class EndedRuns:
    """The last ENDED_KEPT ended runs' final states, by run id: a Start waiting in the queue replaces the
    runner's state the moment a run ends, and the visitor whose run it was must still see how it ended."""

    def __init__(self):
        self._runs: dict[int, RunState] = {}

    def keep(self, s: RunState) -> None:
        self._runs[s.run_id] = copy.deepcopy(s)
        while len(self._runs) > ENDED_KEPT:
            del self._runs[min(self._runs)]

    def get(self, run_id: int) -> RunState | None:
        return copy.deepcopy(self._runs[run_id]) if run_id in self._runs else None


def apply_event(s: RunState, event: Event) -> None:
    """One of the worker's events (protocol.py: started, member, phase, batch, epoch, member_done, error) on
    `s`; the others leave it as it is."""
    # Lines still in the pipe after a Cancel must not turn "cancelled" back into "training".
    if isinstance(event, (MemberStarted, BatchEnd)) and s.status == RunStatus.STARTING:
        s.status = RunStatus.TRAINING
    member = s.members[event.member] if isinstance(event, MemberEvent) and event.member is not None else None
    before = member.phase if member is not None else None
    if isinstance(event, Started):
        s.device, s.backend = event.device, event.backend
        s.ready_at = time.time()
    elif isinstance(event, MemberStarted):
        s.current = event.member
        member.recipe, member.phase, member.began = event.recipe, Phase.LOADING, time.time()
    elif isinstance(event, PhaseBegun):
        member.phase = event.phase
        if event.phase == Phase.EVALUATING:
            member.trained = time.time()
    elif isinstance(event, BatchEnd):
        member.step, member.total_steps = event.step, event.total_steps
        member.last_loss, member.phase, member.elapsed = event.loss, Phase.TRAINING, event.elapsed
        if member.first_step is None:
            member.first_step = (event.step, event.elapsed)
    elif isinstance(event, EpochEnd):
        member.history = member.history + [event.record]
    elif isinstance(event, MemberDone):
        member.folder, member.metrics = event.folder, event.metrics
        member.training, member.predictions = event.training, event.predictions
        member.seconds, member.phase = event.seconds, Phase.DONE
    elif isinstance(event, Failed):
        s.error = event.error
    if member is not None and (member.phase != before or isinstance(event, BatchEnd)):
        member.since = time.time()


def crash_message(code: int, tail: list[str]) -> str:
    """Why a run failed when its worker ended: the exit code or signal, and the last lines of its log."""
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    return f"the training process {how}" + (f": {' / '.join(tail)}" if tail else "")
