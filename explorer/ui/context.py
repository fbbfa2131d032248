"""What every tab shares: the app's state (models, results, test images, runs, visitors) and the access
rules of a shared instance, in `AppState`; the page's common components, in `Page`, with those one tab
makes for another part of the page in `TabComponents`."""

from __future__ import annotations

import functools
import os
import re
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
import numpy as np

from explorer import catalog, hub, plots
from explorer.checkpoints import CheckpointError
from explorer.data import DatasetError
from explorer.finetune.plan import Limits
from explorer.finetune.runner import FineTuneRunner
from explorer.inputs import DecodedImages, ImageInputError
from explorer.samples import TestImages
from explorer.settings import Settings
from explorer.trust_service import TrustService
from explorer.visitors import FINETUNED, RunStore, SharedLimits, new_visitor_id, owner_key, shared_mode
from explorer.workbench import ModelStore, ResultCache

PROJECT = Path(__file__).resolve().parents[2]
DEFAULT_A = "cifar10-vanilla"
DEFAULT_B = "cifar10-spt_lsa"


def default_data_dir(settings: Settings) -> str | None:
    """$EXPLORER_DATA_DIR, else a `shared/data` folder beside the project (this repo's layout), else None:
    the bundled sample, the Keras cache and downloads on demand (explorer.data)."""
    if settings.data_dir:
        return settings.data_dir
    beside = PROJECT.parent / "shared" / "data"
    return str(beside) if beside.is_dir() else None


def shares(columns: int, first: int) -> list[str]:
    """A table's column widths: `first` per cent for the first column (a model, a class), the rest shared by
    the others, so that every column is on the page in a narrow window."""
    return [f"{first}%"] + [f"{(100 - first) / (columns - 1):.1f}%"] * (columns - 1) if columns > 1 else ["100%"]


def reporter(progress):
    """explorer.data's progress(fraction or None, message) as a Gradio progress bar (a no-op outside a
    request)."""
    return lambda fraction, message: progress(fraction, desc=message)


# Events the page needs but an API user does not: loading a slot, refreshing the lists, a visitor's arrival,
# a partial redraw (a query click, a layer change), a size's pair put in the slots. Still callable through
# gradio_client by name, as the page calls them; left out of the API page and of the MCP tools, which are
# the explorer's questions (docs/api.md, "MCP tools").
UNLISTED = {"api_visibility": "undocumented"}


@dataclass
class TabComponents:
    """Components one tab makes and another part of the page updates; each set by the tab that makes it."""

    finetune_base: gr.Dropdown | None = None  # what to fine-tune: its list follows the slots' lists
    finetune_runs: gr.Dropdown | None = None  # the visitor's fine-tuned checkpoints: listed as a page opens
    query_cell: gr.JSON | None = None         # Attention's query patch: the page draws its outline ...
    outline_js: str | None = None             # ... with this script, once the page has loaded
    # Notes beside a kind of map (how faithful it measured), each with the handler that writes it: redrawn
    # when the Trust tab has measured the pair.
    map_notes: list = field(default_factory=list)


@dataclass
class Page:
    """The components every tab reads: the two model slots and the image, with the first example's file."""

    slot_a: gr.Dropdown
    slot_b: gr.Dropdown
    upload: gr.File
    refs: tuple[str | None, str | None] = (None, None)  # the slots' models when the page opens
    first: str | None = None          # the example the page opens with, analysed when the app starts
    from_tabs: TabComponents = field(default_factory=TabComponents)  # components one tab makes for another
    tab: gr.State | None = None       # the label of the tab this visitor has open (set by the shell)
    loaded: tuple = ()                # States that change when a slot has loaded another model
    cards: tuple = ()                 # the slots' cards (what each loaded model is)
    reopened: gr.State | None = None  # changes when a link to a view has reopened it: everything is redrawn

    def new_input(self) -> list:
        """The events after which an image's analysis is out of date: a new image, or another model loaded
        into a slot (a failed load keeps the slot's model, and its analysis), or a view reopened from a link
        (what a link saves is what the page showed, not always what its last answers were)."""
        return [self.upload.change, *self.new_models(), *([self.reopened.change] if self.reopened else [])]

    def held(self, inputs: list) -> list:
        """`inputs` with each slot's dropdown replaced by the State holding the model it has loaded. An event
        the page fires itself (a new image, another model) reads these: when a fine-tune's one update fills
        the slots and their States, the States' change fires before the page has taken the dropdowns' new
        values, and a handler reading the dropdowns would answer for the previous models."""
        swap = {id(self.slot_a): self.loaded[0], id(self.slot_b): self.loaded[1]}
        return [swap.get(id(c), c) for c in inputs]

    def new_models(self) -> list:
        """The events after which a report over the test set (made for the previous pair) is out of date."""
        return [state.change for state in self.loaded]


