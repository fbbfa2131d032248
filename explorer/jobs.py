"""A fine-tuning job, without the app: a request validated into a plan (data split once, one recipe, one or
two models), the plan run in a worker process, and the side-by-side report of its results.

The worker (`python -m explorer.jobs JOB_DIR`, started by runner.FineTuneRunner) has a Keras
backend of its own: JAX on a CUDA GPU when the GPU requirements are installed, else the app's. It reads
the plan and the split images from JOB_DIR, writes its checkpoints under JOB_DIR/staging, and reports
progress as JSON lines on its standard output; the runner moves the checkpoints into place only once the
whole job has succeeded, so a cancelled or crashed job leaves nothing behind.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from explorer.config import PRESETS, VARIANTS
from explorer.data import Dataset
from explorer.formatting import pct
from explorer.settings import Settings

BACKENDS = ("tensorflow", "jax", "torch")
ZIP = "zip of class folders"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class JobError(ValueError):
    """A fine-tuning request that cannot run; the message says which field and why."""


@dataclass(frozen=True)
class Limits:
    """What a run may ask for (a public Space caps these: EXPLORER_MAX_EPOCHS, _IMAGES, _ZIP_MB)."""

    max_epochs: int = Settings.max_epochs
    max_images: int = Settings.max_images
    max_zip_mb: int = Settings.max_zip_mb

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(settings.max_epochs, settings.max_images, settings.max_zip_mb)


@dataclass
class Member:
    """One model of a job: the slot it came from ("A", "B" or ""), its base checkpoint folder (None: a
    new model of `preset`/`variant`), and the name of the checkpoint it will be saved as."""

    tag: str
    base: str | None
    name: str
    label: str
    preset: str | None = None
    variant: str | None = None
    classes: list = field(default_factory=list)  # the base's class names


@dataclass
class Plan:
    """A validated job: every member trains on `dataset` (split once) with the same recipe."""

    members: list[Member]
    dataset: Dataset
    recipe: dict  # fine_tune_recipe / TrainConfig overrides: epochs, batch_size, learning_rate, freeze
    description: str
    scratch: bool = False

    def to_json(self) -> dict:
        return {"members": [m.__dict__ for m in self.members], "recipe": self.recipe, "scratch": self.scratch,
                "dataset": {"name": self.dataset.name, "class_names": list(self.dataset.class_names),
                            "source": self.dataset.source, "note": self.dataset.note},
                "description": self.description}


def check_number(name: str, value, low, high, integer: bool = True, auto: bool = False):
    """`value` as an int (or float) within [low, high]; with `auto`, None or 0 means "the recipe decides"."""
    if auto and (value is None or value == 0):
        return None
    if value is None:
        raise JobError(f"{name} is missing")
    if integer and float(value) != int(value):
        raise JobError(f"{name} must be a whole number, got {value}")
    if not low <= value <= high:
        raise JobError(f"{name} must be between {low} and {high}" + (" (0 = auto)" if auto else "")
                       + f", got {value}")
    return int(value) if integer else float(value)


def plan_job(members: list[tuple[str, str, str, dict]], dataset: Dataset, epochs=None, learning_rate=None,
             batch_size=None, images=None, freeze: bool = False, name: str | None = None,
             limits: Limits = Limits(), scratch: tuple[str, str] | None = None, train_on_all: bool = False) -> Plan:
    """Validates a request into a plan.

    `members`: (tag, label, checkpoint folder, card) of each base model, one or two; empty with `scratch`
    = (preset, variant) for a new model. `dataset` is the whole data (train and test). `images` caps the
    training images (and the test images at a fifth of it); epochs, learning rate and batch size of None
    or 0 leave them to the default recipe. A held-out test part too small to judge the models by is
    refused before anything trains, unless `train_on_all` (the dataset then has no test images, and the
    run no test score).
    """
    epochs = check_number("epochs", epochs, 1, limits.max_epochs, auto=True)
    learning_rate = check_number("learning rate", learning_rate, 1e-6, 1.0, integer=False, auto=True)
    batch_size = check_number("batch size", batch_size, 1, 1024, auto=True)
    images = check_number("images", images, 2, limits.max_images, auto=True)
    if name and not _NAME.match(name):
        raise JobError("the run name may hold letters, digits, '.', '_' and '-' only (at most 64)")
    if scratch is not None:
        preset, variant = scratch
        if preset not in PRESETS or variant not in VARIANTS:
            raise JobError(f"choose a preset from {sorted(PRESETS)} and a variant from {list(VARIANTS)}")
        size = PRESETS[preset].image_size
        planned = [Member("", None, name or f"{dataset.name}-{variant}", f"{variant} {preset} (new)", preset,
                          variant)]
    else:
        if not 1 <= len(members) <= 2:
            raise JobError("a fine-tune takes one or two base models")
        sizes = {int(card.config["image_size"]) for _, _, _, card in members}
        if len(sizes) != 1:
            raise JobError(f"the two models take different image sizes {sorted(sizes)}; they cannot share "
                           f"one split")
        size = sizes.pop()
        planned = []
        for tag, label, folder, card in members:
            base_name = card.name or Path(folder).name
            suffix = f"-{tag}" if len(members) == 2 and name else ""
            planned.append(Member(tag, str(folder), (name + suffix) if name else f"{base_name}-ft-{dataset.name}",
                                  label, classes=list(card.class_names or [])))
        if len(planned) == 2 and planned[0].name == planned[1].name:
            planned[0].name, planned[1].name = f"{planned[0].name}-A", f"{planned[1].name}-B"
    if dataset.x_train.shape[1:3] != (size, size):
        raise JobError(f"the images are {dataset.x_train.shape[1]}x{dataset.x_train.shape[2]} but the "
                       f"model takes {size}x{size}")
    if images is not None:
        dataset = dataset.subset(train=images, test=max(1, min(len(dataset.x_test), images // 5)), seed=0)
    if len(dataset.x_train) < 2 or len(set(dataset.y_train.tolist())) < 2:
        raise JobError(f"{dataset.name} has too few training images ({len(dataset.x_train)}) or classes "
                       f"to learn from")
    if not train_on_all:
        from explorer.folders import held_out_problem
        problem = held_out_problem(dataset)
        if problem:
            raise JobError(f"{problem} (tick “Train on all images”)")
    recipe = {"epochs": epochs, "learning_rate": learning_rate, "batch_size": batch_size,
              "freeze_backbone": bool(freeze)}
    what = " and ".join(m.label for m in planned)
    test = (f"{len(dataset.x_test)} test" if len(dataset.x_test) else "no test: all trained on, no test score")
    description = (f"{what} on {dataset.name} ({len(dataset.x_train)} train / {test} images, "
                   f"{dataset.num_classes} classes)")
    return Plan(planned, dataset, recipe, description, scratch=scratch is not None)


def job_data(source: str, zip_file, load_cifar, limits: Limits, image_size: int,
             train_on_all: bool = False) -> Dataset:
    """The data a job asks for: an uploaded zip of class folders (read within the limits, each class split
    80/20, or all for training with `train_on_all`) or a CIFAR dataset through `load_cifar(name)`."""
    if source == ZIP:
        if zip_file is None:
            raise JobError("upload a zip of class folders (one sub-folder of images per class)")
        from explorer.folders import read_image_zip
        return read_image_zip(zip_file, image_size=image_size, max_bytes=limits.max_zip_mb * 2**20,
                              max_files=limits.max_images * 2, test_fraction=0.0 if train_on_all else 0.2)
    if source in ("cifar10", "cifar100"):
        return load_cifar(source)
    raise JobError(f"unknown data source {source!r}; choose a zip of class folders, cifar10 or cifar100")


def recipe_for(plan_recipe: dict, n_images: int, scratch: bool, known_classes: bool = False):
    """The TrainConfig of a job's member: the default fine-tune recipe (or, for a new model, the keras.io
    recipe with as many steps) with the request's values on top. `known_classes`: the job's classes are all
    classes of the member's base."""
    import dataclasses

    from explorer.finetune import fine_tune_recipe
    from explorer.recipe import TrainConfig
    given = {k: v for k, v in plan_recipe.items() if v is not None}
    if scratch:
        given.pop("freeze_backbone", None)
        steps = fine_tune_recipe(n_images, **given)  # the same number of steps and batch size
        return dataclasses.replace(steps, learning_rate=given.get("learning_rate", TrainConfig.learning_rate),
                                   weight_decay=TrainConfig.weight_decay, keep_best=False)
    return fine_tune_recipe(n_images, known_classes=known_classes, **given)


