"""Each visitor's last fine-tune Start, for the pages they open: a page opened while it waits in the queue or
runs takes it up, and one opened after it ended unseen shows how it ended. A Start is not tied to the page that
made it. While a Start waits or runs, the visitor's own checkpoints among its bases are kept from pruning
(Visitors.protect_bases). The Fine-tune tab only asks; this holds what a second visitor's request depends on."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from enum import StrEnum

from explorer.app.visitors import Visitors
from explorer.finetune.plan import Plan
from explorer.finetune.queue import Ticket
from explorer.finetune.runner import FineTuneRunner

STARTS_KEPT = 16  # the visitors whose last Start is kept (each with its test split only, once it has started)


class Going(StrEnum):
    """Where a visitor's last Start stands, for a line elsewhere on the page (Compare's)."""

    WAITING = "waiting"  # in the shared queue
    RUNNING = "running"  # its run goes on
    NOTHING = "nothing"  # none, or it has ended


@dataclass
class LastStart:
    """A visitor's last Start: its plan (only the test split, all its report needs, once its run has started),
    the visitor's own checkpoints among its bases (kept from pruning while it waits or runs), and where it
    stands: `ticket` while it waits in the shared queue, `run_id` once its run has started."""

    plan: Plan
    refs: set[str]
    ticket: Ticket | None = None
    run_id: int | None = None

    def began(self, run_id: int) -> None:
        """Its run has started as `run_id` (the job folder holds its images now): only the test split is kept."""
        d = self.plan.dataset
        self.run_id, self.plan = run_id, dataclasses.replace(self.plan, dataset=dataclasses.replace(
            d, x_train=d.x_train[:0], y_train=d.y_train[:0]))


class Starts:
    """Each visitor's last Start until a page of theirs has followed it to its end (at most STARTS_KEPT
    visitors), and the Starts whose bases are kept from pruning; both changed by every visitor's events."""

    def __init__(self, runner: FineTuneRunner, visitors: Visitors):
        self.runner, self.visitors = runner, visitors
        self._last: dict[str | None, LastStart] = {}
        self._protected: dict[int, LastStart] = {}  # by id(start)
        self._lock = threading.Lock()

    def new(self, plan: Plan, refs: set[str]) -> LastStart:
        """A Start of `plan`, whose bases `refs` (the visitor's own checkpoints among them) are kept from
        pruning from now until it no longer waits or runs (see release)."""
        start = LastStart(plan, set(refs))
        self.release()
        with self._lock:
            self._protected[id(start)] = start
        self.visitors.protect_bases(id(start), start.refs)
        return start

    def keep(self, owner: str | None, start: LastStart) -> LastStart:
        """Keeps `start` as `owner`'s last Start (the oldest visitor's goes beyond STARTS_KEPT)."""
        with self._lock:
            self._last.pop(owner, None)
            self._last[owner] = start
            while len(self._last) > STARTS_KEPT:
                self._last.pop(next(iter(self._last)))
        return start

    def last(self, owner: str | None) -> LastStart | None:
        """`owner`'s last Start a page should still take up: None when there is none, or when its run ended so
        long ago that the runner no longer has its state (it is forgotten then)."""
        self.release()
        with self._lock:
            start = self._last.get(owner)
        if start is not None and start.run_id is not None and self.runner.snapshot(start.run_id).run_id != \
                start.run_id:
            self.forget(owner, start)
            return None
        return start

    def forget(self, owner: str | None, start: LastStart) -> None:
        """`owner`'s Start `start` has been shown to its end (or never started): no page shows it again."""
        with self._lock:
            if self._last.get(owner) is start:
                self._last.pop(owner)
        self.release()

    def release(self) -> None:
        """Lets the bases of every Start that no longer waits or runs be pruned again."""
        with self._lock:
            starts = list(self._protected.items())
        for key, start in starts:
            if self._where(start) is Going.NOTHING:
                with self._lock:
                    self._protected.pop(key, None)
                self.visitors.protect_bases(key, None)

    def going(self, owner: str | None) -> Going:
        """Whether `owner`'s last Start waits in the queue, runs, or neither."""
        with self._lock:
            start = self._last.get(owner)
        return Going.NOTHING if start is None else self._where(start)

    def _where(self, start: LastStart) -> Going:
        if start.run_id is None:
            return Going.WAITING if start.ticket is not None and start.ticket.waiting else Going.NOTHING
        return Going.RUNNING if self.runner.snapshot(start.run_id).running else Going.NOTHING
