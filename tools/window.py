"""`python tools/window.py`: one GPU window's work on a new model's training: train, or resume from the
committed state, within a time budget; write what comes back within the device's return limits.

A lent GPU machine comes for minutes, receives the project and sends back at most RETURN_FILES files of at
most RETURN_FILE_BYTES each. A window therefore:

1. rebuilds the run's backup from the state folder (committed in the project: `<state>/backup/`, its large
   files in parts of at most PART_BYTES), or starts anew when there is none;
2. trains with explorer.train's options (`--preset paper --recipe paper --fast ...`) until the end of the
   last epoch that fits in `--budget` seconds from the command's start, less `--reserve` for writing;
3. writes to `--out` the state folder as it now is: the backup in parts (the run goes on next window) or the
   finished float32 checkpoint (`checkpoint/`), and `windows.jsonl`, one line per window (where, how fast,
   how far), and checks that it fits the return limits.

Between windows, `python tools/window.py collect RETURNED STATE` puts what came back into the state folder,
to be committed. Once the last window has written the checkpoint, `python tools/window.py ship STATE DEST
--data-dir DIR` makes it a shipped one: joined from its parts, its windows on its card, evaluated on the
whole test split (DIR: a CIFAR folder) and lean, written to DEST (e.g. checkpoints/paper/cifar10-vanilla).

On JAX a window keeps its compiled steps in `--compile-cache` (JAX's persistent cache, with keys that do not
depend on the folder's path), and its record says how many steps it compiled and how many it loaded from there.
`python tools/window.py cache-out CACHE TAR --since EPOCH_S` packs the steps used since then into one returned
file (with the device kind, driver, jax and jaxlib they were compiled on); on the next GPU, `python
tools/window.py cache-in TAR CACHE` puts them back when the machine is the same kind, and the window loads them
instead of compiling (tools/gpu_session.sh does both).

`--profile FILE` traces a second (`--profile-s`) of the steps after the window's first epoch with JAX's
profiler, prints where the device's time went (busy and idle, by the model's scopes and by kernel) and keeps the
trace; `python tools/window.py profile FILE` reads it again on any machine.

A rehearsal on the CPU with tiny settings:

    python -m explorer.packed pack --data-dir ../shared/data --out runs/cifar10-q90-train.npz --splits train
    python tools/window.py --state runs/rehearsal --out runs/rehearsal-out --budget 60 --reserve 10 \\
        --preset tiny --variant spt_lsa --dataset runs/cifar10-q90-train.npz --train-on-all --subset 2000 \\
        --epochs 6 --recipe paper --fast
    python tools/window.py collect runs/rehearsal-out runs/rehearsal     # then again, until it says done
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import re
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: this repository's explorer
from explorer.core import atomic  # noqa: E402

# What a lent device machine sends back (the device tool's limits), and the parts a large file is cut into.
RETURN_FILES = 8
RETURN_FILE_BYTES = 16 * 2 ** 20
RETURN_TOTAL_BYTES = 64 * 2 ** 20
PART_BYTES = RETURN_FILE_BYTES - 2 ** 16
PARTS = "parts.json"
WINDOWS = "windows.jsonl"
SHIPPED = "shipped.json"  # a shipped run's state folder: where its checkpoint went (its weights are there only)
# JAX's compiled steps a GPU call used, kept from one GPU to the next (cache-out, cache-in): a tar of the entries
# of JAX's persistent compilation cache, with what they were compiled on and by.
CACHE_META = "compiled-on.json"


class WindowError(ValueError):
    """A window that cannot run or whose output would not come back; the message says why."""


def split_files(folder: Path, out: Path, part_bytes: int = PART_BYTES) -> None:
    """Copies `folder`'s files to `out`, each file over `part_bytes` cut into `<name>.part-NN` pieces listed
    with their sizes and hashes in `out/parts.json`."""
    out.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".tmp-")):
        data = path.read_bytes()
        if len(data) <= part_bytes:
            shutil.copyfile(path, out / path.name)
            continue
        pieces = [data[i:i + part_bytes] for i in range(0, len(data), part_bytes)]
        for k, piece in enumerate(pieces):
            (out / f"{path.name}.part-{k:02d}").write_bytes(piece)
        manifest[path.name] = {"bytes": len(data), "parts": len(pieces),
                               "sha256": hashlib.sha256(data).hexdigest()}
    if manifest:
        (out / PARTS).write_text(json.dumps(manifest, indent=1))


def join_files(folder: Path, out: Path) -> None:
    """The inverse of split_files: `out` gets `folder`'s files whole, each joined file's hash checked."""
    manifest = json.loads((folder / PARTS).read_text()) if (folder / PARTS).is_file() else {}
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name != PARTS and ".part-" not in path.name:
            shutil.copyfile(path, out / path.name)
    for name, entry in manifest.items():
        pieces = [folder / f"{name}.part-{k:02d}" for k in range(entry["parts"])]
        missing = [p.name for p in pieces if not p.is_file()]
        if missing:
            raise WindowError(f"{folder}: {name} lacks its parts {', '.join(missing)}")
        data = b"".join(p.read_bytes() for p in pieces)
        if len(data) != entry["bytes"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise WindowError(f"{folder}: {name} joined from its parts is not the file that was cut (size or "
                              f"sha256 differs); the state is damaged")
        (out / name).write_bytes(data)


def check_return(out: Path) -> dict:
    """{files, bytes, largest} of what `out` sends back; a WindowError when it exceeds the return limits."""
    files = [p for p in out.rglob("*") if p.is_file()]
    sizes = {str(p.relative_to(out)): p.stat().st_size for p in files}
    total, largest = sum(sizes.values()), max(sizes.values(), default=0)
    problems = []
    if len(files) > RETURN_FILES:
        problems.append(f"{len(files)} files (at most {RETURN_FILES})")
    if largest > RETURN_FILE_BYTES:
        problems.append(f"{max(sizes, key=sizes.get)} is {largest / 2 ** 20:.1f} MiB (at most "
                        f"{RETURN_FILE_BYTES / 2 ** 20:.0f})")
    if total > RETURN_TOTAL_BYTES:
        problems.append(f"{total / 2 ** 20:.1f} MiB in all (at most {RETURN_TOTAL_BYTES / 2 ** 20:.0f})")
    if problems:
        raise WindowError(f"{out} would not come back from the device: " + "; ".join(problems))
    return {"files": len(files), "bytes": total, "largest": largest}


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


def _parse(argv):
    p = argparse.ArgumentParser(prog="python tools/window.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--state", required=True, help="the run's state folder (committed between windows)")
    p.add_argument("--out", required=True, help="where what comes back is written ($OUT on the device)")
    p.add_argument("--budget", type=float, required=True, metavar="SECONDS",
                   help="the window's time, counted from this command's start")
    p.add_argument("--reserve", type=float, default=30.0, metavar="SECONDS",
                   help="of the budget, kept for saving and writing what comes back (default 30)")
    p.add_argument("--work", help="where the backup is rebuilt and the checkpoint written (default: "
                                  "runs/window/<state's name>)")
    p.add_argument("--compile-cache", default=str(Path("runs") / "jax-cache"), metavar="DIR",
                   help="on JAX, JAX's persistent compilation cache (default runs/jax-cache): a second window on "
                        "the same machine loads the steps the first compiled (about 2 minutes of the paper "
                        "preset's first epoch on an H200) instead of compiling them again; '' for none")
    p.add_argument("--profile", metavar="FILE",
                   help="on JAX, trace --profile-s seconds of training steps after the window's first epoch (JAX's "
                        "profiler), print where the device's time went, and keep the trace in FILE (.json.gz)")
    p.add_argument("--profile-s", type=float, default=1.0, metavar="SECONDS",
                   help="how long the profile traces (default 1: about 130 steps of the paper preset on an H200)")
    return p.parse_known_args(argv)


def run_window(args, train_argv: list[str], started: float) -> dict:
    """Trains within the window and writes `args.out`; returns the window's record."""
    from explorer import train
    from explorer.training.runs import train_new
    state, out = Path(args.state), Path(args.out)
    if (state / "checkpoint").is_dir() or (state / SHIPPED).is_file():
        raise WindowError(f"{state} holds a finished run{_shipped_to(state)}: this run is done")
    work = Path(args.work or Path("runs") / "window" / state.name)
    backup = work / "backup"
    shutil.rmtree(work, ignore_errors=True)
    if (state / "backup").is_dir():
        join_files(state / "backup", backup)
    targs = train.parse_args(train_argv + ["--backup", str(backup), "--out", str(work), "--name", state.name,
                                           "--verbose", "0"])
    if targs.base:
        raise WindowError("a window trains a new model: --base is not for it")
    from explorer.core.settings import Settings
    from explorer.data.folders import load_dataset
    from explorer.finetune.compiling import CompileCounter, use_compile_cache
    use_compile_cache(args.compile_cache, 2048, portable=True)  # cache-out, cache-in
    compiling = CompileCounter()
    config, recipe = train.new_model_plan(targs)
    dataset = load_dataset(targs.dataset, targs.data_dir, test_fraction=0.0 if targs.train_on_all else 0.2,
                           settings=Settings.from_env())
    before = _epochs_done(backup)
    limit = args.budget - args.reserve - (time.perf_counter() - started)
    if limit <= 0:
        raise WindowError(f"the budget of {args.budget:g} s leaves no time to train after the reserve of "
                          f"{args.reserve:g} s and {time.perf_counter() - started:.0f} s of starting")
    import dataclasses
    recipe = dataclasses.replace(recipe, time_limit=limit)
    profiler = StepProfiler(args.profile, args.profile_s) if args.profile else None
    result = train_new(config, targs.preset, dataset, recipe, work, state.name, verbose=0, backup=backup,
                       progress=profiler)
    if profiler is not None:
        print(profiler.finish(), flush=True)
    training = result.training
    record = {"window": len(_windows(state)) + 1, "started": _dt.datetime.fromtimestamp(
                  time.time() - (time.perf_counter() - started), _dt.UTC).replace(microsecond=0).isoformat(),
              "ended": _now(), "device": training.device, "budget_s": args.budget,
              "epochs_before": before, "epochs_after": training.epochs, "planned_epochs": recipe.epochs,
              "finished": result.checkpoint is not None,
              "images_per_second": training.images_per_second, "wall_s": round(time.perf_counter() - started, 1),
              "command": train_argv}
    record["compiled"], record["compile_cache_hits"] = compiling.counts()  # None, None off JAX
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if record["finished"]:
        split_files(Path(result.checkpoint), out / "checkpoint")
    else:
        split_files(backup, out / "backup")
    lines = _windows(state) + [json.dumps(record)]
    (out / WINDOWS).write_text("\n".join(lines) + "\n")
    record["returned"] = check_return(out)
    return record


