"""Shared mode below the UI: who may reach what, and which stored runs are kept."""

from __future__ import annotations

import os
import time

import pytest

from explorer.checkpoints.finetuned import REFUSED, RunStore, SharedLimits, owner_key, shared_mode
from explorer.checkpoints.store import CheckpointError
from explorer.core.settings import Settings
from explorer.finetune.queue import Busy
from explorer.finetune.state import RunStatus
from tests.helpers import stored_run as add_run


def limits_from(environ: dict) -> SharedLimits:
    return SharedLimits.from_settings(Settings.from_env(environ))


def test_shared_mode_comes_from_the_space_or_the_flag():
    assert not shared_mode(Settings.from_env({}))
    assert shared_mode(Settings.from_env({"SPACE_ID": "someone/space"}))
    assert shared_mode(Settings.from_env({"EXPLORER_SHARED": "1"}))
    assert not shared_mode(Settings.from_env({"SPACE_ID": "someone/space", "EXPLORER_SHARED": "0"}))
    limits = limits_from({"EXPLORER_MAX_QUEUE": "5", "EXPLORER_RUN_TTL_HOURS": "0.5"})
    assert (limits.max_queue, limits.run_ttl_hours, limits.max_runs) == (5, 0.5, 20)
    with pytest.raises(ValueError, match="EXPLORER_MAX_RUNS='many': expected a whole number"):
        limits_from({"EXPLORER_MAX_RUNS": "many"})
    # The Hub limits, in megabytes (10**6 bytes): the model store and the cache pruning take them from here.
    hub = limits_from({"EXPLORER_MAX_HUB_MB": "12.5", "EXPLORER_MAX_HUB_CACHE_MB": "0"})
    assert (hub.max_hub_mb, hub.max_hub_cache_mb) == (12.5, 0.0)
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(ValueError, match=f"EXPLORER_MAX_HUB_MB='{bad}': expected a finite number, 0 or more"):
            limits_from({"EXPLORER_MAX_HUB_MB": bad})


def test_a_visitor_reaches_the_shipped_models_their_runs_and_hub_ids_only(root, tmp_path):
    store = RunStore(root, shared=True)
    me, other = owner_key("me-" * 8), owner_key("other-" * 4)
    mine = add_run(store, me, "mine", time.time())
    theirs = add_run(store, other, "theirs", time.time())
    os.symlink(root / "shipped", root / "link")
    assert store.listing(me) == ["finetuned/" + me + "/mine", "shipped"]
    assert store.check(mine, me) == mine and store.check("shipped", None) == "shipped"
    assert store.check("owner/model@v1", me) == "owner/model@v1"
    for ref in (theirs, "/etc", str(root / "shipped"), "../checkpoints/shipped", "link", "./shipped",
                f"finetuned/{me}/../{other}/theirs", "finetuned", "explorer/samples"):
        with pytest.raises(CheckpointError) as e:
            store.check(ref, me)
        assert str(e.value) == REFUSED
    # single user: everything listed, anything passed through
    local = RunStore(root, shared=False)
    assert theirs in local.listing(None) and local.check("/etc", None) == "/etc"


def test_prune_removes_the_oldest_unused_runs_and_never_a_protected_or_shipped_one(root):
    limits = SharedLimits(max_runs=2, max_run_mb=1000, run_ttl_hours=1)
    store = RunStore(root, shared=True, limits=limits)
    now = time.time()
    v = owner_key("visitor-" * 3)
    names = ("old", "loaded", "mid", "new")
    old, loaded, mid, new = (add_run(store, v, n, now - 60 * (4 - i)) for i, n in enumerate(names))
    # four runs, two allowed: the two oldest go, but the loaded one stays (and a younger one goes instead)
    removed = store.prune(protect={loaded}, now=now)
    assert removed == [old, mid]
    assert [r for r in store.listing(v) if r.startswith("finetuned")] == [loaded, new]
    # expiry: an hour after it ended a run goes, unless protected
    assert store.prune(protect={loaded}, now=now + 3 * 3600) == [new]
    assert store.prune(now=now + 3 * 3600) == [loaded]
    assert (root / "shipped").is_dir() and not (root / "finetuned" / v).exists()
    # bytes: a cap below one run's size removes it
    big = add_run(store, v, "big", now)
    tiny_limits = RunStore(root, shared=True, limits=SharedLimits(max_run_mb=0.001))
    assert tiny_limits.prune(now=now) == [big]
    # never in single-user mode
    add_run(store, v, "kept", now - 10 ** 7)
    assert RunStore(root, shared=False, limits=limits).prune(now=now) == []


