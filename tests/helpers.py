"""What several test modules use: paths, tiny configs, CIFAR written in its original layout, a Hugging Face
cache laid out by hand, a checkpoints folder holding the tiny pair, the app started as a server, a test's
function run on JAX in a process of its own, and the runner's worker. Fixtures live in conftest.py."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Debian's headless Chromium, as the browser tests and the screenshot scripts drive it.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync"]
# What every test page runs before its own scripts: a loop of animation frames (a callback that asks for the
# next frame) at most 10 frames a second, and no CSS transitions or animations. Headless Chromium draws in
# software, and Gradio's status trackers redraw their timers every frame while an event is pending:
# bench/calm_page.py measured a page with one pending event of ten outputs at 0.71 of a CPU, 0.11 calmed; the
# app's idle page 0.064 and 0.029. A slow host pays that for every second a test waits. A frame asked for
# outside a frame comes at once, as in any browser: Gradio awaits one before a newly shown tab's components take
# their state, and a click on an accordion in that tab before then is undone (holding back every frame by 100 ms
# undid the browser tests' clicks). Neither Gradio's frontend nor the app waits for a transition's end.
CALM_PAGE = """(() => {
  const frame = window.requestAnimationFrame.bind(window), cancel = window.cancelAnimationFrame.bind(window);
  const framed = new Map(), waiting = new Map();  // our id: the browser's frame id; our id: a step held back
  let inFrame = false, last = 0, tick = null;
  const run = (id, step) => framed.set(id, frame((t) => {
    framed.delete(id); inFrame = true;
    try { step(t); } finally { inFrame = false; }
  }));
  // Every step held back runs in the same frame, 100 ms on: ten loops make ten frames a second, not a hundred.
  const release = () => {
    tick = null; const steps = [...waiting]; waiting.clear();
    steps.forEach(([id, step]) => run(id, step));
  };
  window.requestAnimationFrame = (step) => {
    const id = ++last;
    if (!inFrame) run(id, step);
    else { waiting.set(id, step); tick ??= setTimeout(release, 100); }
    return id;
  };
  window.cancelAnimationFrame = (id) => {
    if (framed.has(id)) cancel(framed.get(id));
    framed.delete(id); waiting.delete(id);
  };
  document.addEventListener('DOMContentLoaded', () => {
    const style = document.createElement('style');
    style.textContent = '*, *::before, *::after { transition: none !important; animation: none !important; }';
    document.head.appendChild(style);
  });
})();"""


class CalmBrowser:
    """A Playwright browser whose new pages and contexts run CALM_PAGE first (everything else as the browser)."""

    def __init__(self, browser):
        self._browser = browser

    def new_page(self, **options):
        page = self._browser.new_page(**options)
        page.add_init_script(CALM_PAGE)
        return page

    def new_context(self, **options):
        context = self._browser.new_context(**options)
        context.add_init_script(CALM_PAGE)
        return context

    def __getattr__(self, name):
        return getattr(self._browser, name)


# Nothing listens on the discard port: a download a test did not arrange fails at once, offline.
NO_NETWORK = "http://127.0.0.1:9/"

TINY = dict(image_size=32, input_size=16, patch_size=4, num_layers=2, projection_dim=16, num_heads=2,
            key_dim=8, mlp_units=(32, 16), head="pool", head_units=(), dropout=0.0, head_dropout=0.0)

# The host's speed, for waits that load models, run analyses or train (the browser tests): one round of
# host_round takes about SPEED_REFERENCE_S on a 2-core host training at about 500 images/s with nothing beside
# it; a slower host (or one busy with other work) waits that much longer, up to WAIT_FACTOR_MOST times.
SPEED_REFERENCE_S = 0.10
WAIT_FACTOR_MOST = 6.0

# Every variant and tau mode that differs in weights: vanilla and spt have no tau.
VARIANT_MODES = [("vanilla", "layer"), ("spt", "layer"), ("lsa", "layer"), ("lsa", "head"),
                 ("spt_lsa", "layer"), ("spt_lsa", "head")]


def host_round() -> float:
    """Seconds of a fixed CPU workload (small float32 matrix products, as a model's steps, and a Python loop,
    as a server's handlers): about SPEED_REFERENCE_S on a fast host."""
    a = np.random.default_rng(0).standard_normal((160, 160), dtype=np.float32)
    began = time.perf_counter()
    for _ in range(800):
        a = np.tanh(a @ a.T * 0.01)
    total = 0
    for i in range(3_000_000):
        total += i % 7
    return time.perf_counter() - began


def wait_factor(seconds: float, reference: float = SPEED_REFERENCE_S, most: float = WAIT_FACTOR_MOST) -> float:
    """How many times longer than on the reference host to wait, for a host whose round took `seconds`: at
    least 1 (a faster host keeps the waits as written), at most `most` (a host slower than that fails)."""
    return float(min(most, max(1.0, seconds / reference)))


@functools.cache
def host_slowness() -> float:
    """wait_factor of this host, measured once per process: the median of five rounds (about half a second
    on a fast host)."""
    return wait_factor(float(np.median([host_round() for _ in range(5)])))


def scaled(ms: float) -> int:
    """A wait of `ms` on the reference host (a Playwright timeout), as long as this host needs."""
    return int(ms * host_slowness())


def docs_picture(name: str, tmp_path: Path) -> Path:
    """Where a browser test saves a picture the docs show: docs/ itself when RETAKE_DOCS_PICTURES=1 (the docs'
    pictures retaken), else the test's own folder, so that a test run leaves the tree as it was."""
    return (ROOT / "docs" if os.environ.get("RETAKE_DOCS_PICTURES") == "1" else tmp_path) / name


def tiny_config(**overrides):
    from explorer.model.config import ViTConfig
    return ViTConfig(**{**TINY, **overrides})


@contextlib.contextmanager
def eager_compile():
    """Within it, Keras runs every model's train, test and predict steps eagerly, untraced (`run_eagerly`):
    for tests of what a run does around its steps, where tracing a tiny ViT costs about 2.5 s a model and the
    numbers are the same (the `eager_steps` fixture; what the app runs, the traced steps, is trained by
    `tiny_checkpoints` and by every CLI and end-to-end test)."""
    import keras
    compile_model = keras.Model.compile

    def compile_eagerly(self, *args, **kwargs):
        return compile_model(self, *args, **{**kwargs, "run_eagerly": True})
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        mp.setattr(keras.Model, "compile", compile_eagerly)
        # Eagerly, Keras' predict says a lone image tensor does not match the model's one named input, and
        # takes it, as its traced predict does without a word.
        warnings.filterwarnings("ignore", "The structure of `inputs` doesn't match", UserWarning)
        yield


def write_batch(path: Path, images: np.ndarray, labels, key: bytes = b"labels", extra: dict | None = None) -> None:
    """One CIFAR pickle as the original archives hold it: bytes keys, (N, 3072) channel-major uint8."""
    data = np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(len(images), 3072)
    with open(path, "wb") as f:
        pickle.dump({b"batch_label": path.name.encode(), key: [int(v) for v in labels], b"data": data,
                     b"filenames": [f"{path.name}_{i}.png".encode() for i in range(len(images))], **(extra or {})}, f)


def write_cifar10(base: Path, x_train, y_train, x_test, y_test, class_names, readme: str | None = None) -> Path:
    """`base/cifar-10-batches-py` in the layout of cifar-10-python.tar.gz (five training batches)."""
    folder = Path(base) / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for i, (x, y) in enumerate(zip(np.array_split(x_train, 5), np.array_split(y_train, 5), strict=True), 1):
        write_batch(folder / f"data_batch_{i}", x, y)
    write_batch(folder / "test_batch", x_test, y_test)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [c.encode() for c in class_names], b"num_vis": 3072,
                     b"num_cases_per_batch": len(x_train) // 5}, f)
    if readme is not None:
        (Path(base) / "README.md").write_text(readme)
    return folder


def training_images(sample) -> tuple[np.ndarray, np.ndarray]:
    """2,000 training images made from the sample's 1,000: each mirrored, and each moved 2 px."""
    x = np.concatenate([sample.x_test[:, :, ::-1], np.roll(sample.x_test, 2, axis=(1, 2))])
    return x, np.concatenate([sample.y_test, sample.y_test])


CIFAR100_NAMES = ["apple", "aquarium_fish", "baby"] + [f"class_{i:02d}" for i in range(3, 100)]


def populate_hf_cache(cache_dir: Path, repo_id: str, folder: Path, commit: str,
                      refs: tuple[str, ...] = ("main",)) -> Path:
    """Lays `folder` out as huggingface_hub's cache does after a download of `repo_id` at `commit`."""
    repo = Path(cache_dir) / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    blobs = repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir(exist_ok=True)
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file():
            import hashlib
            blob = blobs / hashlib.sha256(path.read_bytes()).hexdigest()
            shutil.copyfile(path, blob)
            target = snapshot / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(blob, target.parent), target)
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(commit)
    return snapshot