class StepProfiler:
    """A window's progress listener that traces `seconds` of training steps with JAX's profiler, from the end
    of the window's first epoch (its compiling done) on, says where the device's time went (profile_summary)
    and keeps the trace (Chrome's trace-event JSON, gzipped) in `keep`, within one returned file: the host's
    events dropped when it would be larger, the whole trace left out when even the device's would be."""

    def __init__(self, keep: str, seconds: float):
        self.keep, self.seconds = Path(keep), seconds
        self.folder, self.began, self.said = None, None, None

    def __call__(self, event) -> None:
        from explorer.core.protocol import BatchEnd, EpochEnd
        if self.said is not None:
            return
        if self.began is None and isinstance(event, EpochEnd) and event.record.epoch > 0:
            import tempfile

            import jax
            self.folder = Path(tempfile.mkdtemp(prefix="window-profile-"))
            options = jax.profiler.ProfileOptions()
            options.python_tracer_level = 0  # not every Python call: the device's kernels are what it is for
            options.host_tracer_level = 1
            jax.profiler.start_trace(str(self.folder), profiler_options=options)
            self.began = time.perf_counter()
        elif self.began is not None and isinstance(event, BatchEnd) \
                and time.perf_counter() - self.began >= self.seconds:
            self._stop()

    def _stop(self) -> None:
        import jax
        jax.profiler.stop_trace()
        found = sorted(self.folder.rglob("*.trace.json.gz"))
        if not found:
            self.said = f"profile: JAX's profiler wrote no trace in {self.folder}"
            return
        self.said = profile_summary(found[0]).replace(found[0].name, self.keep.name, 1)
        self.keep.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found[0], self.keep)
        if self.keep.stat().st_size > RETURN_FILE_BYTES:  # the host's events are most of it: the device's kept
            _device_events_only(self.keep)
            self.said += "\n  (the trace that comes back holds the device's events only)"
        if self.keep.stat().st_size > RETURN_FILE_BYTES:
            self.said += (f"\n  (the trace, {self.keep.stat().st_size / 2 ** 20:.1f} MiB even so, does not come "
                          f"back: {found[0]} on this machine)")
            self.keep.unlink()
        else:
            shutil.rmtree(self.folder, ignore_errors=True)

    def finish(self) -> str:
        """What the trace shows, or why there is none."""
        if self.began is not None and self.said is None:
            self._stop()  # the window ended before the profile's time was up
        return self.said or "profile: none (the window trained no epoch after its first)"


