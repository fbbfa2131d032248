"""The fine-tune runner: one job at a time in a worker process (`python -m explorer.jobs --serve`, handled
through explorer.worker), owned by the visitor who started it, with a first-come queue on a shared instance;
and the run's state as the Fine-tune tab says it."""

from __future__ import annotations

import copy
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from explorer.settings import Settings
from explorer.worker import Worker, priority_prefix

ENDED_KEPT = 16  # the ended runs whose final state snapshot(run_id) still gives


class Busy(RuntimeError):
    """A fine-tuning run is already going on."""


class QueueFull(Busy):
    """As many Starts wait as the queue holds."""


@dataclass
class Ticket:
    """A Start waiting for the run going on to end (shared mode's first-come queue)."""

    id: int
    owner: str | None
    seen: float
    cancelled: bool = False


@dataclass
class MemberState:
    """One model of a run as the worker reports it."""

    tag: str
    label: str
    history: list = field(default_factory=list)
    step: int = 0
    total_steps: int = 0
    last_loss: float | None = None
    checkpoint: str | None = None     # the final folder, once the whole run succeeded
    folder: str | None = None         # its name in the staging folder
    metrics: dict | None = None
    training: dict | None = None
    predictions: list | None = None
    recipe: dict | None = None
    seconds: float | None = None      # the worker's time for this model, from loading it to its checkpoint


@dataclass
class RunState:
    running: bool = False
    status: str = "idle"              # idle, starting, training, done, cancelled, failed
    members: list = field(default_factory=list)
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
    worker: dict = field(default_factory=dict)  # what the worker said at the end: models loaded, compiles
    cancelling: bool = False          # Cancel was pressed; the run ends (and says "cancelled") once stopped

    @property
    def elapsed(self) -> float:
        return (self.ended or time.time()) - self.started if self.started else 0.0


