"""What every part of the app shares, without the page: the models and their caches, the test images, the
fine-tune runner, and on a shared instance who each page's visitor is and what they may reach.

The page (explorer.ui.context.AppState) adds what only a Gradio page has: the session read from a Gradio
request, and errors shown as Gradio's. A method's `request` is what `session` reads the caller's session id
from: here the id itself (on the page, Gradio's request); None outside a page.
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from pathlib import Path

import numpy as np

from explorer.analysis import plots
from explorer.analysis.robustness import PairCurves
from explorer.analysis.trust_service import TrustService
from explorer.app.models import ModelStore
from explorer.app.results import ResultCache
from explorer.app.starts import Starts
from explorer.app.visitors import Visitors, browser_secret
from explorer.checkpoints import catalog, hub
from explorer.checkpoints.finetuned import FINETUNED, REFUSED, RunStore, SharedLimits, shared_mode
from explorer.checkpoints.held_out import read_held_out
from explorer.checkpoints.store import CheckpointError
from explorer.core.protocol import Shape
from explorer.core.settings import PROJECT, Settings
from explorer.data.datasets import Dataset, DatasetError
from explorer.data.inputs import DecodedImages
from explorer.data.samples import Sample, TestImages
from explorer.finetune.backend import choose_backend, cuda_gpu_present
from explorer.finetune.plan import Limits, Plan, job_data, plan_job
from explorer.finetune.runner import FineTuneRunner
from explorer.model.config import PRESETS

# The shipped 0.2 M pair: a first visit's pair where the settings' is not here (a checkpoint folder of one's own).
SHIPPED_PAIR = ("cifar10-vanilla", "cifar10-spt_lsa")
LABELLED_ZIP = "my labelled zip"  # the Trust tab's choice of a zip of class folders to judge the models on


def default_data_dir(settings: Settings) -> str | None:
    """$EXPLORER_DATA_DIR, else a `shared/data` folder beside the project (this repo's layout), else None:
    the bundled sample, the Keras cache and downloads on demand (explorer.data.datasets)."""
    if settings.data_dir:
        return settings.data_dir
    beside = PROJECT.parent / "shared" / "data"
    return str(beside) if beside.is_dir() else None


class NotApplicable(Exception):
    """A tool over the test set that does not apply to the models in the slots; the message says why."""


def own_classes(count: int, dataset: str) -> str:
    """Why a tool over the test set has nothing to judge models of `count` classes of their own by."""
    return (f"Not for these models: they know {count} classes of their own, which {dataset}'s test set does not "
            f"have, and slot B's checkpoint holds no held-out images of them (a run trained on all of its images, "
            f"or a model from elsewhere). Trust's “{LABELLED_ZIP}” judges them on a zip of their classes.")


def one_class_set(classes_a: list[str], classes_b: list[str]) -> None:
    """Raises NotApplicable, saying why, when the two models know different classes: for a tool that measures
    both on one labelled set (a mixed pair: A of CIFAR-10, B fine-tuned on classes of its own)."""
    if list(classes_a) == list(classes_b):
        return

    def named(classes):
        return ", ".join(classes[:4]) + (f" and {len(classes) - 4} more" if len(classes) > 4 else "")
    raise NotApplicable(f"Not for this pair: A knows {len(classes_a)} classes ({named(classes_a)}), B "
                        f"{len(classes_b)} ({named(classes_b)}), and this tool measures both on one labelled set "
                        f"of the same classes. Put two models of the same classes in the slots; Compare, Patches "
                        f"and Attention answer for each by its own.")


class ExplorerState:
    """State shared by all sessions: the model cache, probe results, test images and the fine-tune runner;
    in shared mode (a public Space) also who each session is and what they may reach. `settings` (default:
    the environment's, read here) give what `root`, `data_dir` and `shared` do not."""

    def __init__(self, root: str | os.PathLike | None = None, data_dir: str | None = None,
                 default_a: str | None = None, default_b: str | None = None, shared: bool | None = None,
                 settings: Settings | None = None):
        self.settings = settings = Settings.from_env() if settings is None else settings
        self.root = Path(root or settings.checkpoints or PROJECT / "checkpoints")
        self.data_dir = data_dir if data_dir is not None else default_data_dir(settings)
        self.shared = shared_mode(settings) if shared is None else shared
        self.shared_limits = SharedLimits.from_settings(settings)
        self.runs = RunStore(self.root, self.shared, self.shared_limits)
        self.visitors = Visitors(self.runs)
        hub_cache = str(self.root / ".hub-cache") if self.shared else None
        self.store = ModelStore(self.root, cache_dir=hub_cache,
                                max_hub_bytes=int(self.shared_limits.max_hub_mb * 1e6) if self.shared else None)
        self.cache = ResultCache()
        self.shift_curves = PairCurves()  # the Evidence tab's shift robustness over the test set
        self.plots = plots.PlotCache()
        self.images = DecodedImages(max_pixels=settings.max_pixels, max_bytes=settings.max_upload_mb * 2**20)
        self.tests = TestImages(self.data_dir, settings=settings)
        self.runner = FineTuneRunner(self.root / FINETUNED,
                                     max_queue=self.shared_limits.max_queue if self.shared else 0,
                                     on_publish=self.visitors.published, settings=settings)
        self.starts = Starts(self.runner, self.visitors)  # each visitor's last Start, for the pages they open
        self.limits = Limits.from_settings(settings)
        self.default_a, self.default_b = default_a or settings.model_a, default_b or settings.model_b
        self.downloads_dir = Path(tempfile.mkdtemp(prefix="explorer-downloads-"))  # what a visitor downloads
        # The Trust tab's reports and their files; its faithfulness is shown beside the maps.
        self.trust = TrustService(downloads=self.downloads_dir)

    # --- visitors (shared mode: explorer.app.visitors) --------------------------------------------------

    def session(self, request) -> str | None:
        """The session id `request` names: here the request is the id itself (the page reads it from
        Gradio's request)."""
        return request

    def owner(self, request=None) -> str | None:
        """Whose runs a request may see: the hashed id its browser keeps (shared mode), else None."""
        return self.visitors.owner(self.session(request))

    def arrive(self, browser_id, request=None) -> str:
        """Ties the request's session to the id its browser keeps (a new id when it has none)."""
        return self.visitors.arrive(browser_id, self.session(request))

    def leave(self, request=None) -> None:
        """A page closed: its slots no longer keep runs from expiring."""
        self.visitors.leave(self.session(request))

    def shown(self, request, slot: str, ref: str) -> None:
        """Remembers what a page's slot shows: a run shown is never pruned."""
        self.visitors.shown(self.session(request), slot, ref)

    def browser_secret(self) -> str:
        """The key the visitor's id is encrypted with in their browser (explorer.app.visitors.browser_secret)."""
        return browser_secret(self.settings.browser_secret, self.root)

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

    def paper_pair(self) -> tuple[str, str] | None:
        """The paper-scale pair (ViT, SPT + LSA) among the app's own checkpoints, when both are here."""
        refs = [ref for ref in self.runs.listing(None) if ref.startswith(f"{catalog.PAPER}/")]
        return catalog.paper_pair({ref: self.store.local_card(ref) for ref in refs})

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

    def checkpoint_zip(self, ref: str, request=None) -> Path:
        """A zip of one of the visitor's fine-tuned checkpoints (`<name>/` and its files), in a new folder under
        downloads_dir; any other reference is refused (CheckpointError, REFUSED: it reveals nothing)."""
        if ref not in self.my_runs(request):
            raise CheckpointError(REFUSED)
        return self.runs.zip_checkpoint(ref, self.owner(request), self.downloads_dir / uuid.uuid4().hex[:12])

    def initial_refs(self) -> tuple[str | None, str | None]:
        """The pair a first visit opens with: the settings' (EXPLORER_MODEL_A / _B, by default the paper-scale
        pair) where both are here, else the shipped pair, else each slot's choice or the list's ends."""
        choices = self.runs.listing(None)
        for a, b in ((self.default_a, self.default_b), SHIPPED_PAIR):
            if a in choices and b in choices:
                return a, b

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
        setting = self.settings.prewarm
        if setting == "off":
            return
        try:
            backend, _ = choose_backend(self.settings)
            gpu = cuda_gpu_present(self.settings.driver_root) and backend == "jax"
            shapes = [Shape(classes, images) for classes, images in self.settings.warm_shapes]
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
        keep = [repo_folder(r) for r in self.visitors.shown_refs() | {also} if self.runs.is_hub(r)]
        return hub.prune_cache(self.store.cache_dir, int(self.shared_limits.max_hub_cache_mb * 1e6), keep)

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

    def held_out(self, ref_b: str | None, request=None) -> Dataset | None:
        """Slot B's model's own held-out images (explorer.checkpoints.held_out) when it knows classes its
        dataset's test set does not have (a fine-tune on a zip of classes of its own); else None."""
        if not ref_b:
            return None
        try:
            model = self.model(ref_b, request)
        except (CheckpointError, ValueError, OSError):
            return None
        try:
            cifar = self.tests.dataset(self.dataset_of(ref_b, request), download=False).class_names
        except (DatasetError, OSError):  # that test set is not here: its classes are unknown, so are theirs
            return None
        if all(c in cifar for c in model.class_names):
            return None
        return read_held_out(model.folder, model.class_names)

    def test_images(self, ref_b: str | None, need: int, request=None, progress=None):
        """At least `need` test images of B's dataset (downloaded once when need be, `progress(fraction or
        None, message)` following it), or a DatasetError saying which are not here; for a model that knows
        some of its classes (a fine-tune on a few CIFAR-10 classes), those classes' images alone; for a model
        of classes of its own, the images its fine-tune held out (all of them, however few). A model of other
        classes without them raises NotApplicable, which says why."""
        held = self.held_out(ref_b, request)
        if held is not None:
            return held
        name = self.dataset_of(ref_b, request)
        try:
            ds = self.tests.dataset(name, need=need, progress=progress)
        except DatasetError as e:
            raise DatasetError(f"{need:,} {name} test images are not here: {e}") from None
        classes = self.model(ref_b, request).class_names if ref_b else ds.class_names
        if classes == ds.class_names:
            return ds
        try:
            return ds.restricted(classes)
        except DatasetError:
            raise NotApplicable(own_classes(len(classes), name)) from None

    def sample_classes(self, ref_b: str | None, request=None) -> list[str]:
        """The classes a test sample may be drawn from for slot B's model: its dataset's that it knows, or its
        held-out images' (a model of classes of its own)."""
        held = self.held_out(ref_b, request)
        if held is not None:
            return [c for i, c in enumerate(held.class_names) if np.any(held.y_test == i)]
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

    def sample(self, class_name: str | None, ref_b: str | None, seed: int | None = None, request=None,
               progress=None) -> Sample:
        """A test image for slot B's model (random, or of one class) as a file with its true label: of its
        dataset's test set, or of its own held-out images. A DatasetError when the data cannot be had, a
        ValueError for a class there is no image of."""
        held = self.held_out(ref_b, request)
        if held is not None:
            return self.tests.sample_held_out(held, class_name, seed)
        return self.tests.sample(self.dataset_of(ref_b, request), class_name, seed, progress,
                                 classes=self.sample_classes(ref_b, request))

    # --- fine-tuning -------------------------------------------------------------------------------

    def finetune_plan(self, bases: list[tuple[str, str | None]], scratch: tuple[str, str], data: str, zip_file,
                      epochs, lr, batch_size, images, freeze: bool, name: str | None, request=None, progress=None,
                      train_on_all: bool = False) -> Plan:
        """A Start's form as a validated plan.Plan: `bases` (tag, reference) of the checkpoints to fine-tune,
        each one the visitor may use, or none for a new model of `scratch` (preset, variant). CIFAR comes
        whole (downloaded once if need be, `progress(fraction or None, message)` following it). Every refusal
        is a JobError, DatasetError, CheckpointError or OSError that says why."""
        owner = self.owner(request)
        members = self.store.bases([(tag, self.runs.check(ref, owner) if ref else ref) for tag, ref in bases])
        preset = scratch[0]
        size = members[0].image_size if members else PRESETS.get(preset, PRESETS["tiny"]).image_size

        def load(name):
            return self.tests.training_data(name, progress=progress)

        dataset = job_data(data, zip_file, load, self.limits, size, train_on_all=bool(train_on_all))
        return plan_job(members, dataset, epochs, lr, batch_size, images, bool(freeze), (name or "").strip(),
                        self.limits, scratch=scratch if not bases else None, train_on_all=bool(train_on_all))

    # --- errors ------------------------------------------------------------------------------------

    def safe(self, error) -> str:
        """An error's text for the page; in shared mode without the server's paths."""
        text = str(error)
        if not self.shared:
            return text
        text = text.replace(str(self.root.resolve()), "checkpoints").replace(str(self.root), "checkpoints")
        return re.sub(r"(?<![\w.])/(?:[^\s'\"/]+/)+([^\s'\"/]+)", r"\1", text)