def _device_events_only(trace: Path) -> None:
    """Rewrites a trace with its device processes' events only (and every process's names), so that it fits
    one returned file."""
    import gzip
    with gzip.open(trace, "rt") as f:
        data = json.load(f)
    events = data.get("traceEvents", [])
    devices = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
               and "/device:" in e["args"]["name"]}
    data["traceEvents"] = [e for e in events if e.get("ph") == "M" or e.get("pid") in devices]
    with atomic.replacing(trace) as tmp, gzip.open(tmp, "wt") as f:
        json.dump(data, f)


# A JAX name stack (a device event's tf_op): scopes, each maybe under transformations (the backward pass's
# "transpose(jvp(block))"), between the compiled functions' and the control flow's own names.
_TRANSFORM = re.compile(r"^(jvp|transpose|vmap|remat|checkpoint|custom_jvp_call|custom_vjp_call)\((.*)\)$")
_CONTROL = re.compile(r"^(p?jit\(.*\)|while|body|cond|branch_\d+_fun|closed_call|core_call)$")


def _op_group(name: str, args: dict, depth: int = 3) -> str:
    """The name a device event's time is summed under: its JAX name stack (args' tf_op, else long_name) with
    the scopes only, cut to `depth` of them, the backward pass marked; else its kernel's name without
    numbers."""
    stack = args.get("tf_op") or args.get("long_name") or ""
    scopes, backward = [], False
    for part in filter(None, stack.split("/") if "/" in stack else []):
        match = _TRANSFORM.match(part)
        while match:
            backward |= match.group(1) == "transpose"
            part = match.group(2)
            match = _TRANSFORM.match(part)
        if not _CONTROL.match(part):
            scopes.append(re.sub(r"_\d+$", "", part))
    if scopes:
        return "/".join(scopes[:depth]) + (" (backward)" if backward else "")
    return re.sub(r"[._]\d+", "", name)