# --- the job directory -----------------------------------------------------------------------------


def write_job(plan: Plan, job_dir: Path) -> None:
    job_dir.mkdir(parents=True)
    ds = plan.dataset
    np.savez(job_dir / "data.npz", x_train=ds.x_train, y_train=ds.y_train, x_test=ds.x_test, y_test=ds.y_test)
    (job_dir / "job.json").write_text(json.dumps(plan.to_json(), indent=1))


def read_job(job_dir: Path) -> tuple[dict, Dataset]:
    job = json.loads((job_dir / "job.json").read_text())
    with np.load(job_dir / "data.npz") as data:
        d = job["dataset"]
        ds = Dataset(d["name"], data["x_train"], data["y_train"], data["x_test"], data["y_test"],
                     d["class_names"], d.get("source", ""), d.get("note", ""))
    return job, ds


# --- choosing the worker's backend -----------------------------------------------------------------


def cuda_gpu_present(root: str | os.PathLike = "/") -> bool:
    """Whether an NVIDIA driver shows a GPU (without importing any framework): its files under `root`."""
    gpus = Path(root) / "proc" / "driver" / "nvidia" / "gpus"
    return (gpus.is_dir() and any(gpus.iterdir())) or (Path(root) / "dev" / "nvidia0").exists()


def _gpu_probe(settings: Settings) -> Callable[[], bool]:
    # EXPLORER_DRIVER_ROOT: where the driver's /proc and /dev are seen (a container may mount them elsewhere).
    return lambda: cuda_gpu_present(settings.driver_root)


