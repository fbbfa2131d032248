"""What the app and its worker process send each other, one JSON object a line: the commands the app sends
(job, warm, measure, ping, cancel), the events the worker answers with, one dataclass per kind, and the phases a
model of a run goes through. Both processes build and read these classes, never dicts of string keys: a
phase that is not a Phase fails where its event is made, and a field renamed on one side fails a test,
not a run that waits for an event its reader cannot take."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import ClassVar

from explorer.core.card import Epoch, Metrics, Training

_OMITTED = "omitted when None"  # a field's metadata key: the line leaves the field out rather than send null


_SECTION = "a record"  # a field's metadata key: the record type (a card section, or one below) the field holds


def _optional(kw_only: bool = False):
    """A field that defaults to None and is left out of the line while it is None."""
    return field(default=None, kw_only=kw_only, metadata={_OMITTED: True})


def _section(cls: type, default=dataclasses.MISSING):
    """A field holding a record (a card section, a Shape, a MemberRecipe) or a list of them: written as JSON
    objects, read back as the records."""
    return field(default=default, metadata={_SECTION: cls})


def _plain(value):
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.to_json() if hasattr(value, "to_json") else value


@dataclass(frozen=True)
class Shape:
    """What a fine-tune's compiled steps depend on besides its base: the number of classes and of images."""

    classes: int
    images: int

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Shape:
        return cls(int(data["classes"]), int(data["images"]))


@dataclass(frozen=True)
class MemberRecipe:
    """What a model of a job trains with, as chosen for its data (a 0 in the form left to the recipe): its
    epochs, batch size, peak learning rate and weight decay, and whether only the head trains."""

    epochs: int
    batch_size: int
    learning_rate: float
    weight_decay: float
    freeze_backbone: bool = False

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> MemberRecipe:
        return cls(int(data["epochs"]), int(data["batch_size"]), float(data["learning_rate"]),
                   float(data["weight_decay"]), bool(data.get("freeze_backbone", False)))


class Phase(StrEnum):
    """What the worker is doing with one model of a run (its "phase" events, and the kinds around them)."""

    WAITING = "waiting"            # a model after the one in training
    LOADING = "loading"            # its checkpoint (a warm worker's model: at once)
    HEAD = "choosing the head"     # the base's rows or a linear probe, judged on validation
    COMPILING = "compiling"        # the training step, until its first batch ends
    TRAINING = "training"
    EVALUATING = "evaluating"      # the kept epoch, then the held-out test images
    SAVING = "saving"              # its checkpoint
    DONE = "done"


class Outcome(StrEnum):
    """How a job ended, as its job_end event says."""

    DONE = "done"
    CANCELLED = "cancelled"
    ERROR = "error"


class ProtocolError(ValueError):
    """A line that is none of the protocol's messages: not JSON, a kind nobody sends, or fields its kind
    does not have."""


@dataclass(frozen=True)
class Message:
    """One line of the protocol; each subclass is one `KIND`, its fields the line's other keys."""

    KIND: ClassVar[str] = ""

    def to_json(self) -> dict:
        # The tags (job, member: keyword-only) after the message's own fields, where a reader of a log looks.
        ordered = sorted(fields(self), key=lambda f: f.kw_only)
        return {"kind": self.KIND, **{f.name: _plain(getattr(self, f.name)) for f in ordered
                                      if not (f.metadata.get(_OMITTED) and getattr(self, f.name) is None)}}

    @classmethod
    def from_json(cls, data: dict):
        """The message of `data` (what to_json made), ProtocolError when its keys are not this kind's."""
        given = {k: v for k, v in data.items() if k != "kind"}
        unknown = set(given) - {f.name for f in fields(cls)}
        if unknown:
            raise ProtocolError(f"a {cls.KIND!r} line has no field {sorted(unknown)}: {data!r}")
        for f in fields(cls):
            section, value = f.metadata.get(_SECTION), given.get(f.name)
            try:
                if section is not None and isinstance(value, dict):
                    given[f.name] = section.from_json(value)
                elif section is not None and isinstance(value, list):
                    given[f.name] = [section.from_json(v) for v in value]
            except (KeyError, TypeError, ValueError) as e:
                raise ProtocolError(f"a {cls.KIND!r} line whose {f.name} is not a {section.__name__}: {data!r}") from e
        try:
            return cls(**given)
        except (TypeError, ValueError) as e:
            raise ProtocolError(f"a {cls.KIND!r} line that does not fit its fields ({e}): {data!r}") from e