def profile_summary(trace: Path, top: int = 15) -> str:
    """Where a device's time went in a trace of JAX's profiler (`*.trace.json.gz`, Chrome's trace-event
    format): over the trace's span, the time some kernel or copy ran on the device and the time it stood idle
    (waiting for the host), then the largest groups of device time (_op_group: the model's layers by JAX's
    name stacks) and the largest kernels. Read on any machine; a trace made on the CPU has no device
    events (XLA's CPU operations are not traced) and says so."""
    import gzip
    from collections import Counter, defaultdict
    try:
        with gzip.open(trace, "rt") as f:
            events = json.load(f).get("traceEvents", [])
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
        raise WindowError(f"{trace} is not a trace of JAX's profiler (*.trace.json.gz): {e}") from e
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    devices = {pid for pid, name in processes.items() if "/device:" in name}
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    if not spans:
        return f"profile {trace.name}: no timed events"
    first, last = min(e["ts"] for e in spans), max(e["ts"] + e["dur"] for e in spans)
    on_device = [e for e in spans if e["pid"] in devices]
    head = f"profile {trace.name}: {(last - first) / 1e3:.1f} ms traced"
    if not on_device:
        return (f"{head}, no device events ({', '.join(sorted(set(processes.values()))) or 'no processes'}): "
                f"a trace on the CPU times the host only")
    busy, end = 0.0, None  # the union of the device's intervals, over all its streams
    for e in sorted(on_device, key=lambda e: e["ts"]):
        start, stop = e["ts"], e["ts"] + e["dur"]
        if end is None or start > end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    span = max(e["ts"] + e["dur"] for e in on_device) - min(e["ts"] for e in on_device)
    total = sum(e["dur"] for e in on_device)
    groups, kernels, counts = defaultdict(float), defaultdict(float), Counter()
    for e in on_device:
        groups[_op_group(e["name"], e.get("args") or {})] += e["dur"]
        kernels[e["name"]] += e["dur"]
        counts[e["name"]] += 1
    lines = [f"{head}; on {', '.join(sorted(processes[p] for p in devices))}: busy {busy / 1e3:.1f} ms of "
             f"{span / 1e3:.1f} ({100 * busy / span:.0f} %; idle, waiting for the host: {(span - busy) / 1e3:.1f} "
             f"ms), {len(on_device):,} device events",
             f"  device time by group (of {total / 1e3:.1f} ms summed over streams):"]
    lines += [f"    {100 * t / total:5.1f} %  {t / 1e3:8.2f} ms  {g}"
              for g, t in sorted(groups.items(), key=lambda kv: -kv[1])[:top]]
    lines.append("  largest kernels:")
    lines += [f"    {100 * t / total:5.1f} %  {t / 1e3:8.2f} ms  x{counts[k]:<5d} {k[:100]}"
              for k, t in sorted(kernels.items(), key=lambda kv: -kv[1])[:top]]
    return "\n".join(lines)


