"""Shared mode's first-come queue of Starts waiting for the run going on to end: capped, each place kept
only while a page of its visitor keeps asking (a reload takes it up again), and a wait estimated from the run's
progress and earlier runs' lengths. The runner holds it under its lock."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


class Busy(RuntimeError):
    """A fine-tuning run is already going on."""


class QueueFull(Busy):
    """As many Starts wait as the queue holds."""


@dataclass
class Ticket:
    """A Start waiting for the run going on to end: `seen` when a page last asked about it, `joined` when it
    joined the queue (default: `seen`); `cancelled` when its visitor left the queue, `dropped` when no page asked
    about it for the queue's `stale_s`, `started` (the run's id) once its turn came."""

    id: int
    owner: str | None
    seen: float
    cancelled: bool = False
    dropped: bool = False
    started: int | None = None
    joined: float | None = None

    def __post_init__(self):
        if self.joined is None:
            self.joined = self.seen

    @property
    def waiting(self) -> bool:
        return not (self.cancelled or self.dropped or self.started is not None)


class QueuePlace(NamedTuple):
    """Where a waiting Start stands: its 1-based place, how many wait, the seconds until it starts (None: no
    estimate yet), and the seconds it has waited (since it joined the queue, whichever page asks)."""

    place: int
    length: int
    eta: float | None
    waited: float = 0.0


class StartQueue:
    """Up to `size` tickets, first come first served; a ticket not asked about for `stale_s` is dropped."""

    def __init__(self, size: int, stale_s: float):
        self.size, self.stale_s = size, stale_s
        self.tickets: list[Ticket] = []
        self._issued = 0

    def purge(self) -> None:
        now = time.time()
        for t in self.tickets:
            if not t.cancelled and now - t.seen >= self.stale_s:
                t.dropped = True
        self.tickets = [t for t in self.tickets if t.waiting]

    def join(self, owner: str | None, running: bool) -> Ticket:
        """A new ticket; QueueFull when `size` tickets already wait behind a run going on, Busy when `owner`
        (a visitor, not None) has one waiting: one place each."""
        self.purge()
        mine = next((i + 1 for i, t in enumerate(self.tickets) if owner is not None and t.owner == owner), 0)
        if mine:
            raise Busy(f"a Start of yours already waits in the queue (place {mine} of {len(self.tickets)}): it "
                       f"starts by itself when its turn comes; Cancel leaves the queue")
        if (running or self.tickets) and len(self.tickets) >= self.size:
            waiting = f"{len(self.tickets)} Start{'s' if len(self.tickets) != 1 else ''} already wait"
            raise QueueFull(f"the fine-tuning queue is full: a run is going on and {waiting} (the most "
                            f"this instance holds); try again later, or duplicate the Space to train on "
                            f"your own hardware")
        self._issued += 1
        ticket = Ticket(self._issued, owner, time.time())
        self.tickets.append(ticket)
        return ticket

    def leave(self, ticket: Ticket) -> None:
        ticket.cancelled = True
        self.purge()

    def leave_all(self, owner: str | None) -> bool:
        """Takes `owner`'s tickets out of the queue; whether there were any."""
        mine = [t for t in self.tickets if t.owner == owner and not t.cancelled]
        for t in mine:
            t.cancelled = True
        self.purge()
        return bool(mine)

    def place(self, ticket: Ticket) -> tuple[int, int]:
        """(1-based place or 0 when gone, queue length); keeps the ticket alive unless it is gone."""
        self.purge()
        ticket.seen = time.time()
        return next((i + 1 for i, t in enumerate(self.tickets) if t is ticket), 0), len(self.tickets)

    def take(self, ticket: Ticket | None, run_id: int) -> None:
        """Takes `ticket` out to start as run `run_id` (None: a Start that did not queue); Busy unless it is its
        turn."""
        self.purge()
        if ticket is not None:
            if not self.tickets or self.tickets[0] is not ticket:
                raise Busy("another Start is ahead in the queue")
            self.tickets.pop(0).started = run_id
        elif self.tickets:
            raise Busy(f"{len(self.tickets)} Start(s) wait in the queue")


def wait_estimate(state, durations: list[float], place: int) -> float | None:
    """Seconds until the Start at `place` begins: what is left of the run going on (projected from its
    steps, or a typical run's length) and a typical run for each Start ahead; None without either."""
    projected = None
    if state.running:
        totals = [m.total_steps for m in state.members if m.total_steps]
        if totals:
            total = sum(totals) + (len(state.members) - len(totals)) * totals[0]
            done = sum(m.step for m in state.members)
            if done / total > 0.02:
                projected = state.elapsed * total / done
    typical = float(np.median(durations)) if durations else projected
    if typical is None:
        return None
    remaining = max(projected - state.elapsed, 0.0) if projected is not None else (typical if state.running else 0.0)
    return remaining + max(place - 1, 0) * typical
