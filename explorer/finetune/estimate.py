"""What a fine-tune will cost on this machine, said before Start and counted down while it runs.

A run's cost is its work (every number of it known before Start: the plan's split, and the recipe each model
gets, exactly as the worker will choose it) times this machine's pace at each model's architecture. A pace
is measured, never assumed: by a Measure (a few real steps of a run of that base, in the worker, which
compiles what the run will then find compiled) or by a run that ended, whose record says where its time
went. Paces are kept per architecture (a fine-tuned checkpoint trains as fast as its base) and per machine
(`PaceBook`, a small JSON file beside the fine-tuned checkpoints' folder: another host's are not read).

    work  = prepare + forward × (2 · fit + validation)       the head's features (and their mirror images)
          + compile (a step the worker has not compiled yet)
          + steps × batch × step                              training
          + epochs × validation × forward                     each epoch's validation
          + finish + forward × test                           the kept model scored, saved
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from explorer.checkpoints.store import CheckpointError, read_card
from explorer.core import atomic
from explorer.core.card import Card, Training
from explorer.core.protocol import Measure, Measured, MemberDone, Ready
from explorer.finetune.plan import Plan, plan_splits
from explorer.finetune.state import Estimate, MemberCost, RunState
from explorer.training.runs import knows_classes, recipe_for

VERSION = 1
PACES_FILE = ".finetune-paces.json"


def architecture(card: Card) -> str:
    """The key a pace is kept under: the model's configuration (what its steps cost), not its weights."""
    config = json.dumps(card.config or {}, sort_keys=True, default=str)
    return hashlib.sha1(config.encode()).hexdigest()[:16]


def host() -> str:
    """This machine as a pace book names it: paces measured on another are not this one's."""
    return f"{platform.node()}|{os.cpu_count()}|{platform.machine()}"


@dataclass(frozen=True)
class Pace:
    """How fast this machine fine-tunes one architecture: a training step's seconds per image (after the
    first), the first step's extra seconds (tracing and compiling a step not compiled yet), a forward pass's
    seconds per image, and the seconds of preparing (loading, fitting the start head) and of finishing
    (scoring, saving) beyond their forward passes. `measured`: by a Measure ("measure") or a run ("run")."""

    step_s: float
    compile_s: float | None  # None: the run found its step compiled (the book keeps the last compile seen)
    forward_s: float
    prepare_s: float
    finish_s: float
    measured: str = "run"

    @classmethod
    def from_run(cls, training: Training | None, seconds: float | None, tests: int, measured: str = "run",
                 forward_s: float | None = None):
        """The pace a model's run shows (its MemberDone or Measured: the training record with its timing,
        its seconds in all, the test images it predicted); None when the record cannot say (no timing, no
        step, a cancelled run). A forward pass's pace is `forward_s` when given (timed apart, compiled), else
        the run's validation's: that of a run whose step compiled holds the compiling of its validation."""
        t = training.timing if training is not None else None
        steps, batch = (training.steps or 0, training.batch_size or 0) if training is not None else (0, 0)
        if t is None or seconds is None or steps < 2 or batch < 1 or t.steps_s is None or t.first_step_s is None:
            return None
        step = max(t.steps_s - t.first_step_s, 1e-6) / (steps - 1)
        epochs = training.epochs_trained or training.epochs or 1
        validation = (training.validation_images or 0) * epochs
        forward = forward_s or (t.validation_s / validation if validation and t.validation_s else step / batch / 3)
        head = 2 * (training.train_images or 0) + (training.validation_images or 0)
        prepare = max(0.0, (t.prepare_s or 0.0) - forward * head)
        finish = max(0.0, seconds - (t.prepare_s or 0.0) - (training.wall_time_s or 0.0) - forward * tests)
        # A step the worker had compiled already says nothing of what compiling one costs.
        compile_s = round(max(0.0, t.first_step_s - step), 3) if t.compiled is not False else None
        return cls(round(step / batch, 6), compile_s, round(forward, 6), round(prepare, 3), round(finish, 3), measured)


@dataclass(frozen=True)
class Work:
    """One model's part of a run, counted before it starts: its images to fit on, validate on and test on,
    its epochs, batch size and steps."""

    fit: int
    validation: int
    test: int
    epochs: int
    batch: int

    @property
    def steps(self) -> int:
        return self.epochs * math.ceil(self.fit / self.batch)

    def seconds(self, pace: Pace, compiled: bool) -> tuple[float, float]:
        """(seconds before its training ends, seconds after): the first holds its preparation, its compile
        when the step is new, its steps and validation; the second its scoring and saving."""
        prepare = pace.prepare_s + pace.forward_s * (2 * self.fit + self.validation)
        train = self.steps * self.batch * pace.step_s + self.epochs * self.validation * pace.forward_s
        after = pace.finish_s + pace.forward_s * (self.test + self.validation)
        return prepare + (0.0 if compiled else pace.compile_s or 0.0) + train, after