def _epochs_done(backup: Path) -> int:
    from explorer.training.backup import METADATA
    path = backup / METADATA
    return int(json.loads(path.read_text())["epoch"]) if path.is_file() else 0


def _windows(state: Path) -> list[str]:
    path = state / WINDOWS
    return [line for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def collect(returned: Path, state: Path) -> str:
    """Makes `state` what a window sent back (`returned`): its backup parts or its checkpoint, and the log."""
    if not (returned / WINDOWS).is_file():
        raise WindowError(f"{returned} is not what a window writes (it has no {WINDOWS})")
    with atomic.replacing(state) as tmp:
        shutil.copytree(returned, tmp)
        shutil.rmtree(state, ignore_errors=True)  # the old state goes only once the new one is whole
    last = json.loads(_windows(state)[-1])
    if last["finished"]:
        return f"{state}: done after {last['window']} windows; the checkpoint is in {state / 'checkpoint'}"
    return (f"{state}: {last['epochs_after']} of {last['planned_epochs']} epochs after window {last['window']}; "
            f"the next window resumes")


def _compiled_on() -> dict:
    """What a JAX cache entry is only good for: the device kind, its platform's version (the driver, on a GPU)
    and the JAX and jaxlib that compiled it (JAX's own cache key holds these too: an entry from elsewhere would
    only miss)."""
    import jax
    import jaxlib
    device = jax.devices()[0]
    return {"device": device.device_kind, "platform": device.platform,
            "platform_version": device.client.platform_version, "jax": jax.__version__,
            "jaxlib": jaxlib.__version__}


def _cache_entries(cache: Path) -> dict[str, int]:
    """{key: last use in ns} of the entries of JAX's persistent cache in `cache` (each a `<key>-cache` file and
    a `<key>-atime` file that JAX rewrites at every use)."""
    entries = {}
    for path in cache.glob("*-cache"):
        key = path.name[:-len("-cache")]
        atime = cache / f"{key}-atime"
        entries[key] = int.from_bytes(atime.read_bytes(), "little") if atime.is_file() else 0
    return entries


def cache_out(cache: Path, tar: Path, since: float, limit: int = RETURN_FILE_BYTES) -> str:
    """Writes to `tar` the entries of JAX's cache in `cache` used (compiled or loaded) since `since` (seconds
    since the epoch), with what they were compiled on, newest first while the tar stays within `limit` bytes
    (what one returned file may hold)."""
    import io
    import tarfile
    used = {k: t for k, t in _cache_entries(cache).items() if t >= since * 1e9}
    if not used:
        return f"no compiled steps used since the call began in {cache}: nothing to keep"
    meta = dict(_compiled_on(), written=_now())
    taken, size = [], 2 ** 12
    for key in sorted(used, key=used.get, reverse=True):
        entry = sum((cache / f"{key}-{part}").stat().st_size + 1024 for part in ("cache", "atime"))
        if size + entry <= limit:
            taken.append(key)
            size += entry
    meta.update(entries=len(taken), left_out=len(used) - len(taken))
    tar.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(tar) as tmp, tarfile.open(tmp, "w") as out:
        data = (json.dumps(meta, indent=1) + "\n").encode()
        info = tarfile.TarInfo(CACHE_META)
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))
        for key in taken:
            for part in ("cache", "atime"):
                out.add(cache / f"{key}-{part}", arcname=f"{key}-{part}")
    left = f"; {meta['left_out']} older ones left out (over {limit / 2 ** 20:.0f} MiB)" if meta["left_out"] else ""
    return (f"kept {len(taken)} compiled steps in {tar} ({tar.stat().st_size / 2 ** 20:.1f} MiB, "
            f"{meta['device']}, jax {meta['jax']}){left}")