def jax_cuda_installed(find_spec=importlib.util.find_spec) -> bool:
    return find_spec("jax") is not None and any(
        find_spec(name) is not None for name in ("jax_cuda12_plugin", "jax_cuda13_plugin"))


def jax_installed(find_spec=importlib.util.find_spec) -> bool:
    return find_spec("jax") is not None


def choose_backend(settings: Settings, gpu_present=None, jax_cuda=jax_cuda_installed,
                   jax_cpu=jax_installed) -> tuple[str, str]:
    """(Keras backend for the training worker, why). EXPLORER_TRAIN_BACKEND wins; else JAX when a CUDA GPU
    and JAX with CUDA are both there (the proven GPU route: TensorFlow's wheels here are CPU-only); else JAX
    on the CPU when it is installed (requirements.txt has its CPU wheel): its compiled steps persist on disk
    (JAX's compilation cache), so a new worker, after an app restart say, loads them instead of compiling
    (bench/finetune_speed.py); else the app's own backend (KERAS_BACKEND)."""
    gpu_present = gpu_present or _gpu_probe(settings)
    wanted = settings.train_backend
    if wanted:
        if wanted not in BACKENDS:
            raise JobError(f"EXPLORER_TRAIN_BACKEND={wanted!r} is not one of {BACKENDS}")
        return wanted, "EXPLORER_TRAIN_BACKEND"
    app_backend = settings.keras_backend
    if gpu_present():
        if jax_cuda():
            return "jax", "CUDA GPU with JAX"
        return app_backend, "a CUDA GPU is there, but JAX with CUDA is not installed (requirements-gpu.txt)"
    if jax_cpu():
        return "jax", "no GPU; JAX on the CPU, with its compilation cache"
    return app_backend, "no GPU"


# --- the worker ------------------------------------------------------------------------------------