def plan_work(plan: Plan) -> list[Work]:
    """Each model's work in `plan`, as the worker will choose it (run_job's recipe_for, the plan's split)."""
    ds, splits = plan.dataset, plan_splits(plan)
    work = []
    for m in plan.members:
        recipe = recipe_for(plan.recipe, len(ds.x_train), plan.scratch,
                            known_classes=knows_classes(m.classes, ds.class_names))
        work.append(Work(splits.train, splits.validation, splits.test, recipe.epochs,
                         max(1, min(recipe.batch_size, splits.train))))
    return work


@dataclass(frozen=True)
class Needed:
    """An estimate that waits for paces: the architectures (with a base of each, and the run's shape) that no
    pace of this machine's covers yet."""

    bases: dict[str, str]  # architecture -> a base folder of it
    classes: int
    batch: int
    frozen: bool


def estimate(plan: Plan, cards: list[Card], book: PaceBook, compiled, worker_up: bool) -> Estimate | Needed:
    """The estimate of `plan` (a fine-tune of bases whose cards are `cards`) from the paces in `book`, or
    what must be measured first. `compiled(member, work)`: whether the worker has that step compiled
    already; `worker_up`: whether a worker is there (else its start, as last measured, is added)."""
    work = plan_work(plan)
    keys = [architecture(c) for c in cards]
    missing = {k: m.base for k, m in zip(keys, plan.members, strict=True) if book.pace(k) is None}
    if missing:
        return Needed(missing, plan.dataset.num_classes, work[0].batch, bool(plan.recipe.get("freeze_backbone")))
    costs, how = [], "run"
    for m, k, w in zip(plan.members, keys, work, strict=True):
        pace = book.pace(k)
        how = "measure" if pace.measured == "measure" else how
        costs.append(MemberCost(m.label, *w.seconds(pace, compiled(m, w))))
    return Estimate(0.0 if worker_up else book.start_s(), costs, how)


def time_left(state: RunState, planned: Estimate | None, now: float | None = None) -> float | None:
    """Seconds left of the run `state` follows: the model in training by its own measured pace (its steps
    left, then its scoring), the model before its steps have a pace as estimated less what it has spent since
    it began, and after them its scoring as estimated less what it has spent on it; the models after it as
    estimated; None without an estimate or once the run has ended."""
    if planned is None or not state.running or len(planned.members) != len(state.members):
        return None
    now = time.time() if now is None else now
    left = 0.0
    for i, (member, cost) in enumerate(zip(state.members, planned.members, strict=True)):
        if i > state.current or (i == state.current and not state.ready_at):
            left += cost.seconds
        elif i == state.current:
            pace = member.seconds_per_step
            if member.trained:  # its steps are done: its scoring and saving, as estimated
                left += max(0.0, cost.after_s - (now - member.trained))
            elif member.total_steps and pace is not None:
                left += (member.total_steps - member.step) * pace + cost.after_s
            else:
                left += max(cost.after_s, cost.seconds - (now - (member.began or now)))
    if not state.ready_at:
        left += max(0.0, planned.start_s - (now - state.started))
    return left


