"""The worker process a runner keeps: started on first need with the worker's settings in its environment,
kept between runs, and replaced when it died, was stopped, or runs another backend than the next job's."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from explorer.core.settings import PROJECT, Settings  # PROJECT: the worker imports explorer from there
from explorer.finetune.handle import Worker, worker_command


class Supervisor:
    """One worker at a time (`current`, None when there is none); `started`: how many it has started.

    The worker runs at `priority` (EXPLORER_WORKER_PRIORITY), ends after `idle_s` without work
    (EXPLORER_WORKER_IDLE_S), and keeps JAX's compiled steps in `compile_cache`; it is started with
    `environ` (default: the app's environment) and these settings. Its events (protocol.py's) and its end
    go to `on_event(worker, event)` and `on_exit(worker, code)`; its standard error to a log file of its
    own. The runner calls `ensure` and changes `current` under its own lock."""

    def __init__(self, settings: Settings, environ: dict | None, priority: str, idle_s: float,
                 compile_cache: Path, on_event, on_exit):
        self.settings, self.environ = settings, environ
        self.priority, self.idle_s, self.compile_cache = priority, idle_s, compile_cache
        self._on_event, self._on_exit = on_event, on_exit
        self.current: Worker | None = None
        self.started = 0
        self._log_dir: Path | None = None

    def env(self, backend: str) -> dict:
        """The worker's environment: the app's (or `environ`), with the settings the worker reads."""
        env = {**(os.environ if self.environ is None else self.environ), "KERAS_BACKEND": backend,
               "PYTHONUNBUFFERED": "1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
               "EXPLORER_WORKER_IDLE_S": str(self.idle_s), "EXPLORER_COMPILE_CACHE": str(self.compile_cache),
               "EXPLORER_COMPILE_CACHE_MB": str(self.settings.compile_cache_mb),
               "EXPLORER_WORKER_MODELS": str(self.settings.worker_models)}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT), env.get("PYTHONPATH", "")) if p)
        return env

    def ensure(self, backend: str) -> Worker:
        """The worker, started now if there is none (or it died, or it runs another backend)."""
        w = self.current
        if w is not None and w.alive() and w.backend == backend:
            return w
        if w is not None:
            w.kill()
        if self._log_dir is None:
            self._log_dir = Path(tempfile.mkdtemp(prefix="explorer-worker-"))
        log = self._log_dir / f"worker-{self.started + 1}.log"  # its standard error
        self.current = Worker(worker_command(self.priority), self.env(backend), str(PROJECT), log, self._on_event,
                              self._on_exit, backend)
        self.started += 1
        return self.current

    def pid(self) -> int | None:
        """The current worker's process id, None while there is none."""
        w = self.current
        return w.pid if w is not None and w.alive() else None

    def let_go(self, worker: Worker) -> bool:
        """Forgets `worker` if it is the current one (it ended, or is about to be killed); whether it was."""
        if self.current is not worker:
            return False
        self.current = None
        return True
