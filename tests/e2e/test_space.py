"""A Space build, emulated on this machine: a fresh venv with exactly requirements.txt, an empty HOME, a
copy of the project with nothing beside it, `python app.py` as a Space runs it (0.0.0.0:7860); then
every tab answers through gradio_client on the embedded default (the bundled CIFAR-10 sample)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
from PIL import Image

from explorer.checkpoints.store import read_card
from explorer.model.config import ViTConfig
from tests.helpers import NO_NETWORK, ROOT, slot_labels, stop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PORT = 7860  # what a Space serves on
A, B = "cifar10-vanilla", "cifar10-spt_lsa"
# What docs/deploy.md's upload leaves out (hf upload ... --exclude), and what the copy below leaves out beside
# it: what is never in a clone or only caches.
DOCUMENTED = {".venv", "runs", ".git", "ablation", "study", "paper"}
NOT_IN_A_CLONE = ["*/__pycache__/*", "__pycache__/*", "*.pyc", ".pytest_cache/*", ".gradio/*"]


def documented_excludes() -> list[str]:
    return re.findall(r'--exclude "([^"]+)"', (ROOT / "docs" / "deploy.md").read_text())


def uploaded(root=ROOT) -> list[str]:
    """The files `hf upload . . --exclude ...` sends, chosen by huggingface_hub's own filter (the one
    upload_folder applies): a pattern matches a path from the folder's root, so `study/*` leaves out the
    top-level study/ and keeps explorer/study/ and checkpoints/study/."""
    from huggingface_hub.utils import filter_repo_objects
    files = [os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
             for d, _, names in os.walk(root) for f in names]
    return list(filter_repo_objects(files, ignore_patterns=documented_excludes() + NOT_IN_A_CLONE))


def front_matter() -> dict:
    text = (ROOT / "README.md").read_text()
    block = text.split("---\n")[1]
    pairs = (line.split(":", 1) for line in block.splitlines() if ":" in line)
    return {k.strip(): v.strip().strip('"') for k, v in pairs}


def test_the_front_matter_names_the_gradio_that_requirements_pin():
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", (ROOT / "requirements.txt").read_text(), re.M))
    meta = front_matter()
    assert meta["sdk"] == "gradio" and pins["gradio"] == meta["sdk_version"], (pins.get("gradio"), meta)
    assert meta["app_file"] == "app.py"


def test_the_documented_upload_leaves_out_the_work_folders_and_keeps_the_app():
    assert set(documented_excludes()) == {f"{name}/*" for name in DOCUMENTED}
    sent = uploaded()
    folders = {path.split("/", 1)[0] for path in sent}
    assert not folders & DOCUMENTED and {"app.py", "explorer", "checkpoints"} <= folders
    # folders of the same name deeper down are the app's: the study's code, the kept study pairs
    assert "explorer/study/report.py" in sent and any(p.startswith("checkpoints/study/") for p in sent)
    # A work folder added later (training state, data) that the upload forgets shows here: the Space is the app
    # (about 75 MB with its checkpoints, the paper-scale pair's 23 MB among them, and docs' pictures: docs/deploy.md),
    # not the project's work (a GPU window's state is 31 MB, the ablation's stages 24 MB).
    sizes = {}
    for path in sent:
        top = path.split("/", 1)[0]
        sizes[top] = sizes.get(top, 0) + (ROOT / path).stat().st_size
    assert sum(sizes.values()) < 80 * 2**20, sorted(sizes.items(), key=lambda kv: -kv[1])[:5]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    """The Space's app, served from a fresh venv and an empty HOME; yields its URL."""
    if not _port_free(PORT):
        pytest.fail(f"port {PORT} is taken on this machine; the Space check serves on it, as a Space does")
    work = tmp_path_factory.mktemp("space")
    repo = work / "app"  # nothing beside it: no ../shared
    for path in uploaded():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, repo / path)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # --no-compile: what is installed is the same; the app compiles what it imports as it starts (a pip install of
    # requirements.txt compiling every module took 69 CPU-seconds, without 38)
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
                          "-r", str(repo / "requirements.txt")], capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    home = work / "home"
    home.mkdir()
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(HOME=str(home), GRADIO_SERVER_NAME="0.0.0.0", GRADIO_SERVER_PORT=str(PORT), PYTHONUNBUFFERED="1",
               # SPACE_ID as on every Space (shared mode). Not SYSTEM=spaces with it: Gradio would then start
               # the Spaces hot-reloader, which needs HF's `spaces` package that only the Space runtime has.
               SPACE_ID="someone/spt-lsa-explorer",
               HF_HUB_OFFLINE="1", EXPLORER_CIFAR_URL=NO_NETWORK)  # no test reaches the internet
    log = open(work / "app.log", "w")
    proc = subprocess.Popen([str(python), "app.py"], cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{PORT}/"
    try:
        deadline = time.time() + 240
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the Space's app exited with {proc.returncode}: {(work / 'app.log').read_text()[-3000:]}")
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                if time.time() > deadline:
                    pytest.fail(f"the Space's app did not answer in 240 s: {(work / 'app.log').read_text()[-3000:]}")
                time.sleep(1)
        yield {"url": url, "home": home, "repo": repo, "log": work / "app.log"}
    finally:
        stop(proc, 15)
        log.close()


def test_every_tab_answers_on_the_embedded_default(space, tmp_path):
    from gradio_client import Client, handle_file

    from explorer.data.datasets import sample_set
    client = Client(space["url"], verbose=False)
    sample = sample_set()

    # Model slots, with the shipped pair.
    for api, ref in (("/load_model_a", A), ("/load_model_b", B)):
        shown, card = client.predict(ref, api_name=api)
        assert shown == ref and "test top-1" in card
    # Sample, from the bundled set: every class.
    for class_name in ("airplane", "frog", "truck"):
        path, _, truth = client.predict(class_name, B, 7, api_name="/sample")
        index = int(truth.split("#")[1].split(")")[0])
        assert sample.class_names[sample.y_test[index]] == class_name
        np.testing.assert_array_equal(np.asarray(Image.open(path)), sample.x_test[index])
    # Compare, on the sample and on an upload.
    label_a, label_b, verdict = client.predict(handle_file(path), A, B, api_name="/compare")
    assert len(label_a["confidences"]) == 5 and "True label **truck**" in verdict
    upload = tmp_path / "upload.png"
    Image.fromarray(sample.x_test[3]).resize((96, 64)).save(upload)
    assert client.predict(handle_file(str(upload)), api_name="/image")[1] == ""
    # Find disagreements over the whole sample; more than it, offline, says what to do.
    summary, table, gallery = client.predict(A, B, 1000, api_name="/disagreements")
    assert "first **1000** cifar10 test images (bundled with the app)" in summary and len(table["data"]) == 10
    with pytest.raises(Exception, match="EXPLORER_DATA_DIR"):
        client.predict(A, B, 2000, api_name="/disagreements")
    # Patches, Attention, Locality (this image and the test images), Tau.
    _, grids, note = client.predict(handle_file(str(upload)), A, B, api_name="/patches")
    assert len(grids) == 5 and "Patch size" in note
    outputs = client.predict(handle_file(str(upload)), A, B, 5, "all heads", 16, 16, api_name="/attention")
    assert len(outputs) == 4 and "Query patch" in outputs[2]
    for scope in ("this image", "64 test images"):
        table = client.predict(handle_file(str(upload)), A, B, scope, api_name="/locality")[2]
        assert len(table["data"]) == 2
    tau_table, note = client.predict(A, B, api_name="/tau")[2:]
    layers = ViTConfig.from_dict(read_card(ROOT / "checkpoints" / B).config).num_layers
    named = slot_labels(client)  # each model by its one name on the page
    assert [r[0] for r in tau_table["data"]] == [f"B: {named[B]}"] * layers  # the slots' models only: B's layers
    assert f"**A**: {named[A]} is a ViT without LSA: it has no tau." in note
    # Fine-tune: the tab answers (a run needs the full data or a zip; see test_ui and test_load).
    assert "No run" in client.predict(api_name="/cancel")
    # A Space runs in shared mode: a visitor id for the browser, and the button to duplicate it.
    visitor = client.predict(None, api_name="/visitor")[0]
    assert isinstance(visitor, str) and len(visitor) >= 16
    import urllib.request
    config = urllib.request.urlopen(space["url"] + "config", timeout=30).read().decode()
    assert "Duplicate this Space to fine-tune on your own hardware" in config and "A shared instance" in config
    # Nothing was downloaded, and nothing was written beside the project.
    cache = space["home"] / ".keras" / "datasets"
    assert not cache.exists() or not any(cache.iterdir())
    assert not (space["repo"].parent / "shared").exists()
    log = space["log"].read_text()  # the refusal above is one line (said in place, no traceback); no other error
    assert "Traceback (most recent call last)" not in log, log[-3000:]
    assert log.count("disagreements refused: 2,000 cifar10 test images are not here") == 1, log[-3000:]


def test_a_gpu_space_resolves_its_requirements(tmp_path):
    """A Space on GPU hardware uses requirements-gpu.txt as its requirements.txt (docs/deploy.md, Deploy as a Space):
    pip resolves it, JAX with its CUDA 12 plugin included, in a fresh venv (a dry run: nothing installed)."""
    space = tmp_path / "space"
    space.mkdir()
    shutil.copy(ROOT / "requirements-gpu.txt", space / "requirements.txt")  # the one-step switch
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--dry-run", "--ignore-installed",
                          "--disable-pip-version-check", "-r", str(space / "requirements.txt")],
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    would = pip.stdout.split("Would install")[-1]
    for package in ("gradio-6.31.0", "keras-3.15.1", "jax-0.10.2", "jax-cuda12-plugin-0.10.2", "tensorflow-cpu-2.21.0"):
        assert package in would.replace("_", "-"), (package, would[-2000:])
