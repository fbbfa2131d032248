"""What the app does, without the app: a cache of loaded models, one-call analysis of an image by a
model pair, and a background fine-tuning runner. The UI and the benchmarks both call this module.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from explorer import plots, render
from explorer.checkpoints import CheckpointError, list_checkpoints, load_checkpoint
from explorer.config import ViTConfig
from explorer.probe import (TAU_FACTORS, Probe, ProbeResult, WhatIfProbe, attention_entropy,
                            mean_attention_distance, query_attention, rollout, rollout_map)


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    try:
        return int(value) if value else default
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


@dataclass
class LoadedModel:
    """A checkpoint in memory with its compiled probe."""

    ref: str
    model: object
    card: dict
    config: ViTConfig
    probe: Probe
    lock: threading.Lock = field(default_factory=threading.Lock)
    _what_if: WhatIfProbe | None = field(default=None, repr=False)

    def what_if_probe(self) -> WhatIfProbe:
        """The model's what-if probe, built on first use and kept (call it holding `lock`)."""
        if self._what_if is None:
            self._what_if = WhatIfProbe(self.probe)
        return self._what_if

    @property
    def name(self) -> str:
        return self.card.get("name") or Path(self.ref).name

    @property
    def class_names(self) -> list[str]:
        names = self.card.get("class_names") or []
        count = self.model.output_shape[-1]
        return list(names) if len(names) == count else [f"class {i}" for i in range(count)]

    @property
    def label(self) -> str:
        return f"{self.name} ({self.config.variant})"

    def summary(self) -> dict:
        metrics = self.card.get("metrics", {})
        return {"name": self.name, "variant": self.config.variant, "preset": self.card.get("preset"),
                "dataset": self.card.get("dataset", {}).get("name"),
                "classes": self.model.output_shape[-1], "parameters": int(self.model.count_params()),
                "test_top1": metrics.get("test_top1"), "test_top5": metrics.get("test_top5"),
                "epochs": self.card.get("training", {}).get("epochs"), "ref": self.ref,
                "tau_mode": self.config.tau_mode if self.config.use_lsa else None}


class ModelStore:
    """Loads checkpoints once (per reference) and keeps the most recently used ones in memory.

    A reference is a folder under `root` (relative or absolute) or a Hub id `owner/name[@revision]`.
    Loading is serialised per reference, so concurrent requests for the same model load it once.
    """

    def __init__(self, root: str | os.PathLike, capacity: int = 8, cache_dir: str | None = None,
                 max_hub_bytes: int | None = None):
        self.root = Path(root)
        self.capacity = capacity
        self.cache_dir = cache_dir
        self.max_hub_bytes = max_hub_bytes
        self._models: OrderedDict[str, LoadedModel] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    def choices(self) -> list[str]:
        """Every checkpoint under root, as references relative to it, newest runs last."""
        return [str(p.relative_to(self.root)) for p in list_checkpoints(self.root)]

    def key(self, ref: str) -> str:
        if not isinstance(ref, str) or not ref.strip():
            raise CheckpointError("no model chosen: pick a checkpoint or type a Hub id owner/name[@revision]")
        ref = ref.strip()
        local = self.root / ref
        if local.is_dir():
            return str(local.resolve())
        if Path(ref).is_absolute() and Path(ref).is_dir():
            return str(Path(ref).resolve())
        return ref

    def has(self, ref: str) -> bool:
        """Whether `ref` is loaded already."""
        with self._lock:
            return self.key(ref) in self._models

    def get(self, ref: str) -> LoadedModel:
        key = self.key(ref)
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in self._models:
                    return self._models[key]
            model, card = load_checkpoint(key, cache_dir=self.cache_dir, max_hub_bytes=self.max_hub_bytes)
            try:
                config = ViTConfig.from_dict(card["config"])
            except (KeyError, TypeError, ValueError) as e:
                raise CheckpointError(f"{ref}: its card has no valid model config ({e})") from None
            probe = Probe(model, config)
            probe(np.zeros((1, config.image_size, config.image_size, 3), np.uint8))  # compile now
            loaded = LoadedModel(ref.strip(), model, card, config, probe)
            with self._lock:
                self._models[key] = loaded
                while len(self._models) > self.capacity:
                    self._models.popitem(last=False)
                self._loading.pop(key, None)
            return loaded

    def members(self, slots: list[tuple[str, str | None]]) -> list[tuple[str, str, str, dict]]:
        """(tag, label, reference the worker loads, card) of each (tag, ref) to fine-tune."""
        out = []
        for tag, ref in slots:
            if not ref:
                raise CheckpointError(f"slot {tag} holds no model to fine-tune")
            lm = self.get(ref)
            out.append((tag, f"{tag}: {lm.name}" if tag else lm.name, self.key(ref), lm.card))
        return out

    def loaded(self) -> list[LoadedModel]:
        with self._lock:
            return list(self._models.values())