def cache_in(tar: Path, cache: Path) -> str:
    """Puts into `cache` the compiled steps a previous GPU call kept in `tar` (cache_out), when this machine is
    what they were compiled on; otherwise leaves them and says why (the call then compiles, as without)."""
    import tarfile
    try:
        with tarfile.open(tar) as source:
            meta = json.loads(source.extractfile(CACHE_META).read())
            here = _compiled_on()
            differ = [f"{k} {meta.get(k)!r} there, {v!r} here" for k, v in here.items() if meta.get(k) != v]
            if differ:
                return f"{tar}: not used, compiled elsewhere ({'; '.join(differ)})"
            cache.mkdir(parents=True, exist_ok=True)
            members = [m for m in source.getmembers() if m.name != CACHE_META and m.isfile()
                       and "/" not in m.name and m.name.endswith(("-cache", "-atime"))]
            new = [m for m in members if not (cache / m.name).exists()]
            source.extractall(cache, members=new, filter="data")
    except (tarfile.TarError, KeyError, json.JSONDecodeError, OSError) as e:
        raise WindowError(f"{tar} is not what cache-out writes: {e}") from e
    steps = sum(m.name.endswith("-cache") for m in new)
    return (f"{tar}: {steps} compiled steps put into {cache} (compiled on {meta['device']}, "
            f"written {meta['written']})")


def shipped_name(dest: Path) -> str:
    """The card's name for a checkpoint shipped to `dest`: its folder's, but in a group folder (checkpoints/paper)
    the group put in after the dataset, cifar10-vanilla -> cifar10-paper-vanilla, as the study names its models
    (cifar10-1000-vanilla), so that it never reads like the shipped model of the same folder name."""
    from explorer.checkpoints.catalog import PAPER
    dataset, _, rest = dest.name.partition("-")
    return f"{dataset}-{PAPER}-{rest}" if dest.parent.name == PAPER and rest else dest.name


def _shipped_to(state: Path) -> str:
    path = state / SHIPPED
    return f", shipped as {json.loads(path.read_text())['checkpoint']}" if path.is_file() else ""


