"""The fine-tune runner: one job at a time in the worker process (supervisor.py keeps it), owned by the
visitor who started it, with a first-come queue on a shared instance (queue.py); a run's state as the
worker reports it (state.py), its checkpoints published only once the whole job has succeeded."""

from __future__ import annotations

import copy
import os
import shutil
import threading
import time
from pathlib import Path

from explorer.core.atomic import clean_stale
from explorer.core.protocol import (
    Cancel,
    Event,
    JobEnd,
    Outcome,
    RunJob,
    Shape,
    Warm,
)
from explorer.core.settings import Settings
from explorer.finetune.backend import choose_backend
from explorer.finetune.estimate import PACES_FILE, TELLING, Paces
from explorer.finetune.handle import Worker
from explorer.finetune.jobfolder import new_job_dir, publish, write_job
from explorer.finetune.queue import Busy, QueuePlace, StartQueue, Ticket, wait_estimate
from explorer.finetune.state import (
    CancelAnswer,
    EndedRuns,
    MemberState,
    RunState,
    RunStatus,
    WorkerFigures,
    apply_event,
    crash_message,
)
from explorer.finetune.supervisor import Supervisor


class FineTuneRunner:
    """One fine-tuning job at a time, in a long-lived worker process (`python -m explorer.finetune --serve`)
    with a Keras backend of its own; its progress is read with `snapshot()`.

    The worker keeps Keras imported and the models it fine-tuned (with their compiled steps) between jobs:
    a repeat run of the same shape loads and compiles nothing. It ends after `idle_s` without work
    (EXPLORER_WORKER_IDLE_S, 600) and the next Start starts one; one that died is replaced then; one silent
    for `hang_s` during a run (EXPLORER_WORKER_HANG_S, 180) is killed, the run failed. On JAX its compiled
    steps are kept on disk in `compile_cache` (EXPLORER_COMPILE_CACHE_MB). `priority`, `environ`: as
    supervisor.Supervisor takes them; `settings` default to those `environ` gives. What it learns of this
    machine's pace (`paces`) says what a run will cost before its Start (estimate.py).

    The worker writes its checkpoints into a hidden job folder under `out_dir`; they are moved into
    `out_dir` only when every member has finished (a cancelled or crashed run leaves no checkpoint, never
    a partial one), and `on_publish(folders, run_id, owner)` is called with them. Cancel stops the job at
    its next step (the worker lives on); a worker that does not confirm within `cancel_grace_s` is killed.
    Each run has an `owner` (None for the single-user tool): only the owner's Cancel ends it. With
    `max_queue`, a Start that finds a run going on may `join` a first-come queue of that many and start
    when its ticket comes first (`ready`); a ticket no page asked about for `stale_s` is dropped.
    """

    def __init__(self, out_dir: str | os.PathLike, environ: dict | None = None, max_queue: int = 0,
                 on_publish=None, stale_s: float = 30.0, priority: str | None = None,
                 compile_cache: str | os.PathLike | None = None, idle_s: float | None = None,
                 hang_s: float | None = None, cancel_grace_s: float = 3.0, settings: Settings | None = None):
        self.settings = Settings.from_env(environ) if settings is None else settings
        self.out_dir = Path(out_dir)
        self.hang_s = self.settings.worker_hang_s if hang_s is None else hang_s
        self.cancel_grace_s = cancel_grace_s
        self.on_publish = on_publish
        self.supervisor = Supervisor(
            self.settings, environ,
            self.settings.worker_priority if priority is None else Settings.check("worker_priority", priority),
            self.settings.worker_idle_s if idle_s is None else idle_s,
            Path(compile_cache) if compile_cache else self.out_dir.parent / ".compile-cache",
            self._on_worker_event, self._on_worker_exit)
        self._lock = threading.Lock()
        self._state = RunState()
        self._queue = StartQueue(max_queue, stale_s)
        self._job_dir: Path | None = None
        self._job_log_at = 0
        self._done = threading.Event()
        self._done.set()
        self._ended = EndedRuns()
        self._runs = 0
        self._durations: list[float] = []
        self._out = self.out_dir
        self.paces = Paces(self.out_dir.parent / PACES_FILE)  # this machine's, beside the compile cache

    def join(self, owner: str | None) -> Ticket:
        """A place in the queue; QueueFull when `max_queue` Starts already wait behind a run going on."""
        with self._lock:
            return self._queue.join(owner, self._state.running)

    def leave(self, ticket: Ticket) -> None:
        """Gives up `ticket`'s place."""
        with self._lock:
            self._queue.leave(ticket)

    def ready(self, ticket: Ticket) -> bool:
        """Whether `ticket` may start now (no run going on, first in the queue); keeps it alive."""
        with self._lock:
            return self._queue.place(ticket)[0] == 1 and not self._state.running

    def position(self, ticket: Ticket) -> QueuePlace:
        """Where a waiting ticket stands; keeps it alive."""
        with self._lock:
            place, length = self._queue.place(ticket)
            return QueuePlace(place, length, wait_estimate(self._state, self._durations, place),
                              max(0.0, ticket.seen - ticket.joined))

    def prepare(self, bases: list[str] | None = None, shapes: list[Shape] | None = None) -> None:
        """Starts the worker before anyone asks (imports, the compilation cache) and, given `bases` and `shapes`,
        has it compile their fine-tuning steps; without delaying anything: a Start queues behind it there."""
        self.send(Warm([str(b) for b in bases], shapes) if bases and shapes else None)

    def send(self, command) -> bool:
        """Sends `command` (None: none) to the worker, started if need be, unless a run goes on; whether it went."""
        backend, _ = choose_backend(self.settings)
        with self._lock:
            if self._state.running:
                return False
            self.out_dir.mkdir(parents=True, exist_ok=True)
            w = self.supervisor.ensure(backend)
            return command is None or w.send(command)

    def start(self, plan, owner: str | None = None, out_dir: str | os.PathLike | None = None,
              ticket: Ticket | None = None) -> int:
        """Starts the job `plan` (a plan.Plan) unless one is going on (or, with a `ticket`, unless it
        is not first in the queue); its checkpoints go to `out_dir` (default: the runner's). Returns
        the run id."""
        backend, reason = choose_backend(self.settings)
        with self._lock:
            if self._state.running:
                mine = self._state.owner == owner
                raise Busy("a fine-tuning run is already going on" + (f" ({self._state.description})" if mine else "")
                           + "; wait for it to end" + (" or cancel it" if mine else ""))
            self._queue.take(ticket, self._runs + 1)
            self._runs += 1
            self._out = Path(out_dir) if out_dir is not None else self.out_dir
            self._state = RunState(status=RunStatus.STARTING, started=time.time(),
                                   description=plan.description, backend=backend, backend_reason=reason,
                                   members=[MemberState(m.tag, m.label) for m in plan.members],
                                   run_id=self._runs, owner=owner,
                                   planned=self.paces.run_begins(plan, self.supervisor.pid()))
            self._done = threading.Event()
            try:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                clean_stale(self.out_dir)
                job_dir = new_job_dir(self.out_dir)
                write_job(plan, job_dir)
                self._job_dir = job_dir
                worker = self.supervisor.ensure(backend)
                self._job_log_at = worker.log_size()
                worker.last_heard = time.time()
                if not worker.send(RunJob(self._state.run_id, str(job_dir))):
                    raise RuntimeError("the worker's input is closed")
            except Exception as e:
                self._finish_locked(RunStatus.FAILED, f"the training process could not start: {type(e).__name__}: {e}")
                raise
            threading.Thread(target=self._watch, args=(self._state.run_id,), name="fine-tune-watch",
                             daemon=True).start()
            return self._state.run_id

    def _on_worker_event(self, worker: Worker, event: Event) -> None:
        with self._lock:
            current = worker is self.supervisor.current and self._state.running and event.job == self._state.run_id
            if worker is self.supervisor.current and (current or event.job is None) and isinstance(event, TELLING):
                self.paces.learn(worker.pid, worker.began, event)  # its start, a Measure, a model that ended
            if not current:
                return
            if not isinstance(event, JobEnd):
                apply_event(self._state, event)
                return
            self._state.worker = WorkerFigures(event.loads, event.compiles, event.cache_hits, worker.pid)
            cancelled, job_dir, outcome = self._state.cancelling, self._job_dir, event.outcome
        if cancelled:
            self._finish(RunStatus.CANCELLED)
        elif outcome == Outcome.DONE:
            try:
                self._publish(job_dir)
            except Exception as e:  # e.g. the disk filled up while moving: nothing is left half-moved
                self._finish(RunStatus.FAILED, f"{type(e).__name__}: {e}")
        else:
            self._finish(RunStatus.CANCELLED if outcome == Outcome.CANCELLED else RunStatus.FAILED,
                         None if outcome == Outcome.CANCELLED else "the training process reported an error")

    def _on_worker_exit(self, worker: Worker, code: int) -> None:
        with self._lock:
            if not self.supervisor.let_go(worker):
                return
            self.paces.worker_gone()
            running, cancelled, since = self._state.running, self._state.cancelling, self._job_log_at
        if running:
            self._finish(RunStatus.CANCELLED if cancelled else RunStatus.FAILED,
                         None if cancelled else crash_message(code, worker.log_tail(since)))

    def _watch(self, run_id: int) -> None:
        """Fails the run, and kills its worker, when the worker says nothing for hang_s (a hung process)."""
        while not self._done.wait(1.0):
            with self._lock:
                w = self.supervisor.current
                if not self._state.running or self._state.run_id != run_id or w is None:
                    return
                silent = 0.0 if self.paces.measuring else time.time() - w.last_heard  # a Measure: one line at its end
            if silent > self.hang_s:
                self._kill(w)
                self._finish(RunStatus.FAILED, f"the training process stopped responding for {silent:.0f} s and was "
                                       f"stopped; the next Start uses a new one")
                return

    def _kill(self, worker: Worker) -> None:
        with self._lock:
            self.supervisor.let_go(worker)
        worker.kill()

    def _finish(self, status: RunStatus, error: str | None = None) -> None:
        with self._lock:
            self._finish_locked(status, error)

    def _finish_locked(self, status: RunStatus, error: str | None = None) -> None:
        s = self._state
        if not s.running:
            return
        s.status = status
        s.error = s.error or (error if status == RunStatus.FAILED else None)
        s.ended = time.time()
        if self._job_dir is not None:
            shutil.rmtree(self._job_dir, ignore_errors=True)
            self._job_dir = None
        self._ended.keep(s)
        self._done.set()

    def shutdown(self) -> None:
        """Ends the worker (the app is stopping); a run going on is cancelled."""
        with self._lock:
            w, self.supervisor.current = self.supervisor.current, None
        if w is not None:
            w.kill()
        self._finish(RunStatus.CANCELLED)

    def _publish(self, job_dir: Path) -> None:
        """Moves every member's checkpoint into place (jobfolder.publish), tells on_publish, ends the run."""
        with self._lock:
            folders = [m.folder for m in self._state.members]
        moved = publish(job_dir, folders, self._out)
        if self.on_publish is not None:
            with self._lock:
                run_id, owner = f"{os.getpid()}-{self._state.run_id}-{int(self._state.started)}", self._state.owner
            self.on_publish(moved, run_id, owner)
        with self._lock:
            for m, target in zip(self._state.members, moved, strict=True):
                m.checkpoint = str(target)
            self._durations = (self._durations + [self._state.elapsed])[-20:]
        self._finish(RunStatus.DONE)

    def cancel_as(self, owner: str | None = None) -> CancelAnswer:
        """Cancel as `owner` asks it: their run going on stops at its next step (its worker is killed if it
        does not within cancel_grace_s; nothing is saved: CANCELLING, the run's own state says when it has
        ended), or their place in the queue is given up; another owner's run goes on."""
        with self._lock:
            if self._state.running and self._state.owner == owner:
                self._state.cancelling = True
                worker, run_id = self.supervisor.current, self._state.run_id
            elif self._queue.leave_all(owner):
                return CancelAnswer.LEFT
            else:
                return CancelAnswer.NOT_YOURS if self._state.running else CancelAnswer.NONE
        if worker is None or not worker.send(Cancel(run_id)):
            self._finish(RunStatus.CANCELLED)
            return CancelAnswer.CANCELLED

        def enforce():
            if not self._done.wait(self.cancel_grace_s):
                self._kill(worker)
                self._finish(RunStatus.CANCELLED)

        threading.Thread(target=enforce, name="fine-tune-cancel", daemon=True).start()
        return CancelAnswer.CANCELLING

    def wait(self, timeout: float | None = None) -> None:
        """Until the run going on has ended (or `timeout`)."""
        self._done.wait(timeout)

    def snapshot(self, run_id: int | None = None) -> RunState:
        """The run going on (or the last one); with `run_id`, that run's state, also once it has ended and
        another has started (for the last ENDED_KEPT runs)."""
        with self._lock:
            ended = self._ended.get(run_id) if run_id is not None and run_id != self._state.run_id else None
            return ended or copy.deepcopy(self._state)
