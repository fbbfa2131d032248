"""A public Space's app (shared mode) with several visitors, each a gradio_client session of their own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile

import pytest
from gradio_client import Client

from explorer.checkpoints.finetuned import REFUSED, owner_key
from explorer.checkpoints.store import load_checkpoint
from tests.e2e.test_api import PAIR, _wait_status
from tests.helpers import ROOT, pair_folder, start_app, stop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
A, B = "cifar10-vanilla", "cifar10-spt_lsa"
SCRATCH = "(a new model from scratch)"
# A run that trains long enough to be cancelled or waited behind; and a short one.
LONG = (PAIR, "tiny", "vanilla", "cifar10", None, 30, 1e-3, 16, 2048, False, "long")
SHORT = (SCRATCH, "tiny", "vanilla", "cifar10", None, 1, 1e-3, 32, 128, False)


@pytest.fixture(scope="module")
def shared_app(tmp_path_factory, tiny_checkpoints, data_dir):
    root = pair_folder(tmp_path_factory.mktemp("shared") / "checkpoints", tiny_checkpoints)
    outside = tmp_path_factory.mktemp("outside")
    shutil.copytree(tiny_checkpoints["vanilla"], outside / "loose")
    os.symlink(outside / "loose", root / "escape")  # a symlink out of the checkpoints folder
    proc, url, log = start_app(root, data_dir=data_dir, env_extra={
        "EXPLORER_SHARED": "1", "EXPLORER_MAX_QUEUE": "1", "EXPLORER_BROWSER_SECRET": "test-secret"})
    yield url, root, outside
    stop(proc)


def visitor(url, browser_id=None):
    """A page opening: a new session that tells the app the id its browser keeps (None: a new visitor)."""
    client = Client(url, verbose=False)
    result = client.predict(browser_id, api_name="/visitor")
    vid, slot_a = result[0], result[1]
    return client, vid, slot_a["choices"] if isinstance(slot_a, dict) else None


def choices_of(update):
    return [c[1] if isinstance(c, (list, tuple)) else c for c in update["choices"]]  # (label, reference)


def listing(client):
    a, _, _ = client.predict(A, B, api_name="/refresh")
    return choices_of(a)


def test_visitors_own_their_runs_queue_and_cancel(shared_app, tmp_path):
    url, root, _ = shared_app
    (ca, ida, _), (cb, idb, _), (cc, _, _) = visitor(url), visitor(url), visitor(url)
    assert ida != idb
    job_a = ca.submit(*LONG, A, B, api_name="/finetune")
    _wait_status(job_a, lambda s: "**training**" in s, timeout=240)

    # B's Cancel leaves A's run going and says why
    assert "not yours" in cb.predict(api_name="/cancel")
    time.sleep(2)
    assert "**training**" in job_a.outputs()[-1][0]

    # B's Start waits in the queue with its place and an estimate; C's is one too many
    job_b = cb.submit(*SHORT, "mine-b", A, B, api_name="/finetune")
    waiting = _wait_status(job_b, lambda s: "**waiting**" in s, timeout=60)
    assert "your place in the queue: **1 of 1**" in waiting and ("about" in waiting or "estimate" in waiting)
    with pytest.raises(Exception, match="the fine-tuning queue is full"):
        cc.predict(*SHORT, "mine-c", A, B, api_name="/finetune")
    with pytest.raises(Exception, match=r"a Start of yours already waits in the queue \(place 1 of 1\)"):
        cb.predict(*SHORT, "mine-b2", A, B, api_name="/finetune")  # one place each

    # A cancels its own run: B's starts by itself and finishes
    # the answer says what the run's line says until the worker has stopped it, not that it has already ended
    assert ca.predict(api_name="/cancel").startswith("Cancelling: the run stops at its next step")
    assert "**cancelled**" in _wait_status(job_a, lambda s: "**cancelled**" in s)
    done = _wait_status(job_b, lambda s: "**done**" in s, timeout=300)
    mine = f"finetuned/{owner_key(idb)}/mine-b"
    assert f"`{mine}`" in done
    assert (root / mine).is_dir() and not list((root / "finetuned").glob("*/long*"))

    # only B lists and loads it, by the list or by its name; A gets one message with no server path
    assert mine in listing(cb) and mine not in listing(ca)
    ref, card = ca.predict(mine, api_name="/load_model_a")
    assert REFUSED in card and ref != mine and str(root) not in card
    with pytest.raises(Exception, match="not a model this app offers you"):
        ca.predict(mine, A, api_name="/tau")

    # B reloads the page (same browser id): its run is still there, and downloads as a loadable zip
    cb2, same, slot_choices = visitor(url, idb)
    assert same == idb and mine in choices_of({"choices": slot_choices})
    shown = cb2.predict(mine, api_name="/download_checkpoint")  # the File component, made visible
    path = shown["value"] if isinstance(shown, dict) else shown
    with zipfile.ZipFile(path) as z:
        z.extractall(tmp_path)
        # the checkpoint's files and its held-out images (the visitor's own: Trust and Sample use them)
        assert sorted(n.split("/", 1)[1] for n in z.namelist()) == [
            "README.md", "config.json", "explorer.json", "held_out.npz", "metadata.json", "model.weights.h5"]
    model, card = load_checkpoint(tmp_path / "mine-b")
    assert card.name == "mine-b" and model.output_shape[-1] == 10
    out = subprocess.run([sys.executable, "-c", "import explorer, keras, sys; "
                          "m = keras.saving.load_model(sys.argv[1]); print(m.output_shape)", str(tmp_path / "mine-b")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and "(None, 10)" in out.stdout, out.stderr[-2000:]
    # A cannot download it: not among A's choices (Gradio refuses), nor the app's for A
    with pytest.raises(Exception, match="not a model this app offers you|not in the list of choices") as e:
        ca.predict(mine, api_name="/download_checkpoint")
    assert str(root) not in str(e.value)


@pytest.mark.parametrize("ref", ["/etc", "/proc/self", "../checkpoints/cifar10-vanilla", "escape",
                                 "escape/../cifar10-vanilla", "./cifar10-vanilla", "finetuned/x/../../cifar10-vanilla",
                                 "OUTSIDE", "explorer/samples", "tests"])
def test_forbidden_references_are_refused_without_a_server_path(shared_app, ref):
    url, root, outside = shared_app
    client, _, _ = visitor(url)
    ref = str(outside / "loose") if ref == "OUTSIDE" else ref
    shown, card = client.predict(ref, api_name="/load_model_b")
    assert REFUSED in card and shown != ref
    for secret in (str(root), str(outside), str(ROOT), "/proc/", "/etc"):
        assert secret not in card, (ref, card)
    with pytest.raises(Exception, match="not a model this app offers you") as e:
        client.predict(A, ref, api_name="/tau")
    assert str(root) not in str(e.value)


def test_the_shipped_checkpoints_and_hub_ids_stay_open(shared_app):
    url, _, _ = shared_app
    client, _, choices = visitor(url)
    assert sorted(choices_of({"choices": choices})) == [B, A]
    ref, card = client.predict(B, api_name="/load_model_b")
    # the folder's label (a shipped model's: what it is), then the reference the slots and the API take
    assert ref == B and f"**shipped · SPT + LSA · 192 images** · `{B}`" in card, card
    # a Hub id is tried (offline here: the cache answers), and its failure names no server path
    ref, card = client.predict("someone/not-cached", api_name="/load_model_a")
    assert "not in the local Hugging Face cache" in card and str(ROOT) not in card


def test_a_visitors_long_trust_computation_does_not_hold_up_anothers_clicks(shared_app, tmp_path, cifar10):
    from gradio_client import handle_file
    from PIL import Image
    url, _, _ = shared_app
    (cx, _, _), (cy, _, _) = visitor(url), visitor(url)
    image = tmp_path / "x.png"
    Image.fromarray(cifar10.x_test[5]).save(image)
    # X asks for the corruption table of the pair (15 corruptions x 5 severities of 100 images)...
    long = cx.submit(A, B, 100, api_name="/trust_corruptions")
    deadline = time.time() + 120
    while not long.status().code.name == "PROCESSING" and time.time() < deadline:
        time.sleep(0.2)
    assert long.status().code.name == "PROCESSING"
    # ... and Y's clicks are answered while it runs, not after it.
    for _ in range(3):
        top_a, top_b, verdict = cy.predict(handle_file(str(image)), A, B, api_name="/compare")
        assert "both say" in verdict or "disagree" in verdict
        maps, rollout, caption, cell = cy.predict(handle_file(str(image)), A, B, 1, "all heads", 16.0, 16.0,
                                                  api_name="/attention")
        assert cell["grid"] > 0
    assert not long.done(), "X's table finished before Y's clicks were answered: nothing was measured"
    summary = long.result(timeout=900)[0]
    assert "mCE" in summary or "corruption error" in summary, summary


@pytest.fixture(scope="module")
def app_with_a_hub(tmp_path_factory, tiny_checkpoints, data_dir):
    """A shared app whose Hub is a real HTTP server on 127.0.0.1 (tests/hub_server.py), reached by the real
    huggingface_hub client through HF_ENDPOINT; a Hub checkpoint may be 1 MB at most."""
    from tests.hub_server import Declared, FakeHub
    from tests.test_hub import checkpoint_files
    hub = FakeHub()
    lsa = checkpoint_files(tiny_checkpoints["spt_lsa"])
    hub.add_repo("someone/tiny-lsa", {"a" * 40: {**lsa, "extra.bin": Declared(2_000_000_000)}})
    hub.add_repo("someone/huge-weights", {"b" * 40: {**lsa, "model.weights.h5": Declared(812_000_000)}})
    hub.start()
    root = tmp_path_factory.mktemp("hubapp") / "checkpoints"
    shutil.copytree(tiny_checkpoints["vanilla"], root / A)
    home = tmp_path_factory.mktemp("home")
    proc, url, _ = start_app(root, data_dir=data_dir, env_extra={
        "EXPLORER_SHARED": "1", "EXPLORER_MAX_HUB_MB": "1", "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": hub.url,
        "HF_HOME": str(home / "hf"), "HOME": str(home), "NO_PROXY": "127.0.0.1", "HF_TOKEN": ""})
    yield url, root, hub
    proc.terminate()
    proc.wait(10)
    hub.stop()


def test_a_hub_checkpoint_comes_with_its_files_only_and_an_oversized_one_is_refused(app_with_a_hub):
    url, root, hub = app_with_a_hub
    client, _, _ = visitor(url)
    ref, card = client.predict("someone/huge-weights", api_name="/load_model_b")
    assert "812 MB" in card and "at most 1.0 MB" in card and ref != "someone/huge-weights"
    assert not [f for f in hub.fetched if f[0] == "someone/huge-weights"]
    assert not list((root / ".hub-cache").glob("models--someone--huge-weights/blobs/*"))
    ref, card = client.predict("someone/tiny-lsa", api_name="/load_model_b")
    assert ref == "someone/tiny-lsa" and "**tiny-spt_lsa** · `someone/tiny-lsa`" in card, card  # its card's name
    fetched = sorted(name for repo, name in hub.fetched if repo == "someone/tiny-lsa")
    assert fetched == ["README.md", "config.json", "explorer.json", "metadata.json", "model.weights.h5"]
    assert str(root) not in card


def test_caps_remove_the_oldest_unused_run_and_never_a_loaded_one(tmp_path_factory, tiny_checkpoints, data_dir):
    root = tmp_path_factory.mktemp("capped") / "checkpoints"
    shutil.copytree(tiny_checkpoints["vanilla"], root / A)
    proc, url, _ = start_app(root, data_dir=data_dir, env_extra={"EXPLORER_SHARED": "1", "EXPLORER_MAX_RUNS": "1"})
    try:
        client, vid, _ = visitor(url)
        first, second = (f"finetuned/{owner_key(vid)}/{name}" for name in ("first", "second"))
        assert "**done**" in client.predict(*SHORT, "first", A, A, api_name="/finetune")[0]
        assert client.predict(first, api_name="/load_model_a")[0] == first   # shown in slot A
        assert "**done**" in client.predict(*SHORT, "second", A, A, api_name="/finetune")[0]
        # two runs, one allowed: the older one is loaded in a page, so both stay
        assert (root / first).is_dir() and (root / second).is_dir()
        client.predict(A, api_name="/load_model_a")       # slot A shows another model now
        visitor(url)                                       # the next page load prunes
        assert not (root / first).exists() and (root / second).is_dir() and (root / A).is_dir()
        assert first not in listing(client) and second in listing(client)
    finally:
        proc.terminate()
        proc.wait(10)