class FineTuneRunner:
    """One fine-tuning job at a time, in a long-lived worker process (`python -m explorer.jobs --serve`)
    with a Keras backend of its own; its progress is read with `snapshot()`.

    The worker keeps Keras imported and the models it fine-tuned (with their compiled steps) between jobs,
    so a repeat run of the same shape loads and compiles nothing; it ends after `idle_s` without work
    (EXPLORER_WORKER_IDLE_S, default 600), and the next Start starts a new one. A worker that died is
    replaced at the next Start; one that says nothing for `hang_s` during a run (EXPLORER_WORKER_HANG_S,
    default 180) is killed, the run failed, and replaced likewise. On JAX, compiled steps are also kept on
    disk in `compile_cache` (JAX's persistent cache, at most EXPLORER_COMPILE_CACHE_MB, default 512), so
    a new worker loads what an earlier one compiled.

    The worker writes its checkpoints into a hidden job folder under `out_dir`; they are moved into
    `out_dir` only when every member has finished, so a cancelled or crashed run leaves no checkpoint,
    and never a partial one. Cancel stops the job at its next step (the worker lives on); a worker that
    does not confirm within `cancel_grace_s` is killed.

    Each run has an `owner` (None for the single-user tool): only the owner's Cancel ends it. With
    `max_queue`, a Start that finds a run going on may `join` a first-come queue of that many and start
    when its ticket comes first (`ready`); a ticket its page stopped asking about for `stale_s` is dropped.
    `on_publish(folders, run_id, owner)` is called with a finished run's checkpoint folders. The worker
    runs at `priority` (EXPLORER_WORKER_PRIORITY): "idle" (the default: Linux's SCHED_IDLE, so it takes only
    the CPU the app leaves), a niceness ("10"), or "normal".

    The worker is started with `environ` (default: the app's environment) and the worker settings above;
    `settings` (explorer.settings.Settings) default to those `environ` gives.
    """

    def __init__(self, out_dir: str | os.PathLike, environ: dict | None = None, max_queue: int = 0,
                 on_publish=None, stale_s: float = 30.0, priority: str | None = None,
                 compile_cache: str | os.PathLike | None = None, idle_s: float | None = None,
                 hang_s: float | None = None, cancel_grace_s: float = 3.0, settings: Settings | None = None):
        self.settings = Settings.from_env(environ) if settings is None else settings
        self.out_dir = Path(out_dir)
        self.compile_cache = Path(compile_cache) if compile_cache else self.out_dir.parent / ".compile-cache"
        self.idle_s = self.settings.worker_idle_s if idle_s is None else idle_s
        self.hang_s = self.settings.worker_hang_s if hang_s is None else hang_s
        self.cancel_grace_s = cancel_grace_s
        self.priority = self.settings.worker_priority if priority is None else \
            Settings.check("worker_priority", priority)
        self.environ = environ
        self.max_queue = max_queue
        self.on_publish = on_publish
        self.stale_s = stale_s
        self._lock = threading.Lock()
        self._state = RunState()
        self._worker: Worker | None = None
        self._workers_started = 0
        self._log_dir: Path | None = None
        self._job_dir: Path | None = None
        self._job_log_at = 0
        self._done = threading.Event()
        self._done.set()
        # The last runs' final states, by run id: the next Start in the queue can replace the state the
        # moment a run ends, and the visitor whose run it was must still see how it ended.
        self._ended: dict[int, RunState] = {}
        self._watchdog: threading.Thread | None = None
        self._runs = 0
        self._queue: list[Ticket] = []
        self._tickets = 0
        self._durations: list[float] = []
        self._out = self.out_dir

    # --- the queue (shared mode) --------------------------------------------------------------------

    def _purge(self) -> None:
        now = time.time()
        self._queue = [t for t in self._queue if not t.cancelled and now - t.seen < self.stale_s]

    def join(self, owner: str | None) -> Ticket:
        """A place in the queue; QueueFull when `max_queue` Starts already wait behind a run going on."""
        with self._lock:
            self._purge()
            if (self._state.running or self._queue) and len(self._queue) >= self.max_queue:
                waiting = f"{len(self._queue)} Start{'s' if len(self._queue) != 1 else ''} already wait"
                raise QueueFull(f"the fine-tuning queue is full: a run is going on and {waiting} (the most "
                                f"this instance holds); try again later, or duplicate the Space to train on "
                                f"your own hardware")
            self._tickets += 1
            ticket = Ticket(self._tickets, owner, time.time())
            self._queue.append(ticket)
            return ticket

    def leave(self, ticket: Ticket) -> None:
        with self._lock:
            ticket.cancelled = True
            self._purge()

    def ready(self, ticket: Ticket) -> bool:
        """Whether `ticket` may start now (no run going on, first in the queue); keeps it alive."""
        with self._lock:
            ticket.seen = time.time()
            self._purge()
            return not self._state.running and bool(self._queue) and self._queue[0] is ticket

    def position(self, ticket: Ticket) -> tuple[int, int, float | None]:
        """(1-based place, queue length, estimated seconds until it starts or None) of a waiting ticket."""
        with self._lock:
            ticket.seen = time.time()
            self._purge()
            place = next((i + 1 for i, t in enumerate(self._queue) if t is ticket), 0)
            return place, len(self._queue), self._estimate(place)

    def _estimate(self, place: int) -> float | None:
        s = self._state
        projected = None
        if s.running:
            totals = [m.total_steps for m in s.members if m.total_steps]
            if totals:
                total = sum(totals) + (len(s.members) - len(totals)) * totals[0]
                done = sum(m.step for m in s.members)
                if done / total > 0.02:
                    projected = s.elapsed * total / done
        typical = float(np.median(self._durations)) if self._durations else projected
        if typical is None:
            return None
        remaining = max(projected - s.elapsed, 0.0) if projected is not None else (typical if s.running else 0.0)
        return remaining + max(place - 1, 0) * typical

    # --- a run --------------------------------------------------------------------------------------

    def _worker_env(self, backend: str) -> dict:
        """The worker's environment: the app's (or `environ`), with the settings the worker reads."""
        env = {**(os.environ if self.environ is None else self.environ), "KERAS_BACKEND": backend,
               "PYTHONUNBUFFERED": "1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
               "EXPLORER_WORKER_IDLE_S": str(self.idle_s), "EXPLORER_COMPILE_CACHE": str(self.compile_cache),
               "EXPLORER_COMPILE_CACHE_MB": str(self.settings.compile_cache_mb),
               "EXPLORER_WORKER_MODELS": str(self.settings.worker_models)}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        root = Path(__file__).resolve().parents[1]
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
        return env

    def _ensure_worker(self, backend: str) -> Worker:
        """The worker, started now if there is none (or it died, or it runs another backend). Lock held."""
        import shutil
        import sys
        w = self._worker
        if w is not None and w.alive() and w.backend == backend:
            return w
        if w is not None:
            w.kill()
        root = Path(__file__).resolve().parents[1]
        self.out_dir.mkdir(parents=True, exist_ok=True)
        command = priority_prefix(self.priority, shutil.which) + [sys.executable, "-m", "explorer.jobs", "--serve"]
        if self._log_dir is None:
            import tempfile
            self._log_dir = Path(tempfile.mkdtemp(prefix="explorer-worker-"))
        log = self._log_dir / f"worker-{self._workers_started + 1}.log"  # its standard error
        w = Worker(command, self._worker_env(backend), str(root), log, self._on_worker_event, self._on_worker_exit)
        w.backend = backend
        self._worker = w
        self._workers_started += 1
        return w

    def prepare(self, bases: list[str] | None = None, shapes: list[dict] | None = None) -> None:
        """Starts the worker before anyone asks (imports, the compilation cache) and, given `bases` and
        `shapes` ({"classes", "images"}), has it compile their fine-tuning steps; without delaying anything:
        a Start meanwhile queues behind it in the worker."""
        from explorer.jobs import choose_backend
        backend, _ = choose_backend(self.settings)
        with self._lock:
            w = self._ensure_worker(backend)
            if bases and shapes:
                w.send({"kind": "warm", "bases": [str(b) for b in bases], "shapes": shapes})

    def worker_pid(self) -> int | None:
        with self._lock:
            return self._worker.pid if self._worker is not None and self._worker.alive() else None

    @property
    def workers_started(self) -> int:
        return self._workers_started

    def start(self, plan, owner: str | None = None, out_dir: str | os.PathLike | None = None,
              ticket: Ticket | None = None) -> int:
        """Starts the job `plan` (a jobs.Plan) unless one is going on (or, with a `ticket`, unless it
        is not first in the queue); its checkpoints go to `out_dir` (default: the runner's). Returns
        the run id."""
        import uuid

        from explorer.checkpoints import clean_stale
        from explorer.jobs import choose_backend, write_job
        backend, reason = choose_backend(self.settings)
        with self._lock:
            self._purge()
            if self._state.running:
                raise Busy("a fine-tuning run is already going on"
                           + (f" ({self._state.description})" if self._state.owner == owner else "")
                           + "; wait for it to end" + (" or cancel it" if self._state.owner == owner else ""))
            if ticket is not None:
                if not self._queue or self._queue[0] is not ticket:
                    raise Busy("another Start is ahead in the queue")
                self._queue.pop(0)
            elif self._queue:
                raise Busy(f"{len(self._queue)} Start(s) wait in the queue")
            self._runs += 1
            self._out = Path(out_dir) if out_dir is not None else self.out_dir
            self._state = RunState(running=True, status="starting", started=time.time(),
                                   description=plan.description, backend=backend, backend_reason=reason,
                                   members=[MemberState(m.tag, m.label) for m in plan.members],
                                   run_id=self._runs, owner=owner)
            self._done = threading.Event()
            try:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                clean_stale(self.out_dir)
                job_dir = self.out_dir / f".tmp-{os.getpid()}-job-{uuid.uuid4().hex[:8]}"
                write_job(plan, job_dir)
                self._job_dir = job_dir
                worker = self._ensure_worker(backend)
                self._job_log_at = worker.log_size()
                worker.last_heard = time.time()
                if not worker.send({"kind": "job", "id": self._state.run_id, "dir": str(job_dir)}):
                    raise RuntimeError("the worker's input is closed")
            except Exception as e:
                self._finish_locked("failed", f"the training process could not start: {type(e).__name__}: {e}")
                raise
            self._watchdog = threading.Thread(target=self._watch, args=(self._state.run_id,), name="fine-tune-watch",
                                              daemon=True)
            self._watchdog.start()
            return self._state.run_id

    def _on_worker_event(self, worker: Worker, event: dict) -> None:
        kind = event.get("kind")
        with self._lock:
            current = worker is self._worker and self._state.running and event.get("job") == self._state.run_id
            if not current:
                return
            if kind == "job_end":
                outcome = event.get("outcome")
                self._state.worker = {k: event.get(k) for k in ("loads", "compiles", "cache_hits")}
                self._state.worker["pid"] = worker.pid
                cancelled = self._state.cancelling
                job_dir = self._job_dir
        if not current:
            return
        if kind != "job_end":
            self._event(event)
            return
        if cancelled:
            self._finish("cancelled")
        elif outcome == "done":
            try:
                self._publish(job_dir)
                with self._lock:
                    self._durations = (self._durations + [self._state.elapsed])[-20:]
                self._finish("done")
            except Exception as e:  # e.g. the disk filled up while moving: nothing is left half-moved
                self._finish("failed", f"{type(e).__name__}: {e}")
        else:
            self._finish("cancelled" if outcome == "cancelled" else "failed",
                         None if outcome == "cancelled" else "the training process reported an error")

    def _on_worker_exit(self, worker: Worker, code: int) -> None:
        with self._lock:
            if worker is not self._worker:
                return
            self._worker = None
            running = self._state.running
            cancelled = self._state.cancelling
            since = self._job_log_at
        if running:
            self._finish("cancelled" if cancelled else "failed",
                         None if cancelled else self._crash_message(code, worker.log_tail(since)))

    def _watch(self, run_id: int) -> None:
        """Fails the run, and kills its worker, when the worker says nothing for hang_s (a hung process)."""
        while not self._done.wait(1.0):
            with self._lock:
                w = self._worker
                if not self._state.running or self._state.run_id != run_id or w is None:
                    return
                silent = time.time() - w.last_heard
            if silent > self.hang_s:
                with self._lock:
                    if self._worker is w:
                        self._worker = None
                w.kill()
                self._finish("failed", f"the training process stopped responding for {silent:.0f} s and was "
                                       f"stopped; the next Start uses a new one")
                return

    def _finish(self, status: str, error: str | None = None) -> None:
        with self._lock:
            self._finish_locked(status, error)

    def _finish_locked(self, status: str, error: str | None = None) -> None:
        import shutil
        s = self._state
        if not s.running:
            return
        s.status = status
        if error and status == "failed":
            s.error = s.error or error
        s.running, s.ended = False, time.time()
        if self._job_dir is not None:
            shutil.rmtree(self._job_dir, ignore_errors=True)
            self._job_dir = None
        self._ended[s.run_id] = copy.deepcopy(s)
        while len(self._ended) > ENDED_KEPT:
            del self._ended[min(self._ended)]
        self._done.set()

    def shutdown(self) -> None:
        """Ends the worker (the app is stopping); a run going on is cancelled."""
        with self._lock:
            w, self._worker = self._worker, None
        if w is not None:
            w.kill()
        self._finish("cancelled")

    def _event(self, event: dict) -> None:
        with self._lock:
            s = self._state
            kind = event.get("kind")
            # Lines still in the pipe after a Cancel must not turn "cancelled" back into "training".
            if kind in ("member", "batch") and s.status == "starting":
                s.status = "training"
            member = s.members[event["member"]] if "member" in event else None
            if kind == "started":
                s.device, s.backend = event["device"], event["backend"]
                s.ready_at = time.time()
            elif kind == "member":
                s.current = event["member"]
                member.recipe = event.get("recipe")
            elif kind == "batch":
                member.step, member.total_steps = event["step"], event["total_steps"]
                member.last_loss = event["loss"]
            elif kind == "epoch":
                member.history = member.history + [{k: v for k, v in event.items() if k not in ("kind", "member")}]
            elif kind == "member_done":
                member.folder, member.metrics = event["folder"], event["metrics"]
                member.training, member.predictions = event["training"], event["predictions"]
                member.seconds = event.get("seconds")
            elif kind == "error":
                s.error = event["error"]


    @staticmethod
    def _crash_message(code: int, tail: list[str]) -> str:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return f"the training process {how}" + (f": {' / '.join(tail)}" if tail else "")

    def _publish(self, job_dir: Path) -> None:
        """Moves every member's checkpoint into out_dir (a new name if the planned one is taken)."""
        from explorer.checkpoints import unique_dir, update_card
        with self._lock:
            folders = [m.folder for m in self._state.members]
        if None in folders:
            raise RuntimeError("the training process ended without writing every checkpoint")
        moved = []
        self._out.mkdir(parents=True, exist_ok=True)
        try:
            for folder in folders:
                target = unique_dir(self._out, folder)
                os.rename(job_dir / "staging" / folder, target)
                moved.append(target)
                if target.name != folder:
                    update_card(target, name=target.name)
        except BaseException:
            import shutil
            for target in moved:  # all or nothing
                shutil.rmtree(target, ignore_errors=True)
            raise
        if self.on_publish is not None:
            with self._lock:
                run_id, owner = f"{os.getpid()}-{self._state.run_id}-{int(self._state.started)}", self._state.owner
            self.on_publish(moved, run_id, owner)
        with self._lock:
            for m, target in zip(self._state.members, moved, strict=True):
                m.checkpoint = str(target)
            self._state.status = "done"

    def cancel(self, owner: str | None = None) -> bool:
        """Ends `owner`'s run at once (its process is killed); returns whether it did."""
        return self.cancel_as(owner) == "cancelled"

    def cancel_as(self, owner: str | None = None) -> str:
        """Cancel as `owner` asks it: "cancelled" (their run was going on: it stops at its next step, or its
        worker is killed if it does not within cancel_grace_s; nothing is saved), "left" (they were waiting in
        the queue), "not yours" (another owner's run is going on; nothing happens) or "none"."""
        with self._lock:
            mine = [t for t in self._queue if t.owner == owner and not t.cancelled]
            if self._state.running and self._state.owner == owner:
                self._state.cancelling = True
                worker, run_id = self._worker, self._state.run_id
            elif mine:
                for t in mine:
                    t.cancelled = True
                self._purge()
                return "left"
            else:
                return "not yours" if self._state.running else "none"
        if worker is None or not worker.send({"kind": "cancel", "id": run_id}):
            self._finish("cancelled")
            return "cancelled"

        def enforce():
            if not self._done.wait(self.cancel_grace_s):
                with self._lock:
                    if self._worker is worker:
                        self._worker = None
                worker.kill()
                self._finish("cancelled")

        threading.Thread(target=enforce, name="fine-tune-cancel", daemon=True).start()
        return "cancelled"

    def wait(self, timeout: float | None = None) -> None:
        """Until the run going on has ended (or `timeout`)."""
        self._done.wait(timeout)

    def snapshot(self, run_id: int | None = None) -> RunState:
        """The run going on (or the last one); with `run_id`, that run's state, also once it has ended and
        another has started (for the last ENDED_KEPT runs)."""
        with self._lock:
            if run_id is not None and run_id != self._state.run_id and run_id in self._ended:
                return copy.deepcopy(self._ended[run_id])
            return copy.deepcopy(self._state)