def pair_folder(root: Path, tiny_checkpoints: dict, **card) -> Path:
    """`root` holding the tiny checkpoints under the names of the shipped pair (cifar10-vanilla and
    cifar10-spt_lsa), their cards updated with `card` (update_card's sections) when given."""
    from explorer.checkpoints.store import update_card
    for variant, path in tiny_checkpoints.items():
        shutil.copytree(path, root / f"cifar10-{variant}")
        if card:
            update_card(root / f"cifar10-{variant}", **card)
    return root


# Ten classes that CIFAR-10 has not (a fine-tune on a zip of classes of its own), in the models' order.
OWN_CLASSES = ["apple", "bicycle", "castle", "dolphin", "elephant", "forest", "girl", "house", "lamp", "maple"]


def own_pair(root: Path, tiny_checkpoints: dict, held_out: tuple[np.ndarray, np.ndarray] | None,
             classes: list[str] = OWN_CLASSES) -> list[str]:
    """The tiny pair under `root/finetuned/own-<variant>` as models of `classes` (their cards say so: no
    training needed to ask what a tool makes of such a pair), each with the held-out images `held_out`
    (images, labels in `classes`) as a fine-tune writes them, or none. Returns their references."""
    from explorer.checkpoints.held_out import write_held_out
    from explorer.checkpoints.store import update_card
    refs = []
    for variant, path in tiny_checkpoints.items():
        folder = root / "finetuned" / f"own-{variant}"
        shutil.copytree(path, folder)
        update_card(folder, class_names=list(classes), dataset={"name": "own", "num_classes": len(classes)})
        if held_out is not None:
            write_held_out(folder, *held_out, list(classes), "own")
        refs.append(f"finetuned/own-{variant}")
    return refs