def what_if_setting(lm: LoadedModel, factor: float = 1.0, diagonal_mask: bool | None = None) -> tuple | None:
    """(factor, mask) when they change the model, None when they are its own (tau as learned, its mask).

    Raises ValueError for a factor outside TAU_FACTORS.
    """
    try:
        factor = float(factor)
    except (TypeError, ValueError):
        raise ValueError(f"the tau factor must be a number, got {factor!r}") from None
    low, high = TAU_FACTORS
    if not (np.isfinite(factor) and low <= factor <= high):
        raise ValueError(f"the tau factor must be between {low} and {high}, got {factor}")
    mask = lm.probe.diagonal_mask if diagonal_mask is None else bool(diagonal_mask)
    return None if factor == 1.0 and mask == lm.probe.diagonal_mask else (factor, mask)


class ResultCache:
    """Probe results per (model, image, what-if setting), so moving the query or the layer never reruns
    a model, and a what-if costs one forward pass per image and setting."""

    def __init__(self, capacity: int = 128):
        self.capacity = capacity
        self._items: OrderedDict[tuple, ProbeResult] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, lm: LoadedModel, image: np.ndarray, factor: float = 1.0,
            diagonal_mask: bool | None = None) -> tuple[ProbeResult, float, bool]:
        """(result, seconds the model took, whether it came from the cache).

        With the default factor and mask it is the learned model's probe; otherwise every layer's tau is
        multiplied by `factor` and the diagonal masked or not (None: as the model does), see WhatIfProbe.
        """
        setting = what_if_setting(lm, factor, diagonal_mask)
        key = (id(lm), hashlib.blake2b(np.ascontiguousarray(image).tobytes(), digest_size=16).digest(), setting)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key], 0.0, True
        start = time.perf_counter()
        with lm.lock:  # one call at a time per model; rendering happens outside
            result = lm.probe(image[None]) if setting is None else lm.what_if_probe()(image[None], *setting)
        elapsed = time.perf_counter() - start
        with self._lock:
            self._items[key] = result
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return result, elapsed, False


def top_k(lm: LoadedModel, result: ProbeResult, k: int = 5) -> dict[str, float]:
    probs = result.probabilities[0]
    order = np.argsort(-probs)[:k]
    names = lm.class_names
    return {names[i]: float(probs[i]) for i in order}


def query_patch(query_yx: tuple[float, float], config: ViTConfig) -> tuple[int, int]:
    """The (row, col) of the patch under pixel (y, x) of the model's raw input image."""
    y, x = query_yx
    grid = config.grid_size
    scale = grid / config.image_size
    row = int(np.clip(np.floor(float(y) * scale), 0, grid - 1))
    col = int(np.clip(np.floor(float(x) * scale), 0, grid - 1))
    return row, col


def square(image: np.ndarray, size: int) -> np.ndarray:
    """The image squashed to size x size, as the model sees it; small images keep their pixels sharp."""
    from PIL import Image
    small = max(image.shape[:2]) * 2 <= size
    return np.asarray(Image.fromarray(image).resize((size, size), Image.NEAREST if small else Image.BILINEAR))


HEAD_ALL, HEAD_MEAN = "all heads", "mean of heads"
PARTS = ("focus", "sheet", "rollout", "locality")


@dataclass
class AttentionView:
    """What the attention tab shows for one model and one image; parts not asked for stay None."""

    layer: int
    query: tuple[int, int]
    focus: np.ndarray | None = None      # the chosen layer/head(s) from the query patch, overlaid
    sheet: np.ndarray | None = None      # layer x head overview from the query patch
    rollout: np.ndarray | None = None    # cumulative rollout over all layers, averaged over queries
    distance: np.ndarray | None = None   # (layers, heads) mean attention distance, input pixels
    entropy: np.ndarray | None = None    # (layers, heads) nats


