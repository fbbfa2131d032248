"""The worker process: `python -m explorer.finetune --serve` (what the app starts: jobs as JSON lines on
standard input, for as long as it is not idle) or `python -m explorer.finetune JOB_DIR` (one job, then
exit). It has a Keras backend of its own (the app chooses it: backend.py), reads each job from its folder,
writes the checkpoints under the folder's staging/, and reports progress as JSON lines on its standard
output; anything else it prints goes to its standard error, the app's log of it."""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path

import keras

from explorer.core.devices import device_name
from explorer.core.protocol import (
    Cancel,
    Event,
    Exiting,
    Failed,
    JobEnd,
    Measure,
    Measured,
    Outcome,
    Ping,
    Pong,
    ProtocolError,
    Ready,
    RunJob,
    Warm,
    Warmed,
    decode_command,
    encode,
)
from explorer.core.settings import Settings
from explorer.finetune.compiling import CompileCounter, use_compile_cache
from explorer.finetune.job import measure, run_job, warm_up
from explorer.finetune.warm import WarmModels
from explorer.training.fitting import Cancelled


def _exit_with_parent() -> None:
    """Ends this worker when the app that started it is gone (killed, or stopped without cancelling), so no
    orphan keeps training; its half-done job folder is then removed by the next run (atomic.clean_stale)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _event_stream():
    """emit(event): events (protocol.py's) go to the original standard output as JSON lines; anything else
    that prints goes to the log (stderr)."""
    events = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    lock = threading.Lock()

    def emit(event: Event) -> None:
        line = encode(event)
        with lock:
            events.write(line)
            events.flush()

    return emit


def serve(commands, emit, idle_s: float, cache_dir: str | None = None, cache_mb: float = 512.0,
          models: int = 4) -> int:
    """The long-lived worker: takes commands from `commands` (a queue of (command, its cancel event) pairs,
    the command a protocol.RunJob, Warm, Measure or Ping, the event a job's threading.Event and None for the others;
    None when its input closed) and answers through `emit`, keeping Keras imported and the models it trained
    from (with their compiled steps) between jobs. Ends after `idle_s` without a command (its memory goes
    back) or when its input closes. It keeps up to `models` models; `cache_dir` holds at most `cache_mb` of
    compiled steps."""
    use_compile_cache(cache_dir, cache_mb)
    counter = CompileCounter()
    warm = WarmModels(size=models)
    # The package (and Keras with it) was imported before this module ran: the process's CPU time so far is
    # what its start cost, imports first.
    emit(Ready(device_name(), keras.backend.backend(), os.getpid(), round(time.process_time(), 3)))
    while True:
        try:
            queued = commands.get(timeout=idle_s)
        except queue.Empty:
            emit(Exiting(f"idle for {idle_s:g} s"))
            return 0
        if queued is None:
            return 0
        command, cancel = queued
        if isinstance(command, Ping):
            emit(Pong(command.id))
        elif isinstance(command, Warm):
            began = time.perf_counter()
            try:
                warm_up(warm, command.bases, command.shapes)
                emit(Warmed(seconds=round(time.perf_counter() - began, 3)))
            except Exception as e:  # noqa: BLE001  (a failed warm-up costs speed, never a run)
                emit(Warmed(error=f"{type(e).__name__}: {e}"))
        elif isinstance(command, Measure):
            for base in command.bases:
                try:
                    emit(measure(warm, base, command.classes, command.batch, command.frozen))
                except Exception as e:  # noqa: BLE001  (a failed measure costs the estimate, never a run)
                    emit(Measured(base, error=f"{type(e).__name__}: {e}"))
        elif isinstance(command, RunJob):
            _serve_job(command, cancel, emit, warm, counter)


def _serve_job(command: RunJob, cancel, emit, warm, counter: CompileCounter) -> None:
    """One job command (`cancel`: the threading.Event that stops it): its events tagged with its id, and a
    last event (JobEnd) with how it ended, how many models the worker has loaded, and what it compiled for
    this job."""
    compiles, hits = counter.counts()

    def tagged(event: Event) -> None:
        emit(replace(event, job=command.id))

    try:
        run_job(Path(command.dir), tagged, warm, cancel)
        outcome = Outcome.DONE
    except Cancelled:
        outcome = Outcome.CANCELLED
    except BaseException as e:  # whatever it is, the app hears it and the worker serves on
        tagged(Failed(f"{type(e).__name__}: {e}"))
        traceback.print_exc()
        outcome = Outcome.ERROR
    now = counter.counts()
    tagged(JobEnd(outcome, warm.loads, None if compiles is None else now[0] - compiles,
                  None if hits is None else now[1] - hits))


def _read_commands(stream, commands, cancels: dict) -> None:
    """The worker's input: a Cancel sets that job's event at once (the job stops at its next step); every
    other command waits in `commands` for the main loop, a RunJob with its cancel event (see serve). None
    when the input closes (the app is gone)."""
    for line in stream:
        try:
            command = decode_command(line)
        except ProtocolError:
            continue
        if isinstance(command, Cancel):
            event = cancels.get(command.id)
            if event is not None:
                event.set()
            continue
        commands.put((command, cancels.setdefault(command.id, threading.Event())
                      if isinstance(command, RunJob) else None))
    commands.put(None)


def main(argv=None, settings: Settings | None = None) -> int:
    """The worker process; with --serve, its settings (default: its environment, which the app sets)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--serve"]:
        settings = Settings.from_env() if settings is None else settings
        emit = _event_stream()
        _exit_with_parent()
        commands: queue.Queue = queue.Queue()
        threading.Thread(target=_read_commands, args=(sys.stdin, commands, {}), name="commands",
                         daemon=True).start()
        return serve(commands, emit, settings.worker_idle_s, settings.compile_cache, settings.compile_cache_mb,
                     settings.worker_models)
    usage = ("usage: python -m explorer.finetune JOB_DIR   (one job, then exit)\n"
             "       python -m explorer.finetune --serve   (jobs as JSON lines on standard input)")
    if argv in (["-h"], ["--help"]):
        print(usage)
        return 0
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(usage + ("" if len(argv) != 1 else f"\nerror: {argv[0]} is not a job folder"), file=sys.stderr)
        return 2
    emit = _event_stream()
    _exit_with_parent()
    try:
        run_job(Path(argv[0]), emit)
    except BaseException as e:  # whatever it is, the app hears it and keeps serving
        emit(Failed(f"{type(e).__name__}: {e}"))
        traceback.print_exc()
        return 1
    return 0
