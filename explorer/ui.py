"""The Gradio app: two model slots and the Compare, Patches, Attention, Tau and Fine-tune tabs.

Handlers are plain methods of `Explorer` (unit-testable without a server); `build_demo` lays out the
Blocks and wires every event with an `api_name`, so each one is callable through gradio_client.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from pathlib import Path

import gradio as gr
import numpy as np
import pandas as pd

from explorer import hub, render
from explorer.checkpoints import CheckpointError
from explorer.config import PRESETS, VARIANTS, get_preset
from explorer.data import DatasetError, find_cifar, keras_cache_dir, load_cifar, load_test_set, sample_set
from explorer.finetune import ZIP, JobError, Limits, choose_backend, job_data, plan_job, report
from explorer.inputs import ImageInputError, load_image
from explorer.probe import tau_table
from explorer.shared import (FINETUNED, REFUSED, RunStore, SharedLimits, new_visitor_id, owner_key,
                             shared_mode)
from explorer.workbench import (HEAD_ALL, HEAD_MEAN, PARTS, Busy, FineTuneRunner, ModelStore, QueueFull, ResultCache,
                                PlotCache, analyze_pair, env_int, picture_title, query_patch, side_by_side_pictures,
                                square, top_k, what_if, what_if_plot)

PROJECT = Path(__file__).resolve().parents[1]
DEFAULT_A = "cifar10-vanilla"
DEFAULT_B = "cifar10-spt_lsa"
SCRATCH = "(a new model from scratch)"
PAIR = "A and B (the two slots)"
_SAMPLE_NAME = re.compile(r"^(cifar10|cifar100)-test-(\d+)-")
QUERY_PICKER = 224
CURVES_EVERY_S = 10.0
# The what-if's tau factors, sqrt(2) apart, and its diagonal-mask choices (None: as the model learned).
TAU_CHOICES = [("¼×", 0.25), ("0.35×", 0.35), ("½×", 0.5), ("0.71×", 0.71), ("1× (as learned)", 1.0),
               ("1.4×", 1.41), ("2×", 2.0), ("2.8×", 2.83), ("4×", 4.0)]
MASKS = {"as learned": None, "on": True, "off": False}
WHAT_IF_TEXT = ("LSA divides every layer's attention logits by a learned temperature τ and masks the diagonal, "
                "so no patch attends to itself; here you can scale τ (for a vanilla model, its fixed √d_k) and "
                "switch the mask on or off, on the same weights. A τ below √d_k (a factor below 1×) sharpens "
                "attention: entropy and mean distance fall and the maps from the query narrow to fewer "
                "patches; with the mask off, watch how much attention each patch keeps for itself and whether "
                "the top-5 moves.")


FINETUNE_HELP = """\
Fine-tunes **both slots' models on the same data, split and recipe** (one after the other), or one
checkpoint alone, in a separate training process ({where}); the new checkpoints go into the model slots,
so every tab then compares them. Upload a zip with one folder of images per class; it is split 80/20 into
training and held-out test images. **The default recipe** (every number at 0): the head starts where it can
already score (the base's own rows when your classes are among its classes, else a logistic regression
on the frozen features), then the whole model trains (AdamW, warmup + cosine, crop + flip; peak learning
rate 5e-4, or 1e-4 for classes the base knows) for up to 500 steps, with a batch size scaled to your
data, keeping the epoch that does best on a 10 % validation split (the starting head included). About
a minute per model for 1,000 images on 2 CPU cores. Limits here: {epochs} epochs, {images:,} images."""


def _fmt_pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _what_if_line(name: str, w) -> str:
    own = "on" if w.model.probe.diagonal_mask else "off"
    (top, p), (top_w, p_w) = next(iter(w.top5.items())), next(iter(w.top5_what_if.items()))
    timing = "cached" if w.seconds == 0 else f"{1000 * w.seconds:.0f} ms"
    return (f"**{name}** · τ × {w.factor:g}, diagonal mask {'on' if w.diagonal_mask else 'off'} (learned: {own}) · "
            f"top-1 **{top}** {_fmt_pct(p)} → **{top_w}** {_fmt_pct(p_w)} · mean entropy "
            f"{w.entropy[0].mean():.2f} → {w.entropy[1].mean():.2f} nats · mean distance "
            f"{w.distance[0].mean():.1f} → {w.distance[1].mean():.1f} px · what-if pass {timing}")


def default_data_dir() -> str | None:
    """$EXPLORER_DATA_DIR, else a `shared/data` folder beside the project (this repo's layout), else None:
    the bundled sample, the Keras cache and downloads on demand (explorer.data)."""
    if os.environ.get("EXPLORER_DATA_DIR"):
        return os.environ["EXPLORER_DATA_DIR"]
    beside = PROJECT.parent / "shared" / "data"
    return str(beside) if beside.is_dir() else None


class Explorer:
    """State shared by all sessions: the model cache, probe results, datasets and the fine-tune runner."""

    def __init__(self, root: str | os.PathLike | None = None, data_dir: str | None = None,
                 default_a: str = DEFAULT_A, default_b: str = DEFAULT_B, shared: bool | None = None):
        self.root = Path(root or os.environ.get("EXPLORER_CHECKPOINTS", PROJECT / "checkpoints"))
        self.data_dir = data_dir if data_dir is not None else default_data_dir()
        # Shared (a public Space): visitors own their runs and reach only what the app lists them.
        self.shared = shared_mode() if shared is None else shared
        self.shared_limits = SharedLimits.from_env()
        self.runs = RunStore(self.root, self.shared, self.shared_limits)
        hub_cache = str(self.root / ".hub-cache") if self.shared else None
        self.store = ModelStore(self.root, cache_dir=hub_cache,
                                max_hub_bytes=int(self.shared_limits.max_hub_mb * 1e6) if self.shared else None)
        self.cache = ResultCache()
        self.plots = PlotCache()
        self.runner = FineTuneRunner(self.root / FINETUNED,
                                     max_queue=self.shared_limits.max_queue if self.shared else 0,
                                     on_publish=self._published)
        self._visitors: dict[str, str] = {}        # session -> the visitor id its browser keeps
        self._in_use: dict[str, dict] = {}         # session -> {slot: ref}: never pruned while shown
        self._bases: dict[int, set[str]] = {}      # a run going on or waiting -> its bases' refs
        self._visit_lock = threading.Lock()
        self.downloads_dir = Path(tempfile.mkdtemp(prefix="explorer-downloads-"))
        self.default_a, self.default_b = default_a, default_b
        self.limits = Limits(max_epochs=env_int("EXPLORER_MAX_EPOCHS", 30),
                             max_images=env_int("EXPLORER_MAX_IMAGES", 50_000),
                             max_zip_mb=env_int("EXPLORER_MAX_ZIP_MB", 200))
        self.samples_dir = Path(tempfile.mkdtemp(prefix="explorer-samples-"))
        self._datasets: dict[str, object] = {}
        self._data_lock = threading.Lock()  # guards _datasets; held only for a look-up
        self._load_lock = threading.Lock()  # one load (or download) at a time
        self._decoded: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._decode_lock = threading.Lock()

    # --- models -----------------------------------------------------------------------------------

    # --- visitors (shared mode) ------------------------------------------------------------------

    def owner(self, request=None) -> str | None:
        """Whose runs a request may see: the hashed id its browser keeps (shared mode), else None. A
        session that never said its id (an API client that skipped /visitor) is a visitor of its own."""
        if not self.shared:
            return None
        session = getattr(request, "session_hash", None)
        with self._visit_lock:
            visitor = self._visitors.get(session) if session else None
        if visitor is None and session:
            visitor = f"session:{session}"
        return owner_key(visitor) if visitor else None

    def visit(self, browser_id, request: gr.Request = None):
        """A page opens: the visitor's id (a new one when the browser has none), and their model lists."""
        visitor = browser_id if isinstance(browser_id, str) and re.fullmatch(r"[A-Za-z0-9_-]{16,64}", browser_id) \
            else new_visitor_id()
        session = getattr(request, "session_hash", None)
        if session:
            with self._visit_lock:
                self._visitors[session] = visitor
        self.prune()
        choices = self.choices(request)
        return (visitor, gr.update(choices=choices), gr.update(choices=choices),
                gr.update(choices=[PAIR, SCRATCH] + choices), gr.update(choices=self.my_runs(request), value=None))

    def leave(self, request: gr.Request = None) -> None:
        """A page closed: its slots no longer keep runs from expiring."""
        session = getattr(request, "session_hash", None)
        with self._visit_lock:
            self._in_use.pop(session, None)
            self._visitors.pop(session, None)

    def browser_secret(self) -> str:
        """The key the visitor's id is encrypted with in their browser: $EXPLORER_BROWSER_SECRET, else one
        kept beside the checkpoints, so ids (and with them visitors' runs) survive a restart."""
        if os.environ.get("EXPLORER_BROWSER_SECRET"):
            return os.environ["EXPLORER_BROWSER_SECRET"]
        path = self.root / ".browser-secret"
        try:
            return path.read_text().strip()
        except OSError:
            secret = uuid.uuid4().hex
            try:
                tmp = path.with_name(f".tmp-{secret[:8]}-secret")
                tmp.write_text(secret)
                os.replace(tmp, path)
            except OSError:
                pass
            return secret

    def _protected(self) -> set[str]:
        with self._visit_lock:
            shown = {ref for slots in self._in_use.values() for ref in slots.values() if ref}
            return shown | {ref for refs in self._bases.values() for ref in refs}

    def prune(self, keep: set[str] = frozenset()) -> list[str]:
        """Removes expired and over-cap runs (shared mode), never one shown in a page or in use."""
        return self.runs.prune(self._protected() | set(keep))

    def _published(self, folders, run_id: str, owner: str | None) -> None:
        self.runs.mark_run(folders, run_id, owner)
        self.prune(keep={str(Path(f).relative_to(self.root)) for f in folders})

    def model(self, ref: str, request=None):
        """The loaded model of a reference the visitor may use (shared mode: listed to them, or a Hub id)."""
        ref = self.runs.check(ref, self.owner(request))
        fetched = self.shared and self.runs.is_hub(ref) and not self.store.has(ref)
        lm = self.store.get(ref)
        if fetched:  # a new Hub checkpoint came down: keep the app's Hub cache within its cap
            self._prune_hub(also=ref)
        return lm

    def _prune_hub(self, also: str) -> list[str]:
        def repo_folder(ref):
            repo_id, _ = hub.parse_ref(ref)
            return Path(self.store.cache_dir) / f"models--{repo_id.replace('/', '--')}"
        with self._visit_lock:
            shown = {r for slots in self._in_use.values() for r in slots.values() if r}
        keep = [repo_folder(r) for r in shown | {also} if self.runs.is_hub(r)]
        return hub.prune_cache(self.store.cache_dir, int(self.shared_limits.max_hub_cache_mb * 1e6), keep)

    def _safe(self, error) -> str:
        """An error's text for the page; in shared mode without the server's paths."""
        text = str(error)
        if not self.shared:
            return text
        text = text.replace(str(self.root.resolve()), "checkpoints").replace(str(self.root), "checkpoints")
        return re.sub(r"(?<![\w.])/(?:[^\s'\"/]+/)+([^\s'\"/]+)", r"\1", text)

    def choices(self, request=None) -> list[str]:
        return self.runs.listing(self.owner(request))

    def my_runs(self, request=None) -> list[str]:
        """The visitor's fine-tuned checkpoints (single user: all of them), newest last."""
        return [r for r in self.choices(request) if r.startswith(f"{FINETUNED}/")]

    def mine(self, request: gr.Request = None):
        """The visitor's fine-tuned checkpoints, the newest chosen (ready to download)."""
        runs = self.my_runs(request)
        newest = max(runs, key=lambda r: (self.root / r).stat().st_mtime, default=None)
        return gr.update(choices=runs, value=newest)

    def download(self, ref: str | None, request: gr.Request = None) -> str:
        """A zip of one of the visitor's fine-tuned checkpoints (`<name>/` and its files)."""
        if not ref or ref not in self.my_runs(request):
            raise gr.Error(REFUSED if ref else "choose one of your fine-tuned checkpoints first")
        try:
            return str(self.runs.zip_checkpoint(ref, self.owner(request), self.downloads_dir / uuid.uuid4().hex[:12]))
        except (CheckpointError, OSError) as e:
            raise gr.Error(self._safe(e)) from None

    def training_where(self) -> str:
        """Where a fine-tune will run, as the tab says it."""
        try:
            backend, reason = choose_backend(self.runner.environ)
        except JobError as e:
            return f"⚠ {e}"
        return f"Keras on {backend}; {reason}" if reason != "no GPU" else f"CPU, Keras on {backend}"

    def initial_refs(self) -> tuple[str | None, str | None]:
        choices = self.runs.listing(None)
        pick = lambda want, fallback: want if want in choices else (fallback if fallback in choices else None)
        a = pick(self.default_a, choices[0] if choices else None)
        b = pick(self.default_b, choices[-1] if choices else None)
        return a, b

    def preload(self) -> None:
        for ref in self.initial_refs():
            if ref:
                self.store.get(ref)

    def card_markdown(self, ref: str | None, error: str | None = None, request=None) -> str:
        lines = []
        if error:
            lines.append(f"**⚠ {error}**")
        if not ref:
            if not self.choices(request):
                where = "here" if self.shared else f"under `{self.root}`"
                lines.append(f"No checkpoints {where} yet. Train one with "
                             "`python -m explorer.train`, start a run in the Fine-tune tab, or type a Hub "
                             "id (`owner/name@revision`).")
            return "\n\n".join(lines)
        lm = self.model(ref, request)
        s = lm.summary()
        tau = f", tau per {s['tau_mode']}" if s["tau_mode"] else ""
        lines.append(f"**{s['name']}** · `{s['variant']}`{tau} · {s['dataset']} ({s['classes']} classes) · "
                     f"{s['parameters']:,} parameters · test top-1 **{_fmt_pct(s['test_top1'])}**, "
                     f"top-5 {_fmt_pct(s['test_top5'])}"
                     + (f" · {s['epochs']} epoch{'s' if s['epochs'] != 1 else ''}" if s["epochs"] else ""))
        return "\n\n".join(lines)

    def load_slot(self, ref: str, previous: str | None, request=None, slot: str = ""):
        """Loads `ref` into a slot; on failure the previous model stays, with the reason shown."""
        try:
            self.model(ref, request)
        except (CheckpointError, ValueError, OSError) as e:
            shown = previous if previous else None
            # A refused reference is not echoed: one message, whatever was typed.
            shown_ref = f"{ref!r}" if len(str(ref)) <= 120 and REFUSED not in str(e) else "that reference"
            return shown, shown, self.card_markdown(shown, error=f"could not load {shown_ref}: {self._safe(e)}",
                                                    request=request)
        session = getattr(request, "session_hash", None)
        if session:
            with self._visit_lock:
                self._in_use.setdefault(session, {})[slot] = ref
        return ref, ref, self.card_markdown(ref, request=request)

    def refresh(self, a: str | None, b: str | None, request: gr.Request = None):
        choices = self.choices(request)
        return (gr.update(choices=choices, value=a), gr.update(choices=choices, value=b),
                gr.update(choices=[PAIR, SCRATCH] + choices))

    def _pair(self, a: str, b: str, request=None):
        try:
            return self.model(a, request), self.model(b, request)
        except (CheckpointError, ValueError, OSError) as e:
            raise gr.Error(f"model not available: {self._safe(e)}") from None

    # --- images -----------------------------------------------------------------------------------

    def decode(self, file) -> tuple[np.ndarray, np.ndarray]:
        """(model input, preview) of an image file, decoded once: an upload fires five handlers."""
        stat = os.stat(file) if os.path.exists(file) else None
        key = (str(file), stat.st_mtime_ns if stat else 0, stat.st_size if stat else -1)
        with self._decode_lock:
            if key in self._decoded:
                self._decoded.move_to_end(key)
                return self._decoded[key]
        image, preview = load_image(file)
        image.setflags(write=False)  # shared between sessions
        preview.setflags(write=False)
        with self._decode_lock:
            self._decoded[key] = (image, preview)
            while len(self._decoded) > 32:
                self._decoded.popitem(last=False)
        return image, preview

    def _image(self, file) -> tuple[np.ndarray, np.ndarray]:
        if file is None:
            raise gr.Error("No image yet: upload one or take a sample from the test set.")
        try:
            return self.decode(file)
        except ImageInputError as e:
            raise gr.Error(str(e)) from None

    def take_image(self, file):
        """Preview of an upload (or a clear reason why it cannot be used)."""
        if file is None:
            return None, ""
        try:
            _, preview = self.decode(file)
        except ImageInputError as e:
            return None, f"**⚠ {e}**"
        return (square(preview, 224) if max(preview.shape[:2]) * 2 <= 224 else preview), ""

    def dataset(self, name: str, need: int = 1, progress=None, download: bool = True):
        """`name`'s test images, at least `need` of them when the data has that many: a CIFAR folder, else
        the bundled sample, else the full data downloaded once (explorer.data.load_test_set), kept for
        every session. May have no training split: for training, see `training_data`."""
        def cached():
            with self._data_lock:
                ds = self._datasets.get(name)
            return ds if ds is not None and (not ds.sample or len(ds.x_test) >= need) else None

        if (ds := cached()) is not None:
            return ds
        with self._load_lock:
            if (ds := cached()) is not None:  # another session loaded it meanwhile
                return ds
            ds = load_test_set(name, self.data_dir, need, download=download, progress=progress)
            with self._data_lock:
                self._datasets[name] = ds
            return ds

    def training_data(self, name: str, progress=None):
        """The full `name` (both splits): a CIFAR folder, else downloaded once into the Keras cache
        (`progress(fraction or None, message)` follows it); offline, a DatasetError saying what to do."""
        ds = self.dataset(name, progress=progress)
        if not ds.sample:
            return ds
        with self._load_lock:
            full = load_cifar(name, self.data_dir, download=True, progress=progress)
            with self._data_lock:
                self._datasets[name] = full
            return full

    def data_note(self) -> str:
        """Where the test images come from, for the page."""
        folder = find_cifar("cifar10", self.data_dir)
        if folder is not None:
            return f"_Test samples: CIFAR-10 from `{folder if not self.shared else folder.name}`._"
        n = len(sample_set().x_test)
        return (f"_Test samples come from the **{n:,} CIFAR-10 test images bundled with the app** (the first "
                f"{n:,} of the test set; pixels decoded from a public JPEG copy of CIFAR-10, mean absolute "
                f"error 5.8/255 against the originals). More (over {n:,} images, CIFAR-100, training) is "
                f"downloaded once into `{keras_cache_dir() if not self.shared else '~/.keras/datasets'}`._")

    def sample_dataset_name(self, ref_b: str | None, request=None) -> str:
        try:
            name = self.model(ref_b, request).card.get("dataset", {}).get("name") if ref_b else None
        except (CheckpointError, ValueError, OSError):
            name = None
        return name if name in ("cifar10", "cifar100") else "cifar10"

    def sample(self, class_name: str, ref_b: str | None, seed: float | None = None, request: gr.Request = None,
               progress=gr.Progress()):
        """A test image (random, or of one class) saved as PNG, its preview and its true label."""
        from PIL import Image
        name = self.sample_dataset_name(ref_b, request)
        try:
            ds = self.dataset(name, progress=_reporter(progress))
        except DatasetError as e:
            raise gr.Error(f"no {name} test samples: {e}") from None
        rng = np.random.default_rng(None if seed is None or seed < 0 else int(seed))
        if class_name and class_name != "random":
            if class_name not in ds.class_names:
                raise gr.Error(f"{class_name!r} is not a {name} class")
            candidates = np.flatnonzero(ds.y_test == ds.class_names.index(class_name))
        else:
            candidates = np.arange(len(ds.y_test))
        index = int(rng.choice(candidates))
        label = ds.class_names[ds.y_test[index]]
        path = self.samples_dir / f"{name}-test-{index:05d}-{label}.png"
        if not path.exists():  # written under a temporary name: concurrent samplers never see half a file
            tmp = path.with_name(f".{threading.get_ident()}-{path.name}")
            Image.fromarray(ds.x_test[index]).save(tmp, format="PNG")
            os.replace(tmp, path)
        return str(path), square(ds.x_test[index], 224), f"True label: **{label}** ({name} test image #{index})"

    def true_label(self, file) -> str | None:
        match = _SAMPLE_NAME.match(Path(str(file)).name)
        if not match:
            return None
        try:  # a file named like a sample from the full test set, with only the bundled sample here: no label
            ds = self.dataset(match.group(1), need=int(match.group(2)) + 1, download=False)
            return ds.class_names[ds.y_test[int(match.group(2))]]
        except (DatasetError, IndexError):
            return None

    # --- compare ----------------------------------------------------------------------------------

    def compare(self, file, ref_a: str, ref_b: str, request: gr.Request = None):
        image, _ = self._image(file)
        a, b = self._pair(ref_a, ref_b, request)
        results = []
        for lm in (a, b):
            result, seconds, cached = self.cache.get(lm, image)
            results.append((top_k(lm, result), seconds, cached))
        (top_a, t_a, c_a), (top_b, t_b, c_b) = results
        pred_a, pred_b = next(iter(top_a)), next(iter(top_b))
        truth = self.true_label(file)
        agree = "✔ both say" if pred_a == pred_b else "✘ they disagree:"
        lines = [f"{agree} **{pred_a}**" + ("" if pred_a == pred_b else f" (A) vs **{pred_b}** (B)")]
        if truth:
            lines.append(f"True label **{truth}** · A {'✔' if pred_a == truth else '✘'} · "
                         f"B {'✔' if pred_b == truth else '✘'}")
        timing = lambda t, c: "cached" if c else f"{1000 * t:.0f} ms"
        lines.append(f"Time: A {timing(t_a, c_a)} · B {timing(t_b, c_b)} (logits and all attention maps "
                     "in one call)")
        return top_a, top_b, "\n\n".join(lines)

    def disagreements(self, ref_a: str, ref_b: str, count: float, request: gr.Request = None, progress=gr.Progress()):
        """Both models over N test images: accuracies, per-class differences, where they disagree."""
        from explorer.train import accuracy_metrics, predict_logits
        count = int(count or 0)
        if count < 1:
            raise gr.Error("choose at least one test image")
        a, b = self._pair(ref_a, ref_b, request)
        if a.class_names != b.class_names:
            raise gr.Error("the two models predict different classes; compare models of one dataset")
        name = self.sample_dataset_name(ref_b, request)
        try:
            ds = self.dataset(name, need=count, progress=_reporter(progress))
        except DatasetError as e:
            raise gr.Error(f"{count:,} {name} test images are not here: {e}") from None
        if len(a.class_names) != ds.num_classes:
            raise gr.Error(f"the models predict {len(a.class_names)} classes but {name} has {ds.num_classes}")
        count = min(count, len(ds.x_test))
        x, y = ds.x_test[:count], ds.y_test[:count]
        preds = []
        for lm in (a, b):
            with lm.lock:
                preds.append(predict_logits(lm.model, x))
        m_a, m_b = accuracy_metrics(preds[0], y), accuracy_metrics(preds[1], y)
        p_a, p_b = preds[0].argmax(-1), preds[1].argmax(-1)
        differ = np.flatnonzero(p_a != p_b)
        where = " (bundled with the app)" if ds.sample else ""
        summary = (f"On the first **{count}** {name} test images{where}: A **{_fmt_pct(m_a['top1'])}** top-1, "
                   f"B **{_fmt_pct(m_b['top1'])}** top-1; they disagree on **{len(differ)}** "
                   f"({100 * len(differ) / count:.1f} %): A right {int((p_a[differ] == y[differ]).sum())}, "
                   f"B right {int((p_b[differ] == y[differ]).sum())}, neither "
                   f"{int(((p_a[differ] != y[differ]) & (p_b[differ] != y[differ])).sum())}.")
        rows = [[cls, _fmt_pct(pa), _fmt_pct(pb), "–" if pa is None else f"{100 * (pb - pa):+.1f}"]
                for cls, pa, pb in zip(ds.class_names, m_a["per_class"], m_b["per_class"])]
        table = pd.DataFrame(rows, columns=["class", "A top-1", "B top-1", "B − A (points)"])
        names = ds.class_names
        gallery = [(square(x[i], 96), f"#{i} true {names[y[i]]} · A {names[p_a[i]]} · B {names[p_b[i]]}")
                   for i in differ[:24]]
        return summary, table, gallery

    # --- patches ----------------------------------------------------------------------------------

    def patches(self, file, ref_a: str, ref_b: str, request: gr.Request = None):
        """The vanilla grid and the five SPT views, at the patch size of the SPT model in use."""
        image, preview = self._image(file)
        a, b = self._pair(ref_a, ref_b, request)
        lm = b if b.config.use_spt or not a.config.use_spt else a
        config = lm.config
        # The grids show the image as the model sees it: resized to its working size.
        shown = square(preview, config.input_size) if config.input_size != config.image_size else image
        grids = render.spt_grids(shown, config.patch_size)
        note = (f"Patch size **{config.patch_size} px** on the {config.input_size}×{config.input_size} input "
                f"of **{lm.name}**; each shifted view moves the image by half a patch "
                f"({config.patch_size // 2} px), zeros where it was padded. SPT concatenates the five "
                f"views' patches before the projection.")
        return render.patch_grid(shown, config.patch_size), [(g, name) for name, g in grids.items()], note

    # --- attention --------------------------------------------------------------------------------

    def query_picker(self, file, qy: float, qx: float, ref_b: str, request: gr.Request = None):
        """The image with the query patch outlined, for clicking a new query."""
        if file is None:
            return None
        try:
            _, preview = self.decode(file)
        except ImageInputError:
            return None
        config = self.model(ref_b, request).config
        row, col = query_patch((qy, qx), config)
        zero = np.zeros((config.grid_size, config.grid_size))
        return render.attention_overlay(square(preview, QUERY_PICKER), zero, query=(row, col),
                                        size=QUERY_PICKER, alpha=0.0, colorbar=False)

    def select_query(self, evt: gr.SelectData, ref_b: str, request=None):
        x, y = evt.index
        size = self.model(ref_b, request).config.image_size
        return float(y) * size / QUERY_PICKER, float(x) * size / QUERY_PICKER

    def pick_query(self, evt: gr.SelectData, file, ref_a: str, ref_b: str, layer: float, head: str,
                   request: gr.Request = None):
        """A click on the picker, in one request: the new query, its outline and what depends on it."""
        qy, qx = self.select_query(evt, ref_b, request)
        return (qy, qx, *self.attention_query(file, ref_a, ref_b, layer, head, qy, qx, request))

    def _attention(self, file, ref_a: str, ref_b: str, layer, head, qy, qx, parts, request=None):
        image, preview = self._image(file)
        a, b = self._pair(ref_a, ref_b, request)
        try:
            views = analyze_pair([a, b], self.cache, image, preview, int(layer or 0), head or HEAD_ALL,
                                 (float(qy or 0), float(qx or 0)), parts=parts)
        except ValueError as e:
            raise gr.Error(str(e)) from None
        va, vb = views[0]["view"], views[1]["view"]
        caption = (f"Query patch row {vb.query[0]}, col {vb.query[1]} of B's {b.config.grid_size}×"
                   f"{b.config.grid_size} grid (cyan). Layer {va.layer} for A, {vb.layer} for B; A on the left, "
                   f"B on the right; colours run from 0 to each map's maximum. LSA models never attend to the "
                   f"query patch itself.")
        return side_by_side_pictures(views, parts), caption

    def attention(self, file, ref_a: str, ref_b: str, layer: float, head: str, qy: float, qx: float,
                  request: gr.Request = None):
        """Every attention picture, A beside B in each: for a new image, or the button."""
        pictures, caption = self._attention(file, ref_a, ref_b, layer, head, qy, qx, PARTS, request)
        return pictures["focus"], pictures["sheet"], pictures["rollout"], caption

    def attention_query(self, file, ref_a: str, ref_b: str, layer: float, head: str, qy: float, qx: float,
                        request: gr.Request = None):
        """A new query patch: the picker's outline, the maps from the query and the layer × head sheets;
        the rollout does not depend on the query and is not sent again."""
        pictures, caption = self._attention(file, ref_a, ref_b, layer, head, qy, qx, ("focus", "sheet"), request)
        return self.query_picker(file, qy, qx, ref_b, request), pictures["focus"], pictures["sheet"], caption

    def attention_layer(self, file, ref_a: str, ref_b: str, layer: float, head: str, qy: float, qx: float,
                        request: gr.Request = None):
        """A new layer or head: only the maps from the query change."""
        pictures, caption = self._attention(file, ref_a, ref_b, layer, head, qy, qx, ("focus",), request)
        return pictures["focus"], caption

    def what_if(self, file, ref_a: str, ref_b: str, layer: float, qy: float, qx: float, factor_a: float,
                mask_a: str, factor_b: float, mask_b: str, request: gr.Request = None):
        """Both models as learned beside their what-if (tau scaled, diagonal mask switched) on this image."""
        image, preview = self._image(file)
        a, b = self._pair(ref_a, ref_b, request)
        if mask_a not in MASKS or mask_b not in MASKS:
            raise gr.Error(f"the diagonal mask is one of {list(MASKS)}")
        try:
            wa, wb = (what_if(lm, self.cache, image, preview, factor, MASKS[mask], int(layer or 0),
                              (float(qy or 0), float(qx or 0)))
                      for lm, factor, mask in ((a, factor_a, mask_a), (b, factor_b, mask_b)))
        except ValueError as e:
            raise gr.Error(str(e)) from None
        tagged = (("A", wa), ("B", wb))
        names = [f"{tag}: {w.model.label}" for tag, w in tagged]
        plot = what_if_plot(list(zip(names, (wa, wb))), self.plots)
        maps = render.side_by_side([w.maps for _, w in tagged], [picture_title(tag, w.model) for tag, w in tagged])
        summary = "\n\n".join(_what_if_line(n, w) for n, w in zip(names, (wa, wb)))
        summary += (f"\n\nMaps from query patch row {wb.query[0]}, col {wb.query[1]}, layer {wb.layer} "
                    f"(each coloured from 0 to its own maximum).")
        return wa.top5, wa.top5_what_if, wb.top5, wb.top5_what_if, maps, plot, summary

    def locality(self, file, ref_a: str, ref_b: str, scope: str, request: gr.Request = None, progress=gr.Progress()):
        """Mean attention distance and entropy per layer, for this image or over test images."""
        from explorer.probe import attention_entropy, mean_attention_distance
        a, b = self._pair(ref_a, ref_b, request)
        if scope == "this image":
            image, _ = self._image(file)
            batch = image[None]
        else:
            try:
                batch = self.dataset(self.sample_dataset_name(ref_b, request), need=64,
                                     progress=_reporter(progress)).x_test[:64]
            except DatasetError as e:
                raise gr.Error(f"no test images here: {e}") from None
        distance, entropy = {}, {}
        for tag, lm in (("A", a), ("B", b)):
            if len(batch) == 1:  # the Compare/Attention tabs already ran the models on this image
                attention = self.cache.get(lm, batch[0])[0].attention
            else:
                with lm.lock:
                    attention = lm.probe(batch).attention
            label = f"{tag}: {lm.label}"
            distance[label] = mean_attention_distance(attention, lm.config.grid_size, lm.config.pixels_per_patch)
            entropy[label] = attention_entropy(attention)
        rows = [[name, f"{d.mean():.2f}", f"{e.mean():.3f}"] for (name, d), e in zip(distance.items(),
                                                                                   entropy.values())]
        table = pd.DataFrame(rows, columns=["model", "mean distance (px)", "mean entropy (nats)"])
        return render.plot_attention_distance(distance), render.plot_entropy(entropy), table

    # --- tau --------------------------------------------------------------------------------------

    def tau(self, ref_a: str, ref_b: str, request: gr.Request = None):
        """Tau per layer against sqrt(d_k), and over training, for every LSA model loaded that this
        visitor may see (in shared mode, another visitor's runs are not shown)."""
        self._pair(ref_a, ref_b, request)
        visible = set(self.choices(request))
        models = [lm for lm in self.store.loaded() if lm.config.use_lsa
                  and (not self.shared or lm.ref in visible or self.runs.is_hub(lm.ref))]
        per_model = {lm.label: lm.probe.tau() for lm in models}
        initial = {lm.label: lm.config.initial_tau for lm in models}
        history = {lm.label: lm.card.get("history", []) for lm in models}
        rows = [[lm.label, row["layer"], ", ".join(f"{v:.3f}" for v in row["tau"]), f"{row['initial']:.3f}",
                 f"{row['mean_tau'] / row['initial']:.2f}"]
                for lm in models for row in tau_table(lm.model, lm.config)]
        table = pd.DataFrame(rows, columns=["model", "layer", "tau", "initial √d_k", "ratio"])
        return render.plot_tau(per_model, initial), render.plot_tau_history(history), table

    # --- fine-tune --------------------------------------------------------------------------------

    def finetune_plan(self, what: str, preset: str, variant: str, data: str, zip_file, epochs, lr, batch_size,
                      images, freeze: bool, name: str | None, ref_a: str | None, ref_b: str | None, progress=None,
                      request=None):
        """The form as a validated finetune.Plan; every refusal is a gr.Error that says why. CIFAR comes
        whole (downloaded once if need be, `progress` following it)."""
        try:
            if what == PAIR:
                bases = [("A", ref_a), ("B", ref_b)]
            elif what in (None, "", SCRATCH):
                bases = []
            else:
                bases = [(next((t for t, r in (("A", ref_a), ("B", ref_b)) if r == what), ""), what)]
            owner = self.owner(request)
            members = self.store.members([(tag, self.runs.check(ref, owner) if ref else ref) for tag, ref in bases])
            size = members[0][3]["config"]["image_size"] if members else PRESETS.get(preset, PRESETS["tiny"]).image_size
            load = lambda name: self.training_data(name, progress=_reporter(progress) if progress else None)
            dataset = job_data(data, zip_file, load, self.limits, size)
            return plan_job(members, dataset, epochs, lr, batch_size, images, bool(freeze), (name or "").strip(),
                            self.limits, scratch=(preset, variant) if not bases else None)
        except (JobError, DatasetError, CheckpointError, OSError) as e:
            raise gr.Error(self._safe(e)) from None

    def finetune(self, what, preset, variant, data, zip_file, epochs, lr, batch_size, images, freeze, name,
                 a, b, request: gr.Request = None, progress=gr.Progress()):
        """Starts a run and streams both models' curves until it ends (the run is not tied to this page);
        when it succeeds, its checkpoints go into the slots they came from. In shared mode a Start that
        finds another visitor's run going on waits in the queue, its place and wait shown, refreshed."""
        plan = self.finetune_plan(what, preset, variant, data, zip_file, epochs, lr, batch_size, images, freeze,
                                  name, a, b, progress, request)
        owner = self.owner(request)
        key = id(plan)
        mine = set(self.my_runs(request))
        with self._visit_lock:  # the bases of a run waiting or going on are never pruned
            self._bases[key] = {r for r in (a, b) if r in mine}
        try:
            if self.shared:
                started: dict = {}
                yield from self._wait_in_queue(plan, owner, started)
                run_id = started.get("run_id")
            else:
                try:
                    run_id = self.runner.start(plan, owner, self.runs.out_dir(owner))
                except (Busy, JobError) as e:
                    raise gr.Error(str(e)) from None
            if run_id is None:
                return
            yield from self._follow_run(run_id, plan, a, b, progress, request)
        finally:
            with self._visit_lock:
                self._bases.pop(key, None)

    def _wait_in_queue(self, plan, owner, started: dict):
        """Joins the queue and waits for this Start's turn, saying where it stands; puts the run's id in
        `started` (nothing, when the visitor left the queue)."""
        try:
            ticket = self.runner.join(owner)
        except QueueFull as e:
            raise gr.Error(str(e)) from None
        try:
            while True:
                if self.runner.ready(ticket):
                    try:
                        started["run_id"] = self.runner.start(plan, owner, self.runs.out_dir(owner), ticket)
                        return
                    except JobError as e:
                        raise gr.Error(str(e)) from None
                    except Busy:
                        pass
                if ticket.cancelled:
                    yield ("You left the queue; nothing was started.",) + (gr.update(),) * 8
                    return
                place, length, eta = self.runner.position(ticket)
                wait = f"about {_duration(eta)}" if eta is not None else "an estimate comes once it has made progress"
                yield (f"**waiting** · another visitor's run is going on · your place in the queue: **{place} of "
                       f"{length}** · {wait} · {plan.description} starts by itself when its turn comes; keep "
                       f"this page open (Cancel leaves the queue)",) + (gr.update(),) * 8
                time.sleep(1.0)
        finally:
            if "run_id" not in started:
                self.runner.leave(ticket)

    def _follow_run(self, run_id, plan, a, b, progress, request):
        # The curves are redrawn at most every CURVES_EVERY_S during a run: Gradio turns each matplotlib
        # figure into a PNG in this process (~0.25 s for the two, holding the GIL), which would otherwise
        # land on other visitors' requests at every epoch of a fast run.
        shown, drawn = None, 0.0
        while True:
            s = self.runner.snapshot()
            if s.run_id != run_id:  # a later run replaced this one's state; nothing more to show
                return
            m = s.members[s.current]
            if m.total_steps:
                progress(m.step / m.total_steps, desc=f"{m.label}: step {m.step}/{m.total_steps}")
            epochs_seen = tuple(len(x.history) for x in s.members)
            if not s.running:
                yield self._run_outputs(s, plan, a, b, final=True, request=request)
                return
            if epochs_seen != shown and time.monotonic() - drawn >= CURVES_EVERY_S:
                shown, drawn = epochs_seen, time.monotonic()
                yield self._run_outputs(s, plan, a, b, request=request)
            else:
                yield (self._run_status(s),) + (gr.update(),) * 8
            time.sleep(0.5)

    def _run_status(self, s) -> str:
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
            lines.append(f"{m.label}: step {m.step}/{m.total_steps} ({pct:.0f} %)"
                         + (f" · loss {m.last_loss:.3f}" if m.last_loss is not None else "") + head + done)
        if s.status == "done":
            saved = ", ".join(f"`{os.path.relpath(m.checkpoint, self.root)}`" for m in s.members)
            lines.append(f"Saved as {saved}, and loaded into the model slots: every tab now compares them.")
        if s.status == "cancelled":
            lines.append("Cancelled: the training process was stopped and nothing was saved.")
        if s.error:
            lines.append(f"**⚠ the run failed:** {s.error} · nothing was saved; the slots are as they were.")
        return "\n\n".join(lines)

    def _run_outputs(self, s, plan, a, b, final: bool = False, request=None):
        histories = {m.label: m.history for m in s.members}
        curves = render.plot_training(histories)
        tau = render.plot_tau_history({m.label: m.history for m in s.members})
        keep = gr.update()
        results = per_class = gallery = keep
        slot_a, slot_b, what = keep, keep, keep
        if final and s.status == "done":
            rep = report([m.__dict__ for m in s.members], plan.dataset.y_test, plan.dataset.class_names)
            results = pd.DataFrame(rep.rows, columns=rep.columns)
            per_class = pd.DataFrame(rep.per_class, columns=rep.per_class_columns)
            names = plan.dataset.class_names
            preds = [m.predictions for m in s.members]
            x, y = plan.dataset.x_test, plan.dataset.y_test
            gallery = [(square(x[i], 96), f"{names[y[i]]}: " + " · ".join(
                f"{m.tag or m.label} {names[p[i]]}" for m, p in zip(s.members, preds))) for i in rep.disagree[:18]]
            refs = [os.path.relpath(m.checkpoint, self.root) for m in s.members]
            choices = self.choices(request)
            if len(refs) == 2:
                a, b = refs
            elif s.members[0].tag == "A":
                a = refs[0]
            else:
                b = refs[0]
            slot_a, slot_b = gr.update(choices=choices, value=a), gr.update(choices=choices, value=b)
            what = gr.update(choices=[PAIR, SCRATCH] + choices)
            status = self._run_status(s) + ("\n\n" + rep.summary if rep.summary else "")
            return status, curves, tau, results, per_class, gallery, slot_a, slot_b, what
        return self._run_status(s), curves, tau, results, per_class, gallery, slot_a, slot_b, what

    def cancel(self, request: gr.Request = None):
        """Cancels the visitor's own run (or their place in the queue); another visitor's run goes on."""
        return {"cancelled": "Cancelled: the training process was stopped and nothing was saved.",
                "left": "You left the queue; nothing was started.",
                "not yours": "The run going on is not yours: only the visitor who started it can cancel it. "
                             "Press Start to wait for your turn in the queue.",
                "none": "No run is going on."}[self.runner.cancel_as(self.owner(request))]


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _reporter(progress):
    """explorer.data's progress(fraction or None, message) as a Gradio progress bar (a no-op outside a
    request)."""
    return lambda fraction, message: progress(fraction, desc=message)


def _atomic_image_cache() -> None:
    """Makes Gradio's image cache write atomically, encode PNG fast, and encode a picture only once.

    Gradio names a cached output image by the hash of its bytes and rewrites the file in place on every
    request, so two sessions producing the same picture at once can serve a half-rewritten file
    ("Too much data for declared Content-Length"). Its file cache already renames into place; this
    gives the image cache the same behaviour (and skips rewriting identical bytes). Our RGB pictures are
    encoded by `render.encode_png`: the same pixels as Gradio's PNG, ~7x faster, for ~35 % more bytes; and
    a picture whose pixels were encoded before (the same view asked again, by any session) is served from
    the file written then.
    """
    import hashlib
    from gradio import processing_utils as pu
    if getattr(pu.save_pil_to_cache, "_explorer_atomic", False):
        return
    written: OrderedDict[tuple, str] = OrderedDict()
    lock = threading.Lock()

    def encode(img, format):
        if format.lower() == "png" and img.mode == "RGB" and not img.info:
            return render.encode_png(np.asarray(img))
        return pu.encode_pil_to_bytes(img, format)

    def save_pil_to_cache(img, cache_dir, name="image", format="webp"):
        key = (str(cache_dir), name, format.lower(), img.mode, img.size,
               hashlib.blake2b(img.tobytes(), digest_size=16).digest())
        with lock:
            path = written.get(key)
            if path is not None:
                written.move_to_end(key)
        if path is not None and os.path.exists(path):
            return path
        data = encode(img, format)
        folder = Path(cache_dir) / pu.hash_bytes(data)
        folder.mkdir(exist_ok=True, parents=True)
        path = (folder / f"{name}.{format}").resolve()
        if not (path.exists() and path.stat().st_size == len(data)):
            tmp = folder / f".{name}.{threading.get_ident()}.{time.monotonic_ns()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, path)
        with lock:
            written[key] = str(path)
            while len(written) > 1024:
                written.popitem(last=False)
        return str(path)

    save_pil_to_cache._explorer_atomic = True
    pu.save_pil_to_cache = save_pil_to_cache


CSS = """
.slot-card {min-height: 3.2em}
footer {display: none !important}
/* Output pictures carry their own captions (head, layer) along their top edge: keep Gradio's label and
   buttons above the picture instead of floating over those captions. */
.pic > label[data-testid="block-label"].float {position: static; margin-bottom: 4px}
.pic .image-container > .icon-button-wrapper {position: static; justify-content: flex-end}
"""


def picture(label: str, captioned: bool = True, **kwargs) -> gr.Image:
    """An output image; PNG because it encodes ~9x faster than Gradio's default WebP and keeps patch edges.
    A captioned one (the default) keeps Gradio's label and buttons off the captions drawn into it."""
    return gr.Image(format="png", label=label, interactive=False, elem_classes="pic" if captioned else None,
                    **kwargs)


def build_demo(explorer: Explorer | None = None) -> gr.Blocks:
    ex = explorer or Explorer()
    _atomic_image_cache()
    choices = ex.choices()
    ref_a, ref_b = ex.initial_refs()
    full_data = find_cifar("cifar10", ex.data_dir) is not None

    def card(ref):
        try:
            return ex.card_markdown(ref)
        except (CheckpointError, ValueError, OSError) as e:
            return f"**⚠ could not load {ref!r}: {e}**"

    layers, heads, classes = 1, 1, ["random"]
    for ref in (ref_a, ref_b):
        try:
            lm = ex.store.get(ref) if ref else None
        except (CheckpointError, ValueError, OSError):
            lm = None
        if lm is not None:
            layers, heads = max(layers, lm.config.num_layers), max(heads, lm.config.num_heads)
    if ref_b:
        try:
            classes += ex.store.get(ref_b).class_names
        except (CheckpointError, ValueError, OSError):
            pass

    with gr.Blocks(title="SPT/LSA ViT Explorer") as demo:
        # Shared mode: the visitor's random id, kept (encrypted) in their browser across reloads.
        visitor = (gr.BrowserState(None, storage_key="spt-lsa-explorer-visitor", secret=ex.browser_secret())
                   if ex.shared else None)
        gr.Markdown("# SPT/LSA ViT Explorer\nA vanilla Vision Transformer beside one with **Shifted Patch "
                    "Tokenization** and **Locality Self-Attention** "
                    "([Lee, Lee & Song 2021](https://arxiv.org/abs/2112.13492)), trained on the same small "
                    "dataset. Pick two models, give them an image, and look inside.")
        prev_a, prev_b = gr.State(ref_a), gr.State(ref_b)
        with gr.Row():
            with gr.Column():
                slot_a = gr.Dropdown(choices, value=ref_a, label="Model A", allow_custom_value=True,
                                     info="a checkpoint, or a Hub id owner/name[@revision]")
                card_a = gr.Markdown(card(ref_a), elem_classes="slot-card")
            with gr.Column():
                slot_b = gr.Dropdown(choices, value=ref_b, label="Model B", allow_custom_value=True,
                                     info="a checkpoint, or a Hub id owner/name[@revision]")
                card_b = gr.Markdown(card(ref_b), elem_classes="slot-card")
        refresh_btn = gr.Button("↻ Refresh checkpoint list", size="sm")

        with gr.Row():
            with gr.Column(scale=1, min_width=260):
                upload = gr.File(label="Image (any format or size)", file_types=["image"], type="filepath",
                                 elem_id="upload")
                preview = picture("Input", captioned=False, height=224, elem_id="preview")
                with gr.Row():
                    sample_class = gr.Dropdown(classes, value="random", label="Test sample of class", scale=2)
                    sample_btn = gr.Button("Sample", scale=1, elem_id="sample")
                # Hidden in the page (always random there); API callers pass a seed to pick reproducibly.
                sample_seed = gr.Number(-1, visible=False, label="seed (-1: random)")
                truth = gr.Markdown()
                gr.Markdown(ex.data_note(), elem_id="data-note")
                image_note = gr.Markdown()
            with gr.Column(scale=3):
                with gr.Tabs():
                    with gr.Tab("Compare", id="compare"):
                        compare_btn = gr.Button("Compare", variant="primary", elem_id="compare-btn")
                        with gr.Row():
                            label_a = gr.Label(num_top_classes=5, label="Model A top-5", elem_id="label-a")
                            label_b = gr.Label(num_top_classes=5, label="Model B top-5", elem_id="label-b")
                        verdict = gr.Markdown(elem_id="verdict")
                        with gr.Accordion("Find disagreements on the test set", open=False):
                            n_test = gr.Slider(50, 10000, value=1000, step=50,
                                               label="test images (the first N; 10,000 = all of them)",
                                               info=None if full_data else "beyond the bundled 1,000, the full "
                                                                          "test set is downloaded once")
                            dis_btn = gr.Button("Find disagreements")
                            dis_summary = gr.Markdown()
                            with gr.Row():
                                dis_table = gr.Dataframe(label="per-class top-1", interactive=False)
                                dis_gallery = gr.Gallery(format="png", label="where they disagree", columns=6,
                                                         height=360)
                    with gr.Tab("Patches", id="patches"):
                        patch_note = gr.Markdown()
                        with gr.Row():
                            grid_plain = picture("vanilla ViT patches")
                        grids = gr.Gallery(format="png", label="SPT: the image and its four half-patch shifts",
                                           columns=5, height=260, object_fit="contain", allow_preview=True)
                        patches_btn = gr.Button("Show patches", elem_id="patches-btn")
                    with gr.Tab("Attention", id="attention"):
                        with gr.Row():
                            with gr.Column(scale=1, min_width=240):
                                # The hint sits above the picture: a floating label would hide its top patches.
                                gr.Markdown("**Click a patch** to choose the query", elem_id="picker-hint")
                                picker = picture("query patch", captioned=False, show_label=False, buttons=[],
                                                 height=QUERY_PICKER + 40, elem_id="picker")
                                layer = gr.Dropdown(list(range(layers)), value=layers - 1, label="layer")
                                head = gr.Dropdown([HEAD_ALL, HEAD_MEAN] + [f"head {i}" for i in range(heads)],
                                                   value=HEAD_ALL, label="head")
                                with gr.Row():
                                    qy = gr.Number(16, label="query y (px of 32)", precision=1)
                                    qx = gr.Number(16, label="query x (px of 32)", precision=1)
                                attn_btn = gr.Button("Show attention", variant="primary", elem_id="attn-btn")
                            with gr.Column(scale=3):
                                attn_caption = gr.Markdown(elem_id="attn-caption")
                                # A beside B in one picture per kind: one file per kind to send on a click.
                                focus = picture("from the query: A | B", elem_id="focus")
                                rollout = picture("attention rollout: A | B", elem_id="rollout")
                        sheet = picture("layer × head from the query: A | B", elem_id="sheet")
                        with gr.Accordion("Locality: mean attention distance and entropy", open=True):
                            scope = gr.Radio(["this image", "64 test images"], value="this image", label="over")
                            loc_btn = gr.Button("Measure locality")
                            with gr.Row():
                                dist_plot = gr.Plot(label="mean attention distance", show_label=False)
                                ent_plot = gr.Plot(label="attention entropy", show_label=False)
                            loc_table = gr.Dataframe(interactive=False)
                        with gr.Accordion("LSA switches: what if τ or the diagonal mask were different?", open=True):
                            gr.Markdown(WHAT_IF_TEXT, elem_id="what-if-text")
                            with gr.Row():
                                wi_factor_a = gr.Dropdown(TAU_CHOICES, value=1.0, label="A: τ factor", elem_id="wi-factor-a")
                                wi_mask_a = gr.Radio(list(MASKS), value="as learned", label="A: diagonal mask",
                                                     elem_id="wi-mask-a")
                                wi_factor_b = gr.Dropdown(TAU_CHOICES, value=1.0, label="B: τ factor", elem_id="wi-factor-b")
                                wi_mask_b = gr.Radio(list(MASKS), value="as learned", label="B: diagonal mask",
                                                     elem_id="wi-mask-b")
                            wi_btn = gr.Button("What if", variant="primary", elem_id="what-if-btn")
                            wi_summary = gr.Markdown(elem_id="what-if-summary")
                            with gr.Row():
                                wi_top_a = gr.Label(num_top_classes=5, label="A top-5 as learned")
                                wi_top_a2 = gr.Label(num_top_classes=5, label="A top-5 what if", elem_id="wi-top-a")
                                wi_top_b = gr.Label(num_top_classes=5, label="B top-5 as learned")
                                wi_top_b2 = gr.Label(num_top_classes=5, label="B top-5 what if", elem_id="wi-top-b")
                            wi_maps = picture("from the query, learned and what if: A | B", elem_id="what-if-maps")
                            wi_plot = picture("entropy and distance, learned and what if",
                                              show_label=False, elem_id="what-if-plot")
                    with gr.Tab("Tau", id="tau"):
                        gr.Markdown("LSA divides the attention logits by a learned temperature **tau** instead "
                                    "of the fixed √d_k; a tau below √d_k sharpens attention.")
                        tau_btn = gr.Button("Show tau")
                        with gr.Row():
                            tau_plot = gr.Plot(label="tau per layer", show_label=False)
                            tau_hist = gr.Plot(label="tau over training", show_label=False)
                        tau_table = gr.Dataframe(interactive=False)
                    with gr.Tab("Fine-tune", id="finetune"):
                        if ex.shared:
                            with gr.Row():
                                gr.Markdown(f"**A shared instance:** {ex.shared_limits.describe()}.",
                                            elem_id="shared-note")
                                if os.environ.get("SPACE_ID"):
                                    gr.DuplicateButton("Duplicate this Space to fine-tune on your own hardware",
                                                       size="sm", scale=0, elem_id="duplicate")
                        gr.Markdown(FINETUNE_HELP.format(where=ex.training_where(), epochs=ex.limits.max_epochs,
                                                         images=ex.limits.max_images))
                        with gr.Row():
                            ft_base = gr.Dropdown([PAIR, SCRATCH] + choices, value=PAIR, label="fine-tune",
                                                  info="both slots on one split, or one checkpoint alone")
                            ft_preset = gr.Dropdown(sorted(PRESETS), value="cifar-small", label="preset (new model)")
                            ft_variant = gr.Dropdown(list(VARIANTS), value="spt_lsa", label="variant (new model)")
                        with gr.Row():
                            ft_data = gr.Radio([ZIP, "cifar10", "cifar100"], value=ZIP, label="data")
                            ft_zip = gr.File(label="zip of class folders", file_types=[".zip"], type="filepath",
                                             elem_id="ft-zip")
                        with gr.Row():
                            ft_epochs = gr.Number(0, label="epochs (0 = auto)", precision=0)
                            ft_lr = gr.Number(0, label="learning rate (0 = auto)")
                            ft_batch = gr.Number(0, label="batch size (0 = auto)", precision=0)
                            ft_subset = gr.Number(0, label="training images (0 = all)", precision=0)
                            ft_freeze = gr.Checkbox(False, label="freeze backbone", scale=0, min_width=170)
                            ft_name = gr.Textbox("", label="name (optional)")
                        with gr.Row():
                            ft_start = gr.Button("Start", variant="primary", elem_id="ft-start")
                            ft_cancel = gr.Button("Cancel", variant="stop", elem_id="ft-cancel")
                        ft_status = gr.Markdown("No run yet.", elem_id="ft-status")
                        ft_curves = gr.Plot(label="loss and accuracy", show_label=False)
                        ft_results = gr.Dataframe(label="result on the held-out test images", interactive=False,
                                                  headers=["model", "test top-1", "test top-5", "device", "images/s",
                                                           "train time"])
                        with gr.Row():
                            ft_per_class = gr.Dataframe(label="per-class test top-1", interactive=False,
                                                        headers=["class", "A top-1", "B top-1", "B − A (points)"])
                            ft_gallery = gr.Gallery(format="png", label="test images where they disagree "
                                                    "(true class: A's guess · B's guess)", columns=4, height=340)
                        ft_tau = gr.Plot(label="tau per layer", show_label=False)
                        with gr.Row():
                            ft_mine = gr.Dropdown(ex.my_runs() if not ex.shared else [], value=None,
                                                  label="your fine-tuned checkpoints" if ex.shared
                                                  else "fine-tuned checkpoints", scale=3,
                                                  info="a zip of the folder: `python -m explorer.evaluate` and "
                                                       "`keras.saving.load_model` (after `import explorer`) load it")
                            ft_download = gr.Button("Download", scale=1, elem_id="ft-download")
                            ft_file = gr.File(label="checkpoint zip", interactive=False, scale=2, height=120)

        # --- wiring ---------------------------------------------------------------------------------
        def load_a(ref, previous, request: gr.Request):
            return ex.load_slot(ref, previous, request, "A")

        def load_b(ref, previous, request: gr.Request):
            return ex.load_slot(ref, previous, request, "B")

        slot_a.change(load_a, [slot_a, prev_a], [slot_a, prev_a, card_a], api_name="load_model_a")
        slot_b.change(load_b, [slot_b, prev_b], [slot_b, prev_b, card_b], api_name="load_model_b")
        refresh_btn.click(ex.refresh, [slot_a, slot_b], [slot_a, slot_b, ft_base], api_name="refresh").then(
            ex.mine, None, [ft_mine], api_name=False)
        upload.change(ex.take_image, [upload], [preview, image_note], api_name="image")
        sample_btn.click(ex.sample, [sample_class, slot_b, sample_seed], [upload, preview, truth],
                         api_name="sample")
        compare_inputs = [upload, slot_a, slot_b]
        compare_outputs = [label_a, label_b, verdict]
        compare_btn.click(ex.compare, compare_inputs, compare_outputs, api_name="compare",
                          concurrency_limit=4)
        upload.change(ex.compare, compare_inputs, compare_outputs, api_name=False, concurrency_limit=4)
        dis_btn.click(ex.disagreements, [slot_a, slot_b, n_test], [dis_summary, dis_table, dis_gallery],
                      api_name="disagreements")
        patch_outputs = [grid_plain, grids, patch_note]
        patches_btn.click(ex.patches, compare_inputs, patch_outputs, api_name="patches", concurrency_limit=4)
        upload.change(ex.patches, compare_inputs, patch_outputs, api_name=False, concurrency_limit=4)
        # Attention: a new image or the button draws everything; a query click (one request) redraws only
        # what depends on the query, a layer or head change only the maps from the query.
        attn_inputs = [upload, slot_a, slot_b, layer, head, qy, qx]
        attn_outputs = [focus, sheet, rollout, attn_caption]
        query_outputs = [picker, focus, sheet, attn_caption]
        attn = dict(concurrency_limit=4, concurrency_id="attention")
        attn_btn.click(ex.attention, attn_inputs, attn_outputs, api_name="attention", **attn)
        upload.change(ex.attention, attn_inputs, attn_outputs, api_name=False, **attn)
        gr.on([layer.change, head.change], ex.attention_layer, attn_inputs, [focus, attn_caption],
              api_name="attention_layer", **attn)
        gr.on([qy.submit, qx.submit], ex.attention_query, attn_inputs, query_outputs, api_name="attention_query",
              **attn)
        upload.change(ex.query_picker, [upload, qy, qx, slot_b], [picker], api_name=False)
        picker.select(ex.pick_query, [upload, slot_a, slot_b, layer, head], [qy, qx, *query_outputs],
                      api_name=False, **attn)
        wi_btn.click(ex.what_if, [upload, slot_a, slot_b, layer, qy, qx, wi_factor_a, wi_mask_a, wi_factor_b,
                                  wi_mask_b],
                     [wi_top_a, wi_top_a2, wi_top_b, wi_top_b2, wi_maps, wi_plot, wi_summary],
                     api_name="what_if", **attn)
        loc_inputs, loc_outputs = [upload, slot_a, slot_b, scope], [dist_plot, ent_plot, loc_table]
        loc_btn.click(ex.locality, loc_inputs, loc_outputs, api_name="locality", concurrency_limit=2)
        upload.change(ex.locality, loc_inputs, loc_outputs, api_name=False, concurrency_limit=2)
        tau_btn.click(ex.tau, [slot_a, slot_b], [tau_plot, tau_hist, tau_table], api_name="tau")
        for slot in (slot_a, slot_b):
            slot.change(ex.tau, [slot_a, slot_b], [tau_plot, tau_hist, tau_table], api_name=False)
        # Not limited to one at a time: a second Start must reach the runner and hear that one is going on.
        ft_start.click(ex.finetune, [ft_base, ft_preset, ft_variant, ft_data, ft_zip, ft_epochs, ft_lr, ft_batch,
                                     ft_subset, ft_freeze, ft_name, slot_a, slot_b],
                       [ft_status, ft_curves, ft_tau, ft_results, ft_per_class, ft_gallery, slot_a, slot_b, ft_base],
                       api_name="finetune", concurrency_id="finetune",
                       # every waiting Start holds a worker: the queue, the run followed, one to refuse
                       concurrency_limit=ex.shared_limits.max_queue + 2 if ex.shared else 4,
                       # progress and a refusal show on the status line only, not on the model slots
                       show_progress_on=[ft_status]).then(ex.mine, None, [ft_mine], api_name=False)
        ft_cancel.click(ex.cancel, None, [ft_status], api_name="cancel", concurrency_limit=None)
        ft_download.click(ex.download, [ft_mine], [ft_file], api_name="download_checkpoint")
        demo.load(ex.tau, [slot_a, slot_b], [tau_plot, tau_hist, tau_table], api_name=False)
        if ex.shared:
            demo.load(ex.visit, [visitor], [visitor, slot_a, slot_b, ft_base, ft_mine], api_name="visitor")
            demo.unload(ex.leave)
    return demo


def launch_kwargs() -> dict:
    return {"server_name": os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
            "theme": gr.themes.Soft(), "css": CSS, "show_error": True}