def focus_picture(lm: LoadedModel, attention: np.ndarray, shown: np.ndarray, layer: int, head: str,
                  query: tuple[int, int], size: int = 224) -> np.ndarray:
    """One layer's attention from the query patch: every head as a tile, their mean, or one head."""
    grid = lm.config.grid_size
    maps = query_attention(attention, layer, query[0] * grid + query[1], grid)
    if head == HEAD_ALL:
        # Tiles two to a row keep the picture nearly square, so each head stays legible in its box.
        return render.head_tiles(shown, maps, query=query, cell=size // 2,
                                 labels=[f"L{layer} head {j}" for j in range(len(maps))])
    if head == HEAD_MEAN:
        return render.attention_overlay(shown, maps.mean(0), query=query, size=size)
    try:
        index = int(str(head).split()[-1])
    except (ValueError, IndexError):
        raise ValueError(f"head must be {HEAD_ALL!r}, {HEAD_MEAN!r} or 'head <n>', got {head!r}") from None
    if not 0 <= index < maps.shape[0]:
        raise ValueError(f"{lm.name} has {maps.shape[0]} heads; there is no head {index}")
    return render.attention_overlay(shown, maps[index], query=query, size=size)


def attention_view(lm: LoadedModel, result: ProbeResult, display: np.ndarray, layer: int, head: str,
                   query_yx: tuple[float, float], size: int = 224, parts=PARTS) -> AttentionView:
    """Attention pictures and locality numbers of one model for one image (index 0 of `result`).

    `parts` picks what to compute: a query click needs only "focus" and "sheet", a layer or head change
    only "focus"; "rollout" and "locality" do not depend on the query.
    """
    config = lm.config
    grid = config.grid_size
    attention = result.attention[0]
    layer = int(np.clip(layer, 0, attention.shape[0] - 1))
    query = query_patch(query_yx, config)
    view = AttentionView(layer, query)
    if "focus" in parts:
        view.focus = focus_picture(lm, attention, display, layer, head, query, size)
    if "sheet" in parts:
        q = query[0] * grid + query[1]
        all_layers = attention[:, :, q, :].reshape(attention.shape[0], attention.shape[1], grid, grid)
        view.sheet = render.head_sheet(display, all_layers, query=query, cell=72)
    if "rollout" in parts:
        _, cumulative = rollout(attention)
        view.rollout = render.attention_overlay(display, rollout_map(cumulative[-1], grid), size=size)
    if "locality" in parts:
        view.distance = mean_attention_distance(attention, grid, config.pixels_per_patch)
        view.entropy = attention_entropy(attention)
    return view


def analyze_pair(models: list[LoadedModel], cache: ResultCache, image: np.ndarray, display: np.ndarray,
                 layer: int = 0, head: str = HEAD_ALL, query_yx=(16.0, 16.0), parts=PARTS) -> list[dict]:
    """The per-image analysis for each model: top-5, timings, attention pictures (`parts`), locality."""
    shown = square(display, 224)
    out = []
    for lm in models:
        result, seconds, cached = cache.get(lm, image)
        out.append({"model": lm, "result": result, "top5": top_k(lm, result), "seconds": seconds,
                    "cached": cached, "view": attention_view(lm, result, shown, layer, head, query_yx,
                                                             parts=parts)})
    return out


PICTURES = ("focus", "sheet", "rollout")


def picture_title(tag: str, lm: LoadedModel) -> str:
    """The title drawn above a model's half of a side-by-side picture. Two spaces after the colon: the
    pictures' small font sets a colon right against a single space."""
    return f"model {tag}:  {lm.label}"


def side_by_side_pictures(analysis: list[dict], parts=PICTURES, tags: str = "AB") -> dict[str, np.ndarray]:
    """Each attention picture in `parts` of every analysed model in one picture, A's left of B's, each
    under "model A: name (variant)": a click then sends one file per kind of picture, not one per model."""
    return {part: render.side_by_side([getattr(a["view"], part) for a in analysis],
                                      [picture_title(tag, a["model"]) for tag, a in zip(tags, analysis)])
            for part in PICTURES if part in parts}


@dataclass
class WhatIf:
    """One model's learned outputs beside those with its tau scaled and its diagonal mask switched."""

    model: LoadedModel
    factor: float
    diagonal_mask: bool       # the mask in the what-if
    layer: int
    query: tuple[int, int]
    top5: dict                # learned
    top5_what_if: dict
    maps: np.ndarray          # picture: the layer's heads from the query patch, learned row over what-if row
    entropy: np.ndarray       # (2, layers, heads): learned, what-if
    distance: np.ndarray      # (2, layers, heads)
    seconds: float            # the what-if forward pass (0 when cached)


