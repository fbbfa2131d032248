"""The worker process as the app holds it (its other side is serve.py): its command line, started at a CPU
priority, sent commands and read back as JSON lines, its end reported. What it runs is the runner's to
decide (runner.py); when it is started or replaced, the supervisor's (supervisor.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from explorer.core.protocol import Message, ProtocolError, decode_event, encode

# The worker's entry: explorer/finetune/__main__.py, whose --serve is serve.main's long-lived loop.
WORKER_MODULE = "explorer.finetune"


def priority_prefix(priority: str, which) -> list[str]:
    """What the worker's command starts with, so that serving comes first: every thread of it, from exec on,
    runs under SCHED_IDLE (only when the app leaves a core idle), or at a niceness. `priority`: "idle",
    "normal" or a niceness (EXPLORER_WORKER_PRIORITY); `which`: shutil.which."""
    if priority == "idle" and which("chrt"):
        return ["chrt", "--idle", "0"]
    nice = 19 if priority == "idle" else 0 if priority == "normal" else int(priority)
    return ["nice", "-n", str(nice)] if nice and which("nice") else []


def worker_command(priority: str, which=shutil.which) -> list[str]:
    """`python -m explorer.finetune --serve` at `priority` (see priority_prefix)."""
    return priority_prefix(priority, which) + [sys.executable, "-m", WORKER_MODULE, "--serve"]


class Worker:
    """The long-lived training process (`python -m explorer.finetune --serve`) on one Keras `backend`. Its
    events (protocol.py's, one JSON line each) go to `on_event(worker, event)`, its end to
    `on_exit(worker, code)`."""

    def __init__(self, command: list[str], env: dict, cwd: str, log_path: Path, on_event, on_exit,
                 backend: str = ""):
        self.log_path = log_path
        self.backend = backend
        self.began = time.time()  # its start, until its Ready (estimate.PaceBook keeps how long that took)
        log = open(log_path, "ab")
        try:
            self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.PIPE,
                                         env=env, cwd=cwd)
        finally:
            log.close()
        self.last_heard = time.time()
        self._on_event, self._on_exit = on_event, on_exit
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="fine-tune-worker", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, command: Message) -> bool:
        """Writes `command` (one of protocol.py's commands) to the worker; whether its input took it."""
        try:
            with self._send_lock:
                self.proc.stdin.write(encode(command).encode())
                self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def kill(self) -> None:
        """SIGKILL, then waits until it is gone (so it writes nothing more into a folder about to go)."""
        try:
            self.proc.kill()
            self.proc.wait(timeout=10)
        except (OSError, ValueError):
            pass
        except Exception:  # noqa: BLE001  (subprocess.TimeoutExpired: a process stuck in the kernel)
            pass

    def log_tail(self, since: int = 0, lines: int = 3) -> list[str]:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.last_heard = time.time()
            try:
                event = decode_event(line)
            except ProtocolError:  # a line that is no event is passed over: the run goes on or ends by its events
                continue
            self._on_event(self, event)
        code = self.proc.wait()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self._on_exit(self, code)