class NotApplicable(Exception):
    """A tool over the test set that does not apply to the models in the slots; the message says why."""


class ImageError(gr.Error):
    """The page's image cannot be used (none yet, or a file that is not an image): the visitor's mistake,
    so one line in the server's log and no traceback."""

    def __init__(self, message: str):
        print(f"image refused: {message}", flush=True)
        super().__init__(message, print_exception=False)


class NoImage(ImageError):
    """The page has no image yet."""


NO_IMAGE = "_No image yet: upload one, click an example or take a sample from the test set._"
# What a tab shows in place of its answers when the image cannot be read: where the one message is.
UNREADABLE = "_Nothing to show: the image could not be read (the reason is under the upload, on the left)._"


def expected(message: str, what: str, toast: bool = True) -> gr.Error:
    """A gr.Error for a user's mistake (a bad upload, a zip without class folders, a number out of range):
    one line in the server's log instead of a traceback, which stays for real faults. `toast=False` when the
    page already shows `message` in place (an API caller still receives it)."""
    print(f"{what}: {message}", flush=True)
    return gr.Error(message, visible=toast, print_exception=False)


def quiet(handler, blank, why: int | None = None):
    """`handler` for an event the page fires by itself (a new image, another model, a tab opened): an image
    that cannot be used clears the outputs (`blank`) instead of saying so once more, so that no answer about
    the previous image stays and the image column's note is the one message; the output at index `why` (a
    Markdown) says in a line why the tab is empty and where the reason is. Name, docstring and signature stay
    the handler's."""
    @functools.wraps(handler)
    def run(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except ImageError as e:
            if why is None:
                return blank
            shown = list(blank)
            shown[why] = NO_IMAGE if isinstance(e, NoImage) else UNREADABLE
            return tuple(shown)
    return run


def initial(handler, *args, default=None):
    """A handler's outputs for the page's first paint (computed once, when the app starts), or `default`
    when there is nothing to show or it fails: the page then opens empty there, as without examples."""
    if any(a is None for a in args):
        return default
    try:
        return handler(*args)
    except Exception:  # noqa: BLE001  (a first paint never stops the app from starting)
        return default


class AppState:
    """State shared by all sessions: the model cache, probe results, test images and the fine-tune runner;
    in shared mode (a public Space) also who each session is and what they may reach. `settings` (default:
    the environment's, read here) give what `root`, `data_dir` and `shared` do not."""

    def __init__(self, root: str | os.PathLike | None = None, data_dir: str | None = None,
                 default_a: str = DEFAULT_A, default_b: str = DEFAULT_B, shared: bool | None = None,
                 settings: Settings | None = None):
        self.settings = settings = Settings.from_env() if settings is None else settings
        self.root = Path(root or settings.checkpoints or PROJECT / "checkpoints")
        self.data_dir = data_dir if data_dir is not None else default_data_dir(settings)
        self.shared = shared_mode(settings) if shared is None else shared
        self.shared_limits = SharedLimits.from_settings(settings)
        self.runs = RunStore(self.root, self.shared, self.shared_limits)
        hub_cache = str(self.root / ".hub-cache") if self.shared else None
        self.store = ModelStore(self.root, cache_dir=hub_cache,
                                max_hub_bytes=int(self.shared_limits.max_hub_mb * 1e6) if self.shared else None)
        self.cache = ResultCache()
        self.trust = TrustService()  # the Trust tab's reports; its faithfulness is shown beside the maps
        self.plots = plots.PlotCache()
        self.images = DecodedImages(max_pixels=settings.max_pixels, max_bytes=settings.max_upload_mb * 2**20)
        self.tests = TestImages(self.data_dir, settings=settings)
        self.runner = FineTuneRunner(self.root / FINETUNED,
                                     max_queue=self.shared_limits.max_queue if self.shared else 0,
                                     on_publish=self._published, settings=settings)
        self.limits = Limits.from_settings(settings)
        self.default_a, self.default_b = default_a, default_b
        self.downloads_dir = Path(tempfile.mkdtemp(prefix="explorer-downloads-"))
        self._visitors: dict[str, str] = {}        # session -> the visitor id its browser keeps
        self._in_use: dict[str, dict] = {}         # session -> {slot: ref}: never pruned while shown
        self._bases: dict[int, set[str]] = {}      # a run going on or waiting -> its bases' refs
        self._visit_lock = threading.Lock()

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

    def arrive(self, browser_id, request=None) -> str:
        """Ties the request's session to the id its browser keeps (a new id when it has none)."""
        visitor = browser_id if isinstance(browser_id, str) and re.fullmatch(r"[A-Za-z0-9_-]{16,64}", browser_id) \
            else new_visitor_id()
        session = getattr(request, "session_hash", None)
        if session:
            with self._visit_lock:
                self._visitors[session] = visitor
        self.prune()
        return visitor

    def leave(self, request=None) -> None:
        """A page closed: its slots no longer keep runs from expiring."""
        session = getattr(request, "session_hash", None)
        with self._visit_lock:
            self._in_use.pop(session, None)
            self._visitors.pop(session, None)

    def shown(self, request, slot: str, ref: str) -> None:
        """Remembers what a page's slot shows: a run shown is never pruned."""
        session = getattr(request, "session_hash", None)
        if session:
            with self._visit_lock:
                self._in_use.setdefault(session, {})[slot] = ref

    def protect_bases(self, key: int, refs: set[str] | None) -> None:
        """Keeps a waiting or running job's bases from being pruned (None: the job ended)."""
        with self._visit_lock:
            if refs is None:
                self._bases.pop(key, None)
            else:
                self._bases[key] = refs

    def browser_secret(self) -> str:
        """The key the visitor's id is encrypted with in their browser: $EXPLORER_BROWSER_SECRET, else one
        kept beside the checkpoints, so ids (and with them visitors' runs) survive a restart."""
        if self.settings.browser_secret:
            return self.settings.browser_secret
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

    def _shown_refs(self) -> set[str]:
        with self._visit_lock:
            return {ref for slots in self._in_use.values() for ref in slots.values() if ref}

    def prune(self, keep: set[str] = frozenset()) -> list[str]:
        """Removes expired and over-cap runs (shared mode), never one shown in a page or in use."""
        with self._visit_lock:
            bases = {ref for refs in self._bases.values() for ref in refs}
        return self.runs.prune(self._shown_refs() | bases | set(keep))

    def _published(self, folders, run_id: str, owner: str | None) -> None:
        self.runs.mark_run(folders, run_id, owner)
        self.prune(keep={str(Path(f).relative_to(self.root)) for f in folders})

    # --- models ----------------------------------------------------------------------------------

    def choices(self, request=None) -> list[str]:
        return self.runs.listing(self.owner(request))

    def slot_choices(self, request=None) -> list[tuple[str, str]]:
        """(label, reference) for the model slots: grouped (shipped, the small-data study by size,
        fine-tuned runs) and labelled from the cards, so that a long list stays readable."""
        refs = self.choices(request)
        return catalog.grouped(refs, {r: self.store.local_card(r) for r in refs})

    def study_pairs(self, request=None) -> dict[int, tuple[str, str]]:
        """Training-set size -> (ViT, SPT + LSA) references: the study's kept pairs and the shipped pair."""
        refs = [r for r in self.choices(request) if not r.startswith(f"{FINETUNED}/")]
        return catalog.study_pairs(refs, {r: self.store.local_card(r) for r in refs})

    def ablation_pairs(self, ref_b: str | None) -> list[tuple[str, str, str]]:
        """(label, A, B) for each pair of the 2x2 ablation among the app's own checkpoints of slot B's dataset."""
        refs = [ref for ref in self.runs.listing(None) if not ref.startswith(f"{FINETUNED}/")]
        return catalog.ablation_pairs({ref: self.store.local_card(ref) for ref in refs}, ref_b)

    def model_list(self, request=None) -> dict:
        """The `models` tool's answer: what the slots offer this visitor, each as its card says, and which
        are loaded."""
        loaded = {self.store.key(model.ref) for model in self.store.loaded()}
        listed = [catalog.listed_model(label, ref, self.store.local_card(ref), self.store.key(ref) in loaded)
                  for label, ref in self.slot_choices(request)]
        hub = sorted({model.ref for model in self.store.loaded() if self.runs.is_hub(model.ref)})
        return catalog.model_list(listed, hub, self.initial_refs())

    def my_runs(self, request=None) -> list[str]:
        """The visitor's fine-tuned checkpoints (single user: all of them), newest last."""
        return [r for r in self.choices(request) if r.startswith(f"{FINETUNED}/")]

    def initial_refs(self) -> tuple[str | None, str | None]:
        choices = self.runs.listing(None)

        def pick(want, fallback):
            return want if want in choices else (fallback if fallback in choices else None)

        return (pick(self.default_a, choices[0] if choices else None),
                pick(self.default_b, choices[-1] if choices else None))

    def preload(self) -> None:
        for ref in self.initial_refs():
            if ref:
                self.store.get(ref)

    def prepare_finetuning(self) -> None:
        """Starts the fine-tuning worker in the background (its imports, the compilation cache), so that the
        first Start does not wait for them; on a GPU also has it compile the shipped pair's steps for the
        shapes in EXPLORER_WARM_SHAPES ("classes x images", comma-separated; default "5x800,10x800").
        EXPLORER_PREWARM=0 turns it off (the first Start then starts the worker)."""
        from explorer.finetune.backend import choose_backend, cuda_gpu_present
        setting = self.settings.prewarm
        if setting == "off":
            return
        try:
            backend, _ = choose_backend(self.settings)
            gpu = cuda_gpu_present(self.settings.driver_root) and backend == "jax"
            shapes = [{"classes": classes, "images": images} for classes, images in self.settings.warm_shapes]
            bases = [str(self.root / ref) for ref in self.initial_refs() if ref and (self.root / ref).is_dir()]
            self.runner.prepare(bases if gpu or setting == "compile" else None, shapes)
        except Exception as e:  # noqa: BLE001  (the first Start then starts the worker itself)
            print(f"fine-tuning worker not started in advance: {type(e).__name__}: {e}", flush=True)

    def model(self, ref: str, request=None):
        """The loaded model of a reference the visitor may use (shared mode: listed to them, or a Hub id)."""
        ref = self.runs.check(ref, self.owner(request))
        fetched = self.shared and self.runs.is_hub(ref) and not self.store.has(ref)
        loaded = self.store.get(ref)
        if fetched:  # a new Hub checkpoint came down: keep the app's Hub cache within its cap
            self._prune_hub(also=ref)
        return loaded

    def _prune_hub(self, also: str) -> list[str]:
        def repo_folder(ref):
            repo_id, _ = hub.parse_ref(ref)
            return Path(self.store.cache_dir) / f"models--{repo_id.replace('/', '--')}"
        keep = [repo_folder(r) for r in self._shown_refs() | {also} if self.runs.is_hub(r)]
        return hub.prune_cache(self.store.cache_dir, int(self.shared_limits.max_hub_cache_mb * 1e6), keep)

    def pair(self, a: str, b: str, request=None):
        """Both slots' models, or a gr.Error saying why not."""
        try:
            return self.model(a, request), self.model(b, request)
        except (CheckpointError, ValueError, OSError) as e:
            raise gr.Error(f"model not available: {self.safe(e)}") from None

    def top_count(self, ref: str | None, request=None) -> int:
        """How many classes a top-k of `ref`'s model lists: five, or all of a model with fewer."""
        try:
            return min(5, len(self.model(ref, request).class_names)) if ref else 5
        except (CheckpointError, ValueError, OSError):
            return 5

    def dataset_of(self, ref_b: str | None, request=None) -> str:
        """The dataset whose test images go with slot B's model (CIFAR-10 unless it is CIFAR-100's)."""
        try:
            name = self.model(ref_b, request).card.dataset.name if ref_b else None
        except (CheckpointError, ValueError, OSError):
            name = None
        return name if name in ("cifar10", "cifar100") else "cifar10"

    def test_images(self, ref_b: str | None, need: int, request=None, progress=None):
        """At least `need` test images of B's dataset (downloaded once when need be), or a gr.Error; for a
        model that knows some of its classes (a fine-tune on a few CIFAR-10 classes), those classes' images
        alone. A model of other classes raises NotApplicable, which says why."""
        name = self.dataset_of(ref_b, request)
        try:
            ds = self.tests.dataset(name, need=need, progress=reporter(progress) if progress else None)
        except DatasetError as e:
            raise gr.Error(f"{need:,} {name} test images are not here: {e}") from None
        classes = self.model(ref_b, request).class_names if ref_b else ds.class_names
        if classes == ds.class_names:
            return ds
        try:
            return ds.restricted(classes)
        except DatasetError as e:
            raise NotApplicable(f"_Not for these models: they know {len(classes)} classes of their own, and "
                                f"this tool runs on {name}'s test images ({e})._") from None

    def sample_classes(self, ref_b: str | None, request=None) -> list[str]:
        """The classes a test sample may be drawn from for slot B's model: its dataset's that it knows."""
        name = self.dataset_of(ref_b, request)
        try:
            known = self.model(ref_b, request).class_names if ref_b else None
        except (CheckpointError, ValueError, OSError):
            known = None
        try:
            names = self.tests.dataset(name, download=False).class_names
        except (DatasetError, OSError):  # not here yet: the model's own classes (a Sample downloads them)
            return list(known or [])
        return [c for c in names if known is None or c in known]

    # --- images and errors -------------------------------------------------------------------------

    def image(self, file) -> tuple[np.ndarray, np.ndarray]:
        """(model input, preview) of the image in the page, or a gr.Error saying what is wrong with it."""
        if file is None:
            raise NoImage(NO_IMAGE.strip("_"))
        try:
            return self.images.get(file)
        except ImageInputError as e:
            raise ImageError(str(e)) from None

    def safe(self, error) -> str:
        """An error's text for the page; in shared mode without the server's paths."""
        text = str(error)
        if not self.shared:
            return text
        text = text.replace(str(self.root.resolve()), "checkpoints").replace(str(self.root), "checkpoints")
        return re.sub(r"(?<![\w.])/(?:[^\s'\"/]+/)+([^\s'\"/]+)", r"\1", text)