def what_if(lm: LoadedModel, cache: ResultCache, image: np.ndarray, display: np.ndarray, factor: float = 1.0,
            diagonal_mask: bool | None = None, layer: int = 0, query_yx=(16.0, 16.0)) -> WhatIf:
    """The learned model against the same weights with every tau times `factor` and the diagonal mask on
    or off (None: as learned), on one image: top-5, maps from the query patch, entropy and distance.

    The shared model is never changed; a new setting costs one forward pass, then comes from `cache`.
    """
    setting = what_if_setting(lm, factor, diagonal_mask) or (float(factor), lm.probe.diagonal_mask)
    learned = cache.get(lm, image)[0]
    changed, seconds, _ = cache.get(lm, image, *setting)
    config = lm.config
    grid = config.grid_size
    layer = int(np.clip(layer, 0, config.num_layers - 1))
    row, col = query_patch(query_yx, config)
    both = np.stack([learned.attention[0], changed.attention[0]])
    maps = both[:, layer, :, row * grid + col, :].reshape(2, -1, grid, grid)
    picture = render.head_sheet(square(display, 224), maps, query=(row, col), cell=96,
                                row_labels=["learned", "what if"],
                                col_labels=[f"L{layer} head {j}" for j in range(maps.shape[1])])
    return WhatIf(lm, setting[0], setting[1], layer, (row, col), top_k(lm, learned), top_k(lm, changed),
                  picture, np.stack([attention_entropy(a) for a in both]),
                  np.stack([mean_attention_distance(a, grid, config.pixels_per_patch) for a in both]), seconds)


class PlotCache:
    """Plots drawn once per content: matplotlib costs ~120 ms a figure, so a what-if asked again (by any
    session) reuses the pixels of the first drawing."""

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self._items: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes, draw) -> np.ndarray:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        picture = plots.figure_to_array(draw())
        picture.setflags(write=False)
        with self._lock:
            self._items[key] = picture
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return picture


def what_if_plot(named: list[tuple[str, "WhatIf"]], cache: PlotCache) -> np.ndarray:
    """Entropy and mean attention distance per layer, learned against what-if, for each named what-if."""
    digest = hashlib.blake2b(digest_size=16)
    for name, w in named:
        digest.update(name.encode() + b"\0" + np.ascontiguousarray(w.entropy).tobytes()
                      + np.ascontiguousarray(w.distance).tobytes())
    return cache.get(digest.digest(), lambda: plots.plot_what_if({n: tuple(w.entropy) for n, w in named},
                                                                  {n: tuple(w.distance) for n, w in named}))


# --- fine-tuning in a worker process ---------------------------------------------------------------


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

    @property
    def elapsed(self) -> float:
        return (self.ended or time.time()) - self.started if self.started else 0.0