def test_a_pair_is_one_run(root):
    store = RunStore(root, shared=True, limits=SharedLimits(max_runs=1))
    v, now = owner_key("visitor-" * 3), time.time()
    a1 = add_run(store, v, "pair-A", now - 100, run_id="run1")
    b1 = add_run(store, v, "pair-B", now - 100, run_id="run1")
    a2 = add_run(store, v, "next", now, run_id="run2")
    assert len(store.runs()) == 2
    assert sorted(store.prune(now=now)) == sorted([a1, b1])
    assert store.listing(v) == [a2, "shipped"]


def test_zip_of_a_checkpoint_loads(root, tmp_path):
    import zipfile

    from explorer.checkpoints.store import load_checkpoint
    store = RunStore(root, shared=True)
    v = owner_key("visitor-" * 3)
    ref = add_run(store, v, "mine", time.time())
    path = store.zip_checkpoint(ref, v, tmp_path / "dl")
    with zipfile.ZipFile(path) as z:
        z.extractall(tmp_path / "out")
    model, card = load_checkpoint(tmp_path / "out" / "mine")
    assert model.output_shape[-1] == 10 and card.run.owner == v
    with pytest.raises(CheckpointError, match="not a model this app offers you"):
        store.zip_checkpoint(ref, owner_key("someone else " * 2), tmp_path / "dl")


def test_the_queue_is_first_come_capped_and_forgets_pages_that_left(tmp_path):
    from explorer.finetune.queue import QueueFull
    from explorer.finetune.runner import FineTuneRunner
    from explorer.finetune.state import MemberState, RunState
    runner = FineTuneRunner(tmp_path, max_queue=2, stale_s=0.5)
    runner._state = RunState(status=RunStatus.TRAINING, started=time.time() - 30, owner="a",
                             members=[MemberState("A", "A", step=50, total_steps=100),
                                      MemberState("B", "B", total_steps=0)])
    first, second = runner.join("b"), runner.join("c")
    with pytest.raises(QueueFull, match="queue is full: a run is going on and 2 Starts already wait"):
        runner.join("d")
    time.sleep(0.2)
    place, length, eta, waited = runner.position(second)
    # A's run is a quarter done after 30 s (B's member not started: as long as A's): 90 s to go, then
    # the first waiting run, of the same projected length; it has waited since it joined
    assert (place, length) == (2, 2) and eta == pytest.approx(90 + 120, rel=0.05)
    assert 0.2 <= waited < 0.45 and runner.position(second).waited >= waited
    assert not runner.ready(first)                       # a run is going on
    assert runner.cancel_as("c") == "left" and runner.position(first)[:2] == (1, 1)
    assert runner.cancel_as("d") == "not yours" and runner._state.status == RunStatus.TRAINING
    runner._state.status = RunStatus.DONE
    assert runner.ready(first)
    time.sleep(0.6)                                      # no page asked: its place is given up
    third = runner.join("e")
    assert first.dropped and not first.waiting and runner.position(first)[0] == 0
    assert runner.position(third)[:2] == (1, 1) and runner.ready(third)
    with pytest.raises(Busy, match=r"a Start of yours already waits in the queue \(place 1 of 1\)"):
        runner.join("e")                                 # one place each


def test_a_place_the_page_stopped_asking_about_is_kept_for_a_page_that_asks_again(monkeypatch):
    """A waiting Start's page closed (a reload): its place stays while a page asks about it within stale_s,
    first come as before; taken out to start, it says which run it became."""
    from explorer.finetune.queue import Busy as QueueBusy
    from explorer.finetune.queue import StartQueue
    now = [100.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    queue = StartQueue(3, stale_s=30.0)
    first, second = queue.join("a", True), queue.join("b", True)
    now[0] += 25                                         # a's page reloads: nothing asks for 25 s
    assert queue.place(second) == (2, 2)
    assert queue.place(first) == (1, 2) and first.waiting  # the new page asks in time: still first
    now[0] += 25
    assert queue.place(first) == (1, 2)
    now[0] += 6                                          # b's page has not asked for 31 s: dropped
    assert queue.place(first) == (1, 1) and second.dropped and not second.cancelled
    with pytest.raises(QueueBusy, match="another Start is ahead"):
        queue.take(second, 7)
    queue.take(first, 7)
    assert first.started == 7 and not first.waiting and queue.tickets == []