# XLA's lowest optimisation level for tests that compile on JAX's CPU backend (see run_on_jax).
JAX_CPU_XLA_FLAGS = "--xla_backend_optimization_level=0"


def run_on_jax(call: str, timeout: float) -> dict:
    """`call` ("module:function", a function of the tests that returns a JSON-able dict) run in a process of
    its own on Keras' JAX backend on the CPU, whatever the tester's JAX or XLA settings; what it returned.

    Compiled at XLA's lowest optimisation level (JAX_CPU_XLA_FLAGS): these tests compare what runs compute,
    which the level changes by float32 rounding at most, and compiling, most of their time, costs a quarter
    less."""
    module, function = call.split(":")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(PYTHONPATH=str(ROOT), KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", XLA_FLAGS=JAX_CPU_XLA_FLAGS)
    code = f"import json; from {module} import {function} as f; print(json.dumps(f()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def worker_pid(runner) -> int | None:
    """The process id of a FineTuneRunner's worker while it is alive, else None."""
    worker = runner.supervisor.current
    return worker.pid if worker is not None and worker.alive() else None


def stop(proc: subprocess.Popen, wait: float = 10) -> None:
    """Ends a process the tests started (an app, a server): terminated, killed if it has not ended in `wait` s."""
    proc.terminate()
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()


def slot_labels(client) -> dict[str, str]:
    """Each listed model's one name on the page (its slot label), by reference, from the `models` tool."""
    return {m["ref"]: m["label"] for m in client.predict(api_name="/models")["models"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The pair the app's tests open with: the shipped 0.2 M pair they were written for, whatever the first visit's
# default is (tests/e2e/test_browser_first_screen.py checks that default, with first_visit=None).
TEST_PAIR = {"EXPLORER_MODEL_A": "cifar10-vanilla", "EXPLORER_MODEL_B": "cifar10-spt_lsa"}


def start_app(checkpoints, env_extra=None, timeout=120, data_dir=None, first_visit=TEST_PAIR, prewarm=True):
    """`python app.py` on a free port; with `data_dir` its CIFAR comes from there ($EXPLORER_DATA_DIR); its first
    visit's pair `first_visit` (None: the app's default). `prewarm=False`: for an app whose tests never fine-tune,
    no fine-tuning worker started in advance (EXPLORER_PREWARM=0): its imports cost about 4 CPU-seconds, and its
    idle wait more on a slow host."""
    port = free_port()
    data = {"EXPLORER_DATA_DIR": str(data_dir)} if data_dir else {}
    if not prewarm:
        data["EXPLORER_PREWARM"] = "0"
    # The tester's own MCP settings and first pair never decide what is tested (the MCP server is on by default).
    inherited = {k: v for k, v in os.environ.items()
                 if k not in ("GRADIO_MCP_SERVER", "EXPLORER_MCP", *TEST_PAIR)}
    env = {**inherited, **(first_visit or {}), "EXPLORER_CHECKPOINTS": str(checkpoints), **data,
           "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1", "PYTHONUNBUFFERED": "1",
           "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", **(env_extra or {})}
    log = open(checkpoints.parent / f"app-{port}.log", "w")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"app exited with {proc.returncode}: {open(log.name).read()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return proc, url, log.name
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"app did not answer within {timeout} s: {open(log.name).read()[-3000:]}")


def class_zip(path: Path, images: np.ndarray, labels: np.ndarray, names: list[str]) -> Path:
    """A zip of class folders (the Fine-tune tab's format): images[i] as set/<names[labels[i]]>/<i>.png."""
    import io
    import zipfile

    from PIL import Image
    with zipfile.ZipFile(path, "w") as z:
        for i, (image, label) in enumerate(zip(images, labels, strict=True)):
            buffer = io.BytesIO()
            Image.fromarray(image).save(buffer, format="PNG")
            z.writestr(f"set/{names[label]}/{i:04d}.png", buffer.getvalue())
    return path


def shipped_copy(folder: Path) -> Path:
    """A copy of the shipped checkpoints (the study's and the ablation's included, no fine-tuned runs or hidden
    caches) under `folder`/checkpoints, for an app that may write beside them."""
    root = folder / "checkpoints"
    shutil.copytree(ROOT / "checkpoints", root, ignore=shutil.ignore_patterns("finetuned", ".*"))
    return root


@contextlib.contextmanager
def serving(root: Path, data_dir, **kwargs):
    """`python app.py` over the checkpoints folder `root` (start_app's other arguments), for the block: (its
    URL, root); stopped after it."""
    proc, url, _ = start_app(root, data_dir=data_dir, **kwargs)
    try:
        yield url, root
    finally:
        stop(proc)


def tiny_pair_served(tmp_path_factory, tiny_checkpoints, data_dir, **kwargs):
    """The app with the tiny pair as the 45,000-image pair (as the shipped pair is): (URL, its checkpoints).
    `kwargs`: start_app's."""
    root = pair_folder(tmp_path_factory.mktemp("first-hour") / "checkpoints", tiny_checkpoints,
                       dataset={"train_images": 45000})
    return serving(root, data_dir, timeout=300, **kwargs)


def shipped_served(tmp_path_factory, data_dir, **kwargs):
    """The app on copies of the shipped checkpoints, the small-data study's included: (URL, its checkpoints).
    `kwargs`: start_app's."""
    return serving(shipped_copy(tmp_path_factory.mktemp("second-pass")), data_dir, timeout=300, **kwargs)


def stored_run(store, owner: str, name: str, ended: float, run_id: str | None = None, source=None) -> str:
    """A run of `owner`'s stored as a fine-tune stores one (a copy of `source`, by default the store's
    shipped checkpoint, marked as the run's) that ended at `ended`; its reference."""
    from explorer.checkpoints.store import update_card
    folder = store.out_dir(owner) / name
    shutil.copytree(source or store.root / "shipped", folder)
    store.mark_run([folder], run_id or name, owner)
    update_card(folder, run={"id": run_id or name, "owner": owner, "ended": ended})
    return f"finetuned/{owner}/{name}"


def pick(cifar10, classes: list[str], per_class: int, offset: int = 0):
    """Test images of the named CIFAR-10 classes (labels renumbered in that order)."""
    index = [np.flatnonzero(cifar10.y_test == cifar10.class_names.index(c))[offset:offset + per_class]
             for c in classes]
    x = np.concatenate([cifar10.x_test[i] for i in index])
    y = np.concatenate([np.full(len(i), k) for k, i in enumerate(index)])
    return x, y



def plan_members(tiny_checkpoints, *tags):
    """A plan's members from the tiny pair: A the vanilla model, B the SPT/LSA one."""
    from explorer.checkpoints.store import load_checkpoint
    from explorer.finetune.plan import Base
    out = []
    for tag in tags:
        folder = tiny_checkpoints["vanilla" if tag == "A" else "spt_lsa"]
        out.append(Base(tag, f"{tag}: tiny", str(folder), load_checkpoint(folder)[1]))
    return out