# --- the app's commands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunJob(Message):
    """Train the job whose folder is `dir` (jobfolder.py); its events carry `id` as their `job`."""

    KIND: ClassVar[str] = "job"
    id: int
    dir: str


@dataclass(frozen=True)
class Warm(Message):
    """Compile, before anyone asks, a fine-tune of each of `bases` at each of `shapes`."""

    KIND: ClassVar[str] = "warm"
    bases: list[str]
    shapes: list[Shape] = _section(Shape)


@dataclass(frozen=True)
class Measure(Message):
    """Measure this machine's pace at fine-tuning each of `bases`: a run of a few steps at `batch` images a
    step, on random images of `classes` classes (the backbone `frozen` or not), which compiles what a run of
    that shape compiles; each base answered by a Measured."""

    KIND: ClassVar[str] = "measure"
    bases: list[str]
    classes: int
    batch: int
    frozen: bool = False


@dataclass(frozen=True)
class Ping(Message):
    """Answer with a Pong of the same `id`."""

    KIND: ClassVar[str] = "ping"
    id: int | None = None


@dataclass(frozen=True)
class Cancel(Message):
    """Stop job `id` at its next step; nothing of it is saved."""

    KIND: ClassVar[str] = "cancel"
    id: int


COMMANDS: dict[str, type[Message]] = {c.KIND: c for c in (RunJob, Warm, Measure, Ping, Cancel)}


# --- the worker's events ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event(Message):
    """What the worker says; `job`: the id of the job it belongs to (None outside a job, and in the
    one-job mode)."""

    job: int | None = _optional(kw_only=True)


@dataclass(frozen=True)
class MemberEvent(Event):
    """An event about one model of the job: `member` is its index in the plan (None until the job
    tags the event of a training function with it)."""

    member: int | None = _optional(kw_only=True)


@dataclass(frozen=True)
class Ready(Event):
    """The worker has started (`imports_s`: the CPU seconds its start took, its imports, Keras's among them,
    first) and takes commands."""

    KIND: ClassVar[str] = "ready"
    device: str
    backend: str
    pid: int
    imports_s: float


@dataclass(frozen=True)
class Exiting(Event):
    """The worker ends, and says why (it was idle)."""

    KIND: ClassVar[str] = "exit"
    why: str


@dataclass(frozen=True)
class Pong(Event):
    """The answer to a Ping of the same `id`."""

    KIND: ClassVar[str] = "pong"
    id: int | None = None


@dataclass(frozen=True)
class Warmed(Event):
    """A Warm command done in `seconds`, or its `error` (a failed warm-up costs speed, never a run)."""

    KIND: ClassVar[str] = "warmed"
    seconds: float | None = _optional()
    error: str | None = _optional()


@dataclass(frozen=True)
class Measured(Event):
    """A Measure's run of `base`: its `seconds` in all, its training record (steps, images, batch size and
    where the time went), the `tests` images it predicted at its end and a forward pass's seconds an image
    (`forward_s`, timed once compiled); or the `error` that stopped it."""

    KIND: ClassVar[str] = "measured"
    base: str
    seconds: float | None = _optional()
    training: Training | None = _section(Training, None)
    tests: int = 0
    forward_s: float | None = _optional()
    error: str | None = _optional()


@dataclass(frozen=True)
class Started(Event):
    """The job has begun, on `device` with Keras' `backend`."""

    KIND: ClassVar[str] = "started"
    device: str
    backend: str


@dataclass(frozen=True)
class MemberStarted(MemberEvent):
    """A model of the job begins (it loads first), with the recipe chosen for it."""

    KIND: ClassVar[str] = "member"
    recipe: MemberRecipe | None = _section(MemberRecipe, None)


