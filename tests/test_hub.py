"""explorer.checkpoints.hub online, against a Hub on 127.0.0.1 (tests/hub_server.py) through the real
huggingface_hub client.

huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE once, at import, and this process is offline
(conftest): downloads run in a fresh process pointed at the local Hub, with an environment made here
(no token, proxy or cache of the tester's), and the cache they fill is then read offline in this one.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from explorer.checkpoints.hub import CHECKPOINT_FILES, prune_cache
from explorer.checkpoints.store import load_checkpoint
from explorer.model.predict import predict_logits
from tests.helpers import ROOT, populate_hf_cache
from tests.hub_server import GITATTRIBUTES, Declared, FakeHub

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
MB = 10**6
LIMIT = 50 * MB

_DOWNLOAD = """
import json, sys
from explorer.checkpoints import hub
for ref, limit in json.loads(sys.argv[2]):
    try:
        print(json.dumps([ref, str(hub.download(ref, cache_dir=sys.argv[1], max_bytes=limit)), None]))
    except hub.HubError as e:
        print(json.dumps([ref, None, str(e)]))
"""


def checkpoint_files(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in CHECKPOINT_FILES}


@pytest.fixture(scope="module")
def fake_hub(tiny_checkpoints):
    hub = FakeHub()
    lsa, vanilla = checkpoint_files(tiny_checkpoints["spt_lsa"]), checkpoint_files(tiny_checkpoints["vanilla"])
    extras = {".gitattributes": GITATTRIBUTES, "extra.bin": Declared(2_000 * MB)}
    hub.add_repo("someone/tiny-lsa", {COMMIT: {**lsa, **extras}, OLD_COMMIT: {**vanilla, **extras}},
                 refs={"main": COMMIT, "old": OLD_COMMIT})
    hub.add_repo("someone/huge-weights", {COMMIT: {**lsa, "model.weights.h5": Declared(812 * MB)}})
    hub.add_repo("someone/not-a-checkpoint", {COMMIT: {"config.json": b"{}", "README.md": b"# a language model\n",
                                                       "model.safetensors": Declared(2_000 * MB)}})
    hub.add_repo("someone/no-weights", {COMMIT: {k: v for k, v in lsa.items() if k != "model.weights.h5"}})
    hub.add_repo("someone/hub-down", {COMMIT: lsa}, status=503)
    hub.start()
    yield hub
    hub.stop()


class Run:
    """One fresh process downloading `refs` ([ref, max_bytes] pairs) into `cache`, and what the Hub saw."""

    def __init__(self, hub: FakeHub, cache: Path, home: Path, refs: list):
        seen, fetched = len(hub.requests), len(hub.fetched)
        env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "TMPDIR") if k in os.environ}
        env.update(PYTHONPATH=str(ROOT), HOME=str(home), HF_HOME=str(home / "hf"), HF_ENDPOINT=hub.url,
                   HF_HUB_OFFLINE="0", HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                   NO_PROXY="127.0.0.1", TF_CPP_MIN_LOG_LEVEL="3",
                   KERAS_BACKEND="numpy")  # hub needs no backend: the lightest keeps the process quick
        out = subprocess.run([sys.executable, "-c", _DOWNLOAD, str(cache), json.dumps(refs)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("[")]
        self.folders = {ref: Path(folder) for ref, folder, _ in lines if folder}
        self.errors = {ref: error for ref, _, error in lines if error}
        assert len(lines) == len(refs), out.stdout + out.stderr[-2000:]
        self.cache = cache
        self.requests = hub.requests[seen:]
        self.fetched = hub.fetched[fetched:]

    def paths(self, repo_id: str) -> set[str]:
        """What was asked about `repo_id`, by path without the query."""
        paths = {urlsplit(path).path for _, path in self.requests}
        return {path for path in paths if f"/{repo_id}/" in path + "/"}


def checkpoint_bytes(folder: Path) -> int:
    return sum((folder / name).stat().st_size for name in CHECKPOINT_FILES)


def test_a_checkpoint_comes_down_with_its_files_only(fake_hub, tiny_checkpoints, tmp_path, images):
    limit = checkpoint_bytes(tiny_checkpoints["spt_lsa"])  # exactly: the 2 GB extra.bin does not count
    run = Run(fake_hub, tmp_path / "cache", tmp_path, [["someone/tiny-lsa", limit], ["someone/tiny-lsa@old", None]])
    assert run.errors == {}
    folder, old = run.folders["someone/tiny-lsa"], run.folders["someone/tiny-lsa@old"]
    assert (folder.name, old.name) == (COMMIT, OLD_COMMIT)
    for snapshot, local in ((folder, tiny_checkpoints["spt_lsa"]), (old, tiny_checkpoints["vanilla"])):
        assert sorted(p.name for p in snapshot.iterdir()) == sorted(CHECKPOINT_FILES)
        assert checkpoint_files(snapshot) == checkpoint_files(local)
    # The bytes asked for are the checkpoint's: the weights from the CDN, as LFS files are; never extra.bin.
    assert {name for repo_id, name in run.fetched} == set(CHECKPOINT_FILES)
    assert any(path.startswith("cdn:/lfs/") for _, path in run.requests)
    assert not [path for _, path in run.requests if "extra.bin" in path or ".gitattributes" in path]

    # Offline now (this process), the cache answers by name and by revision, as a Space restarted offline would.
    model, card = load_checkpoint("someone/tiny-lsa", cache_dir=str(run.cache))
    assert card.variant == "spt_lsa"
    np.testing.assert_allclose(predict_logits(model, images),
                               predict_logits(load_checkpoint(tiny_checkpoints["spt_lsa"])[0], images), atol=1e-6)
    assert load_checkpoint("someone/tiny-lsa@old", cache_dir=str(run.cache))[1].variant == "vanilla"


@pytest.fixture(scope="module")
def refused(fake_hub, tiny_checkpoints, tmp_path_factory):
    """Every repo the app must refuse, asked for in one fresh process with an empty cache."""
    tmp = tmp_path_factory.mktemp("refused")
    tiny = checkpoint_bytes(tiny_checkpoints["spt_lsa"])
    return Run(fake_hub, tmp / "cache", tmp, [
        ["someone/huge-weights", LIMIT], ["someone/tiny-lsa", tiny - 1], ["someone/not-a-checkpoint", LIMIT],
        ["someone/no-weights", LIMIT], ["someone/no-such-repo", LIMIT], ["someone/tiny-lsa@v9", LIMIT],
        ["someone/hub-down", LIMIT]])


def assert_nothing_fetched(run: Run, repo_id: str) -> None:
    """The Hub was asked for the file list and nothing else; the cache was not even created."""
    info = f"/api/models/{repo_id}"
    assert all(p == info or p.startswith(f"{info}/revision/") for p in run.paths(repo_id)), run.requests
    assert not [name for r, name in run.fetched if r == repo_id]
    assert not run.cache.exists(), sorted(run.cache.rglob("*"))


def test_an_oversized_repo_is_refused_before_a_byte_is_written(refused):
    assert refused.errors["someone/huge-weights"] == (
        "someone/huge-weights: its checkpoint files are 812 MB; this app fetches at most 50 MB from the Hub "
        "(EXPLORER_MAX_HUB_MB)")
    assert_nothing_fetched(refused, "someone/huge-weights")
    # The limit counts the checkpoint's own bytes: one byte under them refuses the tiny checkpoint too.
    assert refused.errors["someone/tiny-lsa"].startswith("someone/tiny-lsa: its checkpoint files are ")
    assert_nothing_fetched(refused, "someone/tiny-lsa")


def test_a_repo_that_is_not_a_checkpoint_is_refused_before_download(refused):
    assert refused.errors["someone/not-a-checkpoint"] == (
        "someone/not-a-checkpoint is not an explorer checkpoint: it has no explorer.json")
    assert refused.errors["someone/no-weights"] == (
        "someone/no-weights is not an explorer checkpoint: it has no model.weights.h5")
    for repo_id in ("someone/not-a-checkpoint", "someone/no-weights"):
        assert_nothing_fetched(refused, repo_id)


def test_wrong_ids_and_a_down_hub_say_so(refused):
    assert refused.errors["someone/no-such-repo"] == (
        "someone/no-such-repo: no such model repo on the Hub (or it is private)")
    assert refused.errors["someone/tiny-lsa@v9"] == "someone/tiny-lsa@v9: revision 'v9' does not exist"
    assert refused.errors["someone/hub-down"] == (
        "someone/hub-down is not in the local Hugging Face cache and the Hub answered 503")
    for repo_id in ("someone/no-such-repo", "someone/hub-down"):
        assert_nothing_fetched(refused, repo_id)


def test_prune_cache_removes_the_least_recently_used_repos_and_never_a_kept_one(tmp_path):
    cache, snapshots = tmp_path / "hub", {}
    # The same commit in every repo, as a duplicated repo has: removing one must not touch another.
    for age, name in enumerate(("oldest", "older", "newer", "newest")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "model.weights.h5").write_bytes(bytes([age]) * 1000)
        snapshots[name] = populate_hf_cache(cache, f"someone/{name}", folder, COMMIT)
        for blob in (cache / f"models--someone--{name}" / "blobs").iterdir():
            os.utime(blob, (1_700_000_000 + age, 1_700_000_000 + age))
    assert prune_cache(cache, 4000) == []  # within the cap
    assert prune_cache(cache, 2500, keep=[snapshots["oldest"]]) == ["someone/older", "someone/newer"]
    assert sorted(p.name for p in cache.iterdir()) == ["models--someone--newest", "models--someone--oldest"]
    # A file of a snapshot in use keeps its repo as well as the folder does.
    assert prune_cache(cache, 0, keep=[snapshots["oldest"] / "model.weights.h5"]) == ["someone/newest"]
    assert (snapshots["oldest"] / "model.weights.h5").read_bytes() == bytes([0]) * 1000
    assert prune_cache(tmp_path / "no-cache", 0) == []