def ship(state: Path, dest: Path, data_dir: str | None) -> str:
    """The finished run in `state` as a checkpoint at `dest` (which must not exist): its windows on the card,
    its test metrics measured here on the whole test split, lean; all or nothing. The state folder then keeps
    its windows' log and where the checkpoint went (`shipped.json`), not a second copy of the weights."""
    from explorer.analysis.evaluate import evaluate
    from explorer.checkpoints.store import make_lean, update_card
    if (state / SHIPPED).is_file():
        raise WindowError(f"{state} is done{_shipped_to(state)}")
    if not (state / "checkpoint").is_dir():
        last = json.loads(_windows(state)[-1]) if _windows(state) else {}
        raise WindowError(f"{state} holds no finished checkpoint yet"
                          + (f": {last['epochs_after']} of {last['planned_epochs']} epochs" if last else ""))
    if dest.exists():
        raise WindowError(f"{dest} exists: ship to a new name, or remove it first")
    keys = ("window", "device", "started", "epochs_before", "epochs_after", "images_per_second", "wall_s")
    windows = [{k: record.get(k) for k in keys} for record in map(json.loads, _windows(state))]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(dest) as tmp:
        join_files(state / "checkpoint", tmp)
        update_card(tmp, training={"windows": windows}, name=shipped_name(dest))
        make_lean(tmp)
        result = evaluate([str(tmp)], data_dir=data_dir, store=True, flip=True)[0]
    metrics = result.metrics
    atomic.write_text(state / SHIPPED, json.dumps({"checkpoint": dest.as_posix(), "shipped": _now(),
                                                   "test_top1": metrics.top1}, indent=1) + "\n")
    shutil.rmtree(state / "checkpoint")
    return (f"{dest}: test top-1 {100 * metrics.top1:.2f} % on {len(result.dataset.y_test):,} test images, "
            f"{len(windows)} windows on its card")


def main(argv=None) -> int:
    started = time.perf_counter()
    argv = list(sys.argv[1:] if argv is None else argv)
    from explorer.checkpoints.store import CheckpointError
    from explorer.data.datasets import DatasetError
    from explorer.training.backup import BackupError
    try:
        if argv[:1] == ["collect"]:
            if len(argv) != 3:
                raise WindowError("usage: python tools/window.py collect RETURNED STATE")
            print(collect(Path(argv[1]), Path(argv[2])), flush=True)
            return 0
        if argv[:1] == ["cache-out"]:
            p = argparse.ArgumentParser(prog="python tools/window.py cache-out",
                                        description="the compiled steps this call used, to keep for the next GPU")
            p.add_argument("cache", type=Path, help="JAX's persistent compilation cache (runs/jax-cache)")
            p.add_argument("tar", type=Path, help="the file to write ($OUT/jax-cache.tar)")
            p.add_argument("--since", type=float, required=True, metavar="EPOCH_S",
                           help="keep the entries used from then on (the call's start, date +%%s)")
            keeping = p.parse_args(argv[1:])
            print(cache_out(keeping.cache, keeping.tar, keeping.since), flush=True)
            return 0
        if argv[:1] == ["profile"]:
            if len(argv) != 2:
                raise WindowError("usage: python tools/window.py profile TRACE.json.gz")
            print(profile_summary(Path(argv[1])), flush=True)
            return 0
        if argv[:1] == ["cache-in"]:
            if len(argv) != 3:
                raise WindowError("usage: python tools/window.py cache-in TAR CACHE")
            print(cache_in(Path(argv[1]), Path(argv[2])), flush=True)
            return 0
        if argv[:1] == ["ship"]:
            p = argparse.ArgumentParser(prog="python tools/window.py ship",
                                        description="a finished window run as a shipped checkpoint")
            p.add_argument("state", type=Path, help="the run's state folder, its checkpoint collected")
            p.add_argument("dest", type=Path, help="the new checkpoint folder, e.g. checkpoints/paper/cifar10-vanilla")
            p.add_argument("--data-dir", help="a CIFAR folder (the test split it is evaluated on)")
            shipping = p.parse_args(argv[1:])
            print(ship(shipping.state, shipping.dest, shipping.data_dir), flush=True)
            return 0
        args, train_argv = _parse(argv)
        record = run_window(args, train_argv, started)
    except (WindowError, BackupError, CheckpointError, DatasetError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    state = "finished: the checkpoint" if record["finished"] else "stopped in time: the backup"
    print(f"window {record['window']}: epochs {record['epochs_before']} -> {record['epochs_after']} of "
          f"{record['planned_epochs']} at {record['images_per_second']} images/s on {record['device']}; {state} "
          f"and the log are in {args.out} ({record['returned']['files']} files, "
          f"{record['returned']['bytes'] / 2 ** 20:.1f} MiB); {record['wall_s']} s of {args.budget:g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