def hardware_note(settings: Settings, gpu_present=None, jax_cuda=jax_cuda_installed) -> str:
    """Where fine-tuning runs will train, as the Fine-tune tab says it: on a GPU or not, and when a GPU would
    sit idle, exactly what to change; on a Space without one, what duplicating it buys."""
    gpu_present = gpu_present or _gpu_probe(settings)
    try:
        backend, reason = choose_backend(settings, gpu_present, jax_cuda)
    except JobError as e:
        return f"⚠ {e}"
    space = bool(settings.space_id)
    gpu = gpu_present()
    switch = ("replace this Space's `requirements.txt` with the repository's `requirements-gpu.txt` (the same "
              "packages plus JAX with CUDA 12) and let the Space rebuild" if space else
              "`pip install -r requirements-gpu.txt` (JAX with CUDA 12) and restart the app")
    if gpu and backend == "jax" and jax_cuda():
        return "Runs train on this machine's **GPU** (a worker process on Keras' JAX backend with CUDA)."
    if gpu and reason == "EXPLORER_TRAIN_BACKEND":
        return (f"This machine has an NVIDIA GPU; `EXPLORER_TRAIN_BACKEND={backend}` sends runs to Keras' {backend} "
                f"backend{', which trains on the GPU when it has CUDA' if backend != 'tensorflow' else ' on the CPU'}.")
    if gpu:
        return (f"⚠ **This machine has an NVIDIA GPU, but runs will train on its CPU**: JAX with CUDA is not "
                f"installed. To train on the GPU, {switch}.")
    if space:
        return ("Runs train on this Space's **CPU**, shared by its visitors. **Duplicate the Space** for a copy of "
                "your own: no queue and no shared limits; on GPU hardware (Settings → Space hardware, an NVIDIA "
                "T4 or L4) with `requirements-gpu.txt` as its `requirements.txt`, runs train on the GPU. ZeroGPU "
                "hardware does not help: it serves PyTorch only, and runs here train with Keras on JAX.")
    return (f"Runs train on this machine's **CPU** (Keras on {backend}); with an NVIDIA GPU, "
            "`pip install -r requirements-gpu.txt` and they train on it.")


def run_job(job_dir: Path, emit, warm=None, cancel=None) -> None:
    """Trains every member of the job in `job_dir` in turn, writing checkpoints to job_dir/staging and
    reporting each step through `emit(event)`. `warm` (finetune.WarmModels): a long-lived worker's models,
    reused with their compiled steps; `cancel` (a threading.Event) stops the job at the next step."""
    import keras

    from explorer.config import get_preset
    from explorer.devices import device_name
    from explorer.finetune import base_rows, fine_tune
    from explorer.fitting import Cancelled
    from explorer.train import train_new
    job, ds = read_job(job_dir)
    emit({"kind": "started", "device": device_name(), "backend": keras.backend.backend()})
    staging = job_dir / "staging"
    for i, m in enumerate(job["members"]):
        def progress(event, i=i):
            emit({**event, "member": i})

        if cancel is not None and cancel.is_set():
            raise Cancelled("training was cancelled; no checkpoint was written")
        began = time.perf_counter()
        known = base_rows(m.get("classes") or [], ds.class_names) is not None
        recipe = recipe_for(job["recipe"], len(ds.x_train), job["scratch"], known_classes=known)
        emit({"kind": "member", "member": i, "recipe": dict(recipe.__dict__)})
        if m["base"] is None:
            config = get_preset(m["preset"], variant=m["variant"])
            result = train_new(config, m["preset"], ds, recipe, staging, m["name"], verbose=0, progress=progress,
                               cancel=cancel)
        else:
            result = fine_tune(m["base"], ds, recipe, staging, m["name"], verbose=0, progress=progress, cancel=cancel,
                               warm=warm)
        emit({"kind": "member_done", "member": i, "folder": Path(result["checkpoint"]).name,
              "metrics": result["metrics"], "training": result["training"],
              "predictions": result["test_predictions"], "seconds": round(time.perf_counter() - began, 3)})
    emit({"kind": "done"})


def _exit_with_parent() -> None:
    """Ends this worker when the app that started it is gone (killed, or stopped without cancelling), so no
    orphan keeps training; its half-done job folder is then removed by the next run (checkpoints.clean_stale)."""
    import threading
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _event_stream():
    """(emit, lock): events go to the original standard output as JSON lines; anything else that prints goes
    to the log (stderr)."""
    import threading
    events = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    lock = threading.Lock()

    def emit(event: dict) -> None:
        line = json.dumps(event, default=float) + "\n"
        with lock:
            events.write(line)
            events.flush()

    return emit


def use_compile_cache(folder: str | None, max_mb: float) -> str | None:
    """Switches on JAX's persistent compilation cache in `folder` (every compiled step kept on disk, so the
    same step in a later process loads instead of compiling), bounded to `max_mb` by JAX's own LRU eviction.
    Returns the folder, or None when this is not JAX or no folder is given."""
    import keras
    if not folder or keras.backend.backend() != "jax":
        return None
    import jax
    Path(folder).mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", int(max_mb * 2**20))
    return str(folder)