class FineTuneRunner:
    """One fine-tuning job at a time, in a worker process (`python -m explorer.finetune`) with a Keras
    backend of its own; its progress is read with `snapshot()`.

    The worker writes its checkpoints into a hidden job folder under `out_dir`; they are moved into
    `out_dir` only when every member has finished, so a cancelled (killed at once) or crashed run leaves
    no checkpoint, and never a partial one.

    Each run has an `owner` (None for the single-user tool): only the owner's Cancel ends it. With
    `max_queue`, a Start that finds a run going on may `join` a first-come queue of that many and start
    when its ticket comes first (`ready`); a ticket its page stopped asking about for `stale_s` is dropped.
    `on_publish(folders, run_id, owner)` is called with a finished run's checkpoint folders. The worker
    runs at `priority` (EXPLORER_WORKER_PRIORITY): "idle" (the default: Linux's SCHED_IDLE, so it takes only
    the CPU the app leaves), a niceness ("10"), or "normal".
    """

    def __init__(self, out_dir: str | os.PathLike, environ: dict | None = None, max_queue: int = 0,
                 on_publish=None, stale_s: float = 30.0, priority: str | None = None):
        self.out_dir = Path(out_dir)
        self.priority = (os.environ.get("EXPLORER_WORKER_PRIORITY", "idle") if priority is None else priority).strip()
        if self.priority not in ("idle", "normal") and not self.priority.lstrip("-").isdigit():
            raise ValueError(f"EXPLORER_WORKER_PRIORITY={self.priority!r}: expected idle, normal or a niceness")
        self.environ = environ
        self.max_queue = max_queue
        self.on_publish = on_publish
        self.stale_s = stale_s
        self._lock = threading.Lock()
        self._state = RunState()
        self._proc = None
        self._thread: threading.Thread | None = None
        self._runs = 0
        self._queue: list[Ticket] = []
        self._tickets = 0
        self._durations: list[float] = []
        self._out = self.out_dir

    def _priority_prefix(self, which) -> list[str]:
        """What the worker's command starts with, so that serving comes first: every thread of it, from exec
        on, runs under SCHED_IDLE (only when the app leaves a core idle), or at a niceness."""
        if self.priority == "idle" and which("chrt"):
            return ["chrt", "--idle", "0"]
        nice = 19 if self.priority == "idle" else 0 if self.priority == "normal" else int(self.priority)
        return ["nice", "-n", str(nice)] if nice and which("nice") else []

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

    def start(self, plan, owner: str | None = None, out_dir: str | os.PathLike | None = None,
              ticket: Ticket | None = None) -> int:
        """Starts the job `plan` (a finetune.Plan) unless one is going on (or, with a `ticket`, unless it
        is not first in the queue); its checkpoints go to `out_dir` (default: the runner's). Returns
        the run id."""
        import shutil
        import subprocess
        import sys
        import uuid
        from explorer.checkpoints import clean_stale
        from explorer.finetune import choose_backend, write_job
        backend, reason = choose_backend(self.environ)
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
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            clean_stale(self.out_dir)
            job_dir = self.out_dir / f".tmp-{os.getpid()}-job-{uuid.uuid4().hex[:8]}"
            write_job(plan, job_dir)
            env = {**(os.environ if self.environ is None else self.environ), "KERAS_BACKEND": backend,
                   "PYTHONUNBUFFERED": "1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            log = open(job_dir / "worker.log", "wb")
            root = Path(__file__).resolve().parents[1]
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
            command = self._priority_prefix(shutil.which) + [sys.executable, "-m", "explorer.finetune",
                                                              str(job_dir)]
            proc = subprocess.Popen(command,
                                    stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env,
                                    cwd=str(root))
            log.close()
        except Exception as e:
            with self._lock:
                self._state.running, self._state.status = False, "failed"
                self._state.error = f"the training process could not start: {type(e).__name__}: {e}"
                self._state.ended = time.time()
            raise
        with self._lock:
            self._proc = proc
            self._thread = threading.Thread(target=self._follow, args=(proc, job_dir), name="fine-tune",
                                            daemon=True)
            self._thread.start()
            return self._state.run_id

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
            elif kind == "error":
                s.error = event["error"]

    def _follow(self, proc, job_dir: Path) -> None:
        import json
        import shutil
        done = False
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            done = done or event.get("kind") == "done"
            self._event(event)
        code = proc.wait()
        with self._lock:
            cancelled = self._state.status == "cancelled"
        try:
            if done and code == 0 and not cancelled:
                self._publish(job_dir)
                with self._lock:
                    self._durations = (self._durations + [self._state.elapsed])[-20:]
            elif not cancelled:
                with self._lock:
                    self._state.status = "failed"
                    self._state.error = self._state.error or self._crash_message(code, job_dir)
        except Exception as e:  # e.g. the disk filled up while moving: nothing is left half-moved
            with self._lock:
                self._state.status, self._state.error = "failed", f"{type(e).__name__}: {e}"
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
            with self._lock:
                self._state.running, self._state.ended = False, time.time()
                self._proc = None

    @staticmethod
    def _crash_message(code: int, job_dir: Path) -> str:
        try:
            tail = [line for line in (job_dir / "worker.log").read_text(errors="replace").splitlines()
                    if line.strip()][-3:]
        except OSError:
            tail = []
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
            for m, target in zip(self._state.members, moved):
                m.checkpoint = str(target)
            self._state.status = "done"

    def cancel(self, owner: str | None = None) -> bool:
        """Ends `owner`'s run at once (its process is killed); returns whether it did."""
        return self.cancel_as(owner) == "cancelled"

    def cancel_as(self, owner: str | None = None) -> str:
        """Cancel as `owner` asks it: "cancelled" (their run was going on: its process is killed at
        once), "left" (they were waiting in the queue), "not yours" (another owner's run is going on;
        nothing happens) or "none"."""
        with self._lock:
            mine = [t for t in self._queue if t.owner == owner and not t.cancelled]
            proc = self._proc if self._state.running else None
            if proc is not None and self._state.owner == owner:
                self._state.status = "cancelled"
            elif mine:
                for t in mine:
                    t.cancelled = True
                self._purge()
                return "left"
            else:
                return "not yours" if self._state.running else "none"
        proc.kill()
        return "cancelled"

    def wait(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def snapshot(self) -> RunState:
        import copy
        with self._lock:
            return copy.deepcopy(self._state)
