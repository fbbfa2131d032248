"""Shared mode's open pages, without Gradio: whose each session is, and what pruning keeps for the pages open
and the runs going on."""

from __future__ import annotations

import shutil
import time

from explorer.app.visitors import VISITOR_ID, Visitors, browser_secret
from explorer.checkpoints.finetuned import RunStore, SharedLimits, new_visitor_id, owner_key
from explorer.checkpoints.store import read_card
from tests.helpers import stored_run as add_run


def test_a_session_is_the_visitor_its_browser_says_or_one_of_its_own(root):
    visitors = Visitors(RunStore(root, shared=True))
    kept = new_visitor_id()
    assert VISITOR_ID.fullmatch(kept)
    assert visitors.arrive(kept, "tab-1") == kept
    assert visitors.arrive(kept, "tab-2") == kept  # the same browser in a second tab: the same visitor
    assert visitors.owner("tab-1") == visitors.owner("tab-2") == owner_key(kept)
    # An id that is not one of ours (too short, odd characters, not text) is replaced by a new one.
    for sent in (None, "short", "x" * 65, "../../etc/passwd-and-more", 12345678901234567890):
        given = visitors.arrive(sent, "tab-3")
        assert given != sent and VISITOR_ID.fullmatch(given)
        assert visitors.owner("tab-3") == owner_key(given)
    # A session that never said its id (an API client) is a visitor of its own; no session is nobody.
    assert visitors.owner("api") == owner_key("session:api") != visitors.owner("api-2")
    assert visitors.owner(None) is None
    visitors.leave("tab-1")
    assert visitors.owner("tab-1") == owner_key("session:tab-1") and visitors.owner("tab-2") == owner_key(kept)
    # Single user: nobody owns anything, whatever the browser says.
    alone = Visitors(RunStore(root, shared=False))
    alone.arrive(kept, "tab-1")
    assert alone.owner("tab-1") is None and alone.owner("api") is None


def test_pruning_keeps_what_a_page_shows_and_a_waiting_runs_bases_until_they_go(root):
    store = RunStore(root, shared=True, limits=SharedLimits(max_runs=0))  # every stored run is over the cap
    visitors = Visitors(store)
    me, now = owner_key("me-" * 8), time.time()
    shown, base, other = (add_run(store, me, name, now - 60) for name in ("shown", "base", "other"))
    visitors.shown("tab-1", "A", shown)
    visitors.shown(None, "B", other)  # no session: nothing to remember it by
    visitors.protect_bases(7, {base})
    assert visitors.shown_refs() == {shown}
    assert visitors.prune() == [other]
    assert visitors.prune(keep={shown}) == []
    # The page closed and the run ended: nothing keeps them any more.
    visitors.leave("tab-1")
    visitors.protect_bases(7, None)
    assert sorted(visitors.prune()) == sorted([shown, base])
    assert (root / "shipped").is_dir()  # the shipped checkpoints are never touched


def test_a_slot_shown_again_replaces_what_it_showed(root):
    store = RunStore(root, shared=True, limits=SharedLimits(max_runs=0))
    visitors = Visitors(store)
    me, now = owner_key("me-" * 8), time.time()
    first, second = (add_run(store, me, name, now - 60) for name in ("first", "second"))
    visitors.shown("tab-1", "A", first)
    visitors.shown("tab-1", "A", second)
    assert visitors.shown_refs() == {second}
    assert visitors.prune() == [first]


def test_an_arrival_prunes_and_a_published_run_is_tagged_and_kept(root):
    store = RunStore(root, shared=True, limits=SharedLimits(max_runs=1, run_ttl_hours=1))
    visitors = Visitors(store)
    me = owner_key("me-" * 8)
    expired = add_run(store, me, "expired", time.time() - 2 * 3600)
    visitors.arrive(None, "tab-1")
    assert not (root / expired).exists()
    older = add_run(store, me, "older", time.time() - 60)
    folder = store.out_dir(me) / "new"
    shutil.copytree(root / "shipped", folder)
    visitors.published([folder], "run-9", me)
    run = read_card(folder).run
    assert (run.id, run.owner) == ("run-9", me) and run.ended > time.time() - 60
    # Two runs, one allowed: the new one is kept, the older one goes.
    assert (root / f"finetuned/{me}/new").is_dir() and not (root / older).exists()


def test_the_browser_secret_is_the_configured_one_else_one_kept_beside_the_checkpoints(tmp_path):
    assert browser_secret("configured", tmp_path) == "configured"
    made = browser_secret(None, tmp_path)
    assert len(made) == 32 and (tmp_path / ".browser-secret").read_text() == made
    assert browser_secret("", tmp_path) == made  # a restart reads the same key
    # Nowhere to keep one: a new key each time, and the app still starts.
    gone = tmp_path / "nowhere"
    assert browser_secret(None, gone) != browser_secret(None, gone) and not gone.exists()