@dataclass
class PaceBook:
    """This machine's paces by architecture, and how long the worker takes to start, kept in `path` (a JSON
    file of this host's only; None: in memory). A run's pace replaces a measured one: it saw real images."""

    path: Path | None = None
    paces: dict[str, Pace] = field(default_factory=dict)
    starts: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def open(cls, path: str | os.PathLike | None) -> PaceBook:
        """The book in `path`; a missing, broken or another host's file is an empty book."""
        book = cls(Path(path) if path else None)
        try:
            data = json.loads(book.path.read_text()) if book.path else {}
            if data.get("version") == VERSION and data.get("host") == host():
                book.paces = {k: Pace(**v) for k, v in data.get("paces", {}).items()}
                book.starts = [float(s) for s in data.get("starts", [])][-5:]
        except (OSError, ValueError, TypeError, AttributeError):
            book.paces, book.starts = {}, []
        return book

    def pace(self, key: str) -> Pace | None:
        with self._lock:
            return self.paces.get(key)

    def start_s(self) -> float:
        """The worker's start as last measured (the median of the last five), 0 before any."""
        with self._lock:
            return sorted(self.starts)[len(self.starts) // 2] if self.starts else 0.0

    def record(self, key: str, pace: Pace | None) -> None:
        if pace is None:
            return
        with self._lock:
            before = self.paces.get(key)
            if pace.measured == "measure" and before is not None and before.measured == "run":
                return  # a run's pace, on real images, stands
            if pace.compile_s is None:
                pace = replace(pace, compile_s=before.compile_s if before is not None else None)
            self.paces[key] = pace
        self._save()

    def record_start(self, seconds: float) -> None:
        with self._lock:
            self.starts = (self.starts + [round(seconds, 3)])[-5:]
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        with self._lock:
            data = {"version": VERSION, "host": host(), "paces": {k: asdict(p) for k, p in self.paces.items()},
                    "starts": self.starts}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_text(self.path, json.dumps(data, indent=1))
        except OSError:
            pass  # an estimate is a convenience: a read-only folder costs it, never a run


# The worker's events that tell of this machine's pace (Paces.learn).
TELLING = (Ready, Measured, MemberDone)


class Paces:
    """This machine's paces as a runner keeps them: the book, the bases a Measure is going on for, the steps its
    worker has compiled ((worker pid, base folder, classes, frozen, batch)), and the run's members as the book
    knows them."""

    def __init__(self, path: str | os.PathLike | None):
        self._lock = threading.Lock()
        self.book = PaceBook.open(path)
        self.measuring: dict[str, tuple] = {}  # base folder -> (classes, frozen, batch) of its Measure
        self.compiled: set[tuple] = set()
        self.members: list[tuple] = []  # the run's members: (architecture or None, compiled key or None)

    def estimate(self, plan: Plan, worker_pid: int | None) -> Estimate | Needed | None:
        """`plan`'s estimate (see `estimate`) with a worker of `worker_pid` up (None: none), or None for a
        plan no pace can cover (a new model, a base whose card cannot be read)."""
        cards = _cards(plan)
        if cards is None:
            return None
        classes, frozen = plan.dataset.num_classes, bool(plan.recipe.get("freeze_backbone"))
        with self._lock:
            compiled = set(self.compiled)
        return estimate(plan, cards, self.book, lambda m, w: (worker_pid, str(m.base), classes, frozen, w.batch)
                        in compiled, worker_pid is not None)

    def measure(self, needed: Needed, send) -> bool:
        """Has the worker measure the bases of `needed` no Measure is going on for (`send(command)`: the
        runner's, False while a run is going on); whether they are being measured now."""
        with self._lock:
            bases = [str(b) for b in needed.bases.values() if str(b) not in self.measuring]
            self.measuring.update(dict.fromkeys(bases, (needed.classes, needed.frozen, needed.batch)))
        if not bases or send(Measure(bases, needed.classes, needed.batch, needed.frozen)):
            return True
        with self._lock:
            for b in bases:
                self.measuring.pop(b, None)
        return False

    def run_begins(self, plan: Plan, worker_pid: int | None) -> Estimate | None:
        """The run of `plan` begins (a worker of `worker_pid` up, None: none): its estimate, None where there is
        none; each member's architecture and compiled key are kept for what its end says."""
        planned = self.estimate(plan, worker_pid)
        frozen, cards = bool(plan.recipe.get("freeze_backbone")), _cards(plan, each=True)
        members = [(architecture(c) if c is not None else None,
                    (str(m.base), plan.dataset.num_classes, frozen, w.batch) if m.base else None)
                   for m, c, w in zip(plan.members, cards, plan_work(plan), strict=True)]
        with self._lock:
            self.members = members
        return planned if isinstance(planned, Estimate) else None

    def learn(self, worker_pid: int, worker_began: float, event) -> None:
        """What a worker's event says of this machine: its start (Ready), a Measure's run (Measured), a
        run's model that ended (MemberDone)."""
        if isinstance(event, Ready):
            self.book.record_start(time.time() - worker_began)
        elif isinstance(event, Measured):
            with self._lock:
                shape = self.measuring.pop(event.base, None)
                if shape is not None and event.error is None:
                    self.compiled.add((worker_pid, event.base, *shape))
            card = _card(event.base)
            if card is not None:
                self.book.record(architecture(card), Pace.from_run(event.training, event.seconds, event.tests,
                                                                   "measure", event.forward_s))
        elif isinstance(event, MemberDone):
            with self._lock:
                ran = event.member is not None and 0 <= event.member < len(self.members)
                key, compiled = self.members[event.member] if ran else (None, None)
                if compiled:
                    self.compiled.add((worker_pid, *compiled))
            if key:  # a run that compiled its steps: its validation held that, the pace measured before did not
                before, timing = self.book.pace(key), event.training.timing if event.training else None
                clean = before.forward_s if before is not None and timing is not None and timing.compiled else None
                self.book.record(key, Pace.from_run(event.training, event.seconds, len(event.predictions),
                                                    forward_s=clean))

    def worker_gone(self) -> None:
        """The worker ended: what it was measuring it never will."""
        with self._lock:
            self.measuring.clear()


def _card(folder) -> Card | None:
    try:
        return read_card(folder)
    except (CheckpointError, OSError, ValueError):
        return None


def _cards(plan: Plan, each: bool = False) -> list[Card | None] | None:
    """The cards of `plan`'s bases (None for a new model or one that cannot be read); with `each` False, None
    when any is None."""
    cards = [_card(m.base) if m.base else None for m in plan.members]
    return cards if each or None not in cards else None