# --- the run as the page says it ----------------------------------------------------------------


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def run_status(s, root: str | os.PathLike) -> str:
    """Markdown for a RunState `s`: the run, each member's progress and result, and how it ended;
    checkpoints are named relative to `root`."""
    if s.status == "idle":
        return "No run yet."
    where = f"on **{s.device}** ({s.backend})" if s.device else f"starting a {s.backend} worker"
    lines = [f"**{s.status}** · {s.description} · {where} · {s.elapsed:.0f} s"]
    for m in s.members:
        pct = 100 * m.step / m.total_steps if m.total_steps else 0
        t = m.training or {}
        done = (f" · done: test top-1 **{100 * m.metrics['test_top1']:.1f} %**, "
                f"{t.get('images_per_second')} images/s" if m.metrics and "test_top1" in m.metrics else "")
        start = next((e for e in m.history if e.get("epoch") == 0), None)
        head = f" · head: {start['head']}" if start and start.get("head") else ""
        kept = f" · kept: {t['kept_model']}" if done and t.get("kept_model") else ""
        lines.append(f"{m.label}: step {m.step}/{m.total_steps} ({pct:.0f} %)"
                     + (f" · loss {m.last_loss:.3f}" if m.last_loss is not None else "") + head + done + kept)
        if kept and t.get("decision"):
            lines.append(f"{m.label} kept {t['kept_model']}: {t['decision']}")
    if s.status == "done":
        saved = ", ".join(f"`{os.path.relpath(m.checkpoint, Path(root))}`" for m in s.members)
        lines.append(f"Saved as {saved}, and loaded into the model slots: every tab now compares them.")
    if s.cancelling and s.running:
        lines.append("Cancelling: the run stops at its next step; nothing will be saved.")
    if s.status == "cancelled":
        lines.append("Cancelled: the training process was stopped and nothing was saved.")
    if s.error:
        lines.append(f"**⚠ the run failed:** {s.error} · nothing was saved; the slots are as they were.")
    return "\n\n".join(lines)


def queue_status(place: int, length: int, eta: float | None, description: str) -> str:
    """Markdown for a Start waiting behind another visitor's run."""
    wait = f"about {duration(eta)}" if eta is not None else "an estimate comes once it has made progress"
    return (f"**waiting** · another visitor's run is going on · your place in the queue: **{place} of {length}** · "
            f"{wait} · {description} starts by itself when its turn comes; keep this page open (Cancel leaves "
            f"the queue)")


CANCEL_ANSWERS = {"cancelled": "Cancelled: the training process was stopped and nothing was saved.",
                  "left": "You left the queue; nothing was started.",
                  "not yours": "The run going on is not yours: only the visitor who started it can cancel it. "
                               "Press Start to wait for your turn in the queue.",
                  "none": "No run is going on."}