@dataclass(frozen=True)
class PhaseBegun(MemberEvent):
    """A model enters `phase`; a name that is not a Phase is refused here, where the event is made."""

    KIND: ClassVar[str] = "phase"
    phase: Phase

    def __post_init__(self):
        object.__setattr__(self, "phase", Phase(self.phase))


@dataclass(frozen=True)
class BatchEnd(MemberEvent):
    """A training step ended (reported at most every fitting.PROGRESS_EVERY_S): `step` of `total_steps`,
    in `epoch` (the epochs done), with its `loss`, `elapsed` seconds into the fit."""

    KIND: ClassVar[str] = "batch"
    step: int
    total_steps: int
    epoch: int
    loss: float
    elapsed: float


@dataclass(frozen=True)
class EpochEnd(MemberEvent):
    """An epoch's record (the card's Epoch: "epoch", "time_s", "learning_rate", the metrics, "tau"); epoch 0
    is where the run starts from (its head, in the record's extra "head" and "why", and that head's
    validation scores). On the line the record's keys stand beside "kind", as a card's history has them."""

    KIND: ClassVar[str] = "epoch"
    record: Epoch

    def to_json(self) -> dict:
        tags = {k: v for k, v in (("member", self.member), ("job", self.job)) if v is not None}
        return {"kind": self.KIND, **self.record.to_json(), **tags}

    @classmethod
    def from_json(cls, data: dict) -> EpochEnd:
        record = {k: v for k, v in data.items() if k not in ("kind", "member", "job")}
        return cls(Epoch.from_json(record), member=data.get("member"), job=data.get("job"))


@dataclass(frozen=True)
class MemberDone(MemberEvent):
    """A model's checkpoint is written, as `folder` under the job's staging folder, `seconds` after it
    began: its metrics, training record (fit's, with the head's decision) and test predictions."""

    KIND: ClassVar[str] = "member_done"
    folder: str
    metrics: Metrics = _section(Metrics)
    training: Training = _section(Training)
    predictions: list = field(default_factory=list)
    seconds: float | None = None


@dataclass(frozen=True)
class Done(Event):
    """Every model of the job has its checkpoint."""

    KIND: ClassVar[str] = "done"


@dataclass(frozen=True)
class Failed(Event):
    """The job (or the worker, outside a job) failed with `error` ("Type: message")."""

    KIND: ClassVar[str] = "error"
    error: str


@dataclass(frozen=True)
class JobEnd(Event):
    """A job's last event: its `outcome`, the models the worker has loaded in all, and what this job
    compiled (JAX's compilations and compilation-cache hits; None where the backend does not count them)."""

    KIND: ClassVar[str] = "job_end"
    outcome: Outcome
    loads: int
    compiles: int | None = None
    cache_hits: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "outcome", Outcome(self.outcome))


EVENTS: dict[str, type[Event]] = {e.KIND: e for e in (Ready, Exiting, Pong, Warmed, Measured, Started,
                                                      MemberStarted, PhaseBegun, BatchEnd, EpochEnd, MemberDone, Done,
                                                      Failed, JobEnd)}


def encode(message: Message) -> str:
    """`message` as its line (with the newline); numpy scalars in it are written as floats."""
    return json.dumps(message.to_json(), default=float) + "\n"


def _decode(line: str | bytes, kinds: dict[str, type[Message]]) -> Message:
    try:
        data = json.loads(line)
    except ValueError as e:
        raise ProtocolError(f"not a JSON line: {line[:200]!r}") from e
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in kinds:
        raise ProtocolError(f"no message of kind {kind!r} goes this way (expected one of {sorted(kinds)})")
    return kinds[kind].from_json(data)


def decode_event(line: str | bytes) -> Event:
    """The event of one line the worker wrote; ProtocolError when it is none."""
    return _decode(line, EVENTS)


def decode_command(line: str | bytes) -> Message:
    """The command of one line the app wrote; ProtocolError when it is none."""
    return _decode(line, COMMANDS)