class CompileCounter:
    """What the process compiled: on JAX, every XLA compilation (JAX's own monitoring events: a compile
    request the persistent cache answered is counted as a cache hit, not a compilation); elsewhere nothing
    is counted (None)."""

    def __init__(self):
        import keras
        self.compiles = self.cache_hits = None
        if keras.backend.backend() == "jax":
            from jax import monitoring
            self.compiles = self.cache_hits = 0
            monitoring.register_event_duration_secs_listener(self._duration)
            monitoring.register_event_listener(self._event)

    def _duration(self, event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            self.compiles += 1

    def _event(self, event, **kwargs):
        if event == "/jax/compilation_cache/cache_hits":
            self.cache_hits += 1

    def counts(self) -> tuple:
        """(compilations, cache hits) so far."""
        if self.compiles is None:
            return None, None
        return self.compiles - self.cache_hits, self.cache_hits


def serve(commands, emit, idle_s: float, cache_dir: str | None = None, cache_mb: float = 512.0,
          models: int = 4) -> int:
    """The long-lived worker: takes commands from `commands` (a queue of dicts; None when its input closed)
    and answers through `emit`, keeping Keras imported and the models it trained from (with their compiled
    steps) between jobs. Commands: {"kind": "job", "id", "dir"}, {"kind": "warm", "bases", "shapes"},
    {"kind": "ping", "id"}. Ends after `idle_s` without a command (its memory goes back) or when its input
    closes. It keeps up to `models` models; `cache_dir` holds at most `cache_mb` of compiled steps."""
    import queue

    began = time.perf_counter()
    import keras

    from explorer.devices import device_name
    from explorer.finetune import WarmModels
    from explorer.fitting import Cancelled
    use_compile_cache(cache_dir, cache_mb)
    counter = CompileCounter()
    warm = WarmModels(size=models)
    emit({"kind": "ready", "device": device_name(), "backend": keras.backend.backend(), "pid": os.getpid(),
          "imports_s": round(time.perf_counter() - began, 3)})
    while True:
        try:
            command = commands.get(timeout=idle_s)
        except queue.Empty:
            emit({"kind": "exit", "why": f"idle for {idle_s:g} s"})
            return 0
        if command is None:
            return 0
        kind = command.get("kind")
        if kind == "ping":
            emit({"kind": "pong", "id": command.get("id")})
        elif kind == "warm":
            began = time.perf_counter()
            try:
                warm_up(warm, command.get("bases") or [], command.get("shapes") or [])
                emit({"kind": "warmed", "seconds": round(time.perf_counter() - began, 3)})
            except Exception as e:  # noqa: BLE001  (a failed warm-up costs speed, never a run)
                emit({"kind": "warmed", "error": f"{type(e).__name__}: {e}"})
        elif kind == "job":
            job_id, cancel = command["id"], command["cancel"]
            compiles, hits = counter.counts()

            def tagged(event, job_id=job_id):
                emit({**event, "job": job_id})

            try:
                run_job(Path(command["dir"]), tagged, warm, cancel)
                outcome = "done"
            except Cancelled:
                outcome = "cancelled"
            except BaseException as e:  # whatever it is, the app hears it and the worker serves on
                tagged({"kind": "error", "error": f"{type(e).__name__}: {e}"})
                traceback.print_exc()
                outcome = "error"
            now = counter.counts()
            tagged({"kind": "job_end", "outcome": outcome, "loads": warm.loads,
                    "compiles": None if compiles is None else now[0] - compiles,
                    "cache_hits": None if hits is None else now[1] - hits})


def warm_up(warm, bases: list[str], shapes: list[dict]) -> None:
    """Compiles, before anyone asks, what a fine-tune of each of `bases` at each of `shapes` (number of
    classes, images) will run: a one-epoch run on random images, whose result is thrown away. On JAX with the
    compilation cache this loads from disk what an earlier process compiled."""
    import tempfile

    from explorer.checkpoints import read_card
    from explorer.data import Dataset
    from explorer.finetune import fine_tune
    for base in bases:
        card = read_card(base)
        size = int((card.config or {}).get("image_size", 32))
        for shape in shapes:
            n, classes = int(shape["images"]), int(shape["classes"])
            y = np.arange(n) % classes
            x = np.random.default_rng(0).integers(0, 255, (n, size, size, 3), dtype=np.uint8)
            ds = Dataset("warm-up", x, y, x[:max(1, n // 5)], y[:max(1, n // 5)], [f"c{i}" for i in range(classes)])
            recipe = recipe_for({"epochs": 1}, n, False)
            with tempfile.TemporaryDirectory() as out:
                fine_tune(base, ds, recipe, out, "warm-up", verbose=0, warm=warm)


def _read_commands(stream, commands, cancels: dict) -> None:
    """The worker's input: a "cancel" sets that job's event at once (the job stops at its next step); every
    other command waits in `commands` for the main loop. None when the input closes (the app is gone)."""
    for line in stream:
        try:
            command = json.loads(line)
        except ValueError:
            continue
        if command.get("kind") == "cancel":
            event = cancels.get(command.get("id"))
            if event is not None:
                event.set()
            continue
        if command.get("kind") == "job":
            import threading
            command["cancel"] = cancels.setdefault(command["id"], threading.Event())
        commands.put(command)
    commands.put(None)


def main(argv=None, settings: Settings | None = None) -> int:
    """The worker process; with --serve, its settings (default: its environment, which the runner sets)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--serve"]:
        settings = Settings.from_env() if settings is None else settings
        import queue
        import threading
        emit = _event_stream()
        _exit_with_parent()
        commands: queue.Queue = queue.Queue()
        threading.Thread(target=_read_commands, args=(sys.stdin, commands, {}), name="commands",
                         daemon=True).start()
        return serve(commands, emit, settings.worker_idle_s, settings.compile_cache, settings.compile_cache_mb,
                     settings.worker_models)
    if len(argv) != 1:
        print("usage: python -m explorer.jobs JOB_DIR   (one job, then exit)\n"
              "       python -m explorer.jobs --serve   (jobs as JSON lines on standard input)", file=sys.stderr)
        return 2
    emit = _event_stream()
    _exit_with_parent()
    try:
        run_job(Path(argv[0]), emit)
    except BaseException as e:  # whatever it is, the app hears it and keeps serving
        emit({"kind": "error", "error": f"{type(e).__name__}: {e}"})
        traceback.print_exc()
        return 1
    return 0


# --- the report ------------------------------------------------------------------------------------


@dataclass
class Report:
    """The side-by-side result of a finished job."""

    rows: list[list]                 # one per member: model, top-1, top-5, device, images/s, train time
    per_class: list[list]            # class, each member's top-1 (and B − A for a pair)
    disagree: list[int]              # test indices where the two members' predictions differ
    summary: str = ""
    columns: list[str] = field(default_factory=list)
    per_class_columns: list[str] = field(default_factory=list)


def report(members: list[dict], y_test: np.ndarray, class_names: list[str]) -> Report:
    """`members`: dicts with tag, label, metrics, training, predictions (a finished MemberState)."""
    rows = []
    for m in members:
        t, met = m.get("training") or {}, m.get("metrics") or {}
        rows.append([m["label"], pct(met.get("test_top1")), pct(met.get("test_top5")), t.get("device") or "–",
                     t.get("images_per_second") or "–", f"{t.get('wall_time_s', 0):.0f} s"])
    per_model = [(m.get("metrics") or {}).get("test_per_class") or [None] * len(class_names) for m in members]
    per_class = []
    for i, c in enumerate(class_names):
        row = [c] + [pct(p[i]) for p in per_model]
        if len(members) == 2:
            a, b = per_model[0][i], per_model[1][i]
            row.append("–" if a is None or b is None else f"{100 * (b - a):+.1f}")
        per_class.append(row)
    tags = [m.get("tag") or m["label"] for m in members]
    per_class_columns = ["class"] + [f"{t} top-1" for t in tags] + (["B − A (points)"] if len(members) == 2 else [])
    disagree: list[int] = []
    summary = ""
    if len(members) == 2 and all(m.get("predictions") is not None for m in members):
        pa, pb = (np.asarray(m["predictions"]) for m in members)
        y = np.asarray(y_test)
        diff = np.flatnonzero(pa != pb)
        disagree = diff.tolist()
        a, b = (m["label"] for m in members)
        summary = (f"On {len(y)} test images they disagree on **{len(diff)}**: {a} right on "
                   f"{int((pa[diff] == y[diff]).sum())}, {b} right on {int((pb[diff] == y[diff]).sum())}.")
    if len(y_test) == 0:
        summary = ("**No test score**: every image was used for training, as asked, so nothing is left to "
                   "judge the models on.")
    columns = ["model", "test top-1", "test top-5", "device", "images/s", "train time"]
    return Report(rows, per_class, disagree, summary, columns, per_class_columns)


if __name__ == "__main__":
    sys.exit(main())
