"""The state every tab shares, without Gradio: a session's visitor, what they may reach, and a refusal's
text without the server's paths."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from explorer.app.state import ExplorerState
from explorer.checkpoints.finetuned import REFUSED, owner_key
from explorer.checkpoints.store import CheckpointError, update_card
from explorer.core.settings import Settings


@pytest.fixture
def shared(tmp_path, tiny_checkpoints) -> ExplorerState:
    root = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoints["vanilla"], root / "shipped")
    return ExplorerState(root=root, data_dir=None, shared=True, settings=Settings.from_env({}))


def test_a_sessions_visitor_reaches_the_shipped_models_and_their_own_runs_only(shared):
    mine = shared.arrive("m" * 24, "tab-1")
    shared.arrive("t" * 24, "tab-2")
    for visitor, name in ((mine, "mine"), ("t" * 24, "theirs")):
        folder = shared.runs.out_dir(owner_key(visitor)) / name
        shutil.copytree(shared.root / "shipped", folder)
        update_card(folder, run={"id": name, "owner": owner_key(visitor), "ended": 1e12})
    own = f"finetuned/{owner_key(mine)}/mine"
    assert shared.owner("tab-1") == owner_key(mine) and shared.owner(None) is None
    assert shared.choices("tab-1") == [own, "shipped"] and shared.my_runs("tab-1") == [own]
    assert shared.model(own, "tab-1").name == shared.model("shipped", "tab-2").name
    theirs = f"finetuned/{owner_key('t' * 24)}/theirs"
    with pytest.raises(CheckpointError, match=re.escape(REFUSED)):
        shared.model(theirs, "tab-1")
    # What a page's slot shows is kept; the page closed, its visitor is a session of its own again.
    shared.shown("tab-1", "A", own)
    assert shared.visitors.shown_refs() == {own}
    shared.leave("tab-1")
    assert shared.owner("tab-1") == owner_key("session:tab-1") and shared.visitors.shown_refs() == set()


def test_a_refusal_shown_in_shared_mode_names_no_server_path(shared):
    error = OSError(f"cannot read {shared.root.resolve()}/finetuned/x/model.keras or /srv/app/secret/file.txt")
    assert shared.safe(error) == "cannot read checkpoints/finetuned/x/model.keras or file.txt"


def test_the_first_visits_pair_is_a_setting(tmp_path, tiny_checkpoints, data_dir):
    """EXPLORER_MODEL_A / _B choose the pair a first visit opens with (a deployer's choice, and the first-visit
    bench's; by default the paper-scale pair); a pair not here falls back to the shipped pair."""
    from explorer.core.settings import Settings
    from explorer.ui import AppState
    from tests.helpers import pair_folder
    root = pair_folder(tmp_path / "checkpoints", tiny_checkpoints)
    for variant in ("vanilla", "spt_lsa"):
        shutil.copytree(tiny_checkpoints[variant], root / "paper" / f"cifar10-{variant}")
    chosen = Settings.from_env({"EXPLORER_MODEL_A": "paper/cifar10-vanilla",
                                "EXPLORER_MODEL_B": "paper/cifar10-spt_lsa"})
    assert AppState(root=root, data_dir=str(data_dir), settings=chosen).initial_refs() == (
        "paper/cifar10-vanilla", "paper/cifar10-spt_lsa")
    small = Settings.from_env({"EXPLORER_MODEL_A": "cifar10-vanilla", "EXPLORER_MODEL_B": "cifar10-spt_lsa"})
    assert AppState(root=root, data_dir=str(data_dir), settings=small).initial_refs() == (
        "cifar10-vanilla", "cifar10-spt_lsa")
    # by default the paper-scale pair; where it is not whole, the shipped pair
    assert AppState(root=root, data_dir=str(data_dir), settings=Settings.from_env({})).initial_refs() == (
        "paper/cifar10-vanilla", "paper/cifar10-spt_lsa")
    gone = Settings.from_env({"EXPLORER_MODEL_A": "paper/missing"})
    assert AppState(root=root, data_dir=str(data_dir), settings=gone).initial_refs() == (
        "cifar10-vanilla", "cifar10-spt_lsa")


@pytest.fixture
def own(tmp_path, tiny_checkpoints, cifar10):
    """An app whose slots may hold a pair of classes of its own, with or without its held-out images."""
    from tests.helpers import own_pair
    root = tmp_path / "checkpoints"
    x, y = cifar10.x_test[:40], np.arange(40) % 10
    with_images = own_pair(root, tiny_checkpoints, (x, y))
    shutil.move(root / "finetuned", root / "kept")
    without = own_pair(root, tiny_checkpoints, None)
    shutil.move(root / "finetuned", root / "bare")
    shutil.move(root / "kept", root / "finetuned")
    for ref in without:
        shutil.move(root / ref.replace("finetuned", "bare"), root / ref.replace("own-", "bare-"))
    state = ExplorerState(root=root, data_dir=None, shared=False, settings=Settings.from_env({}))
    return state, with_images, [ref.replace("own-", "bare-") for ref in without], (x, y)


def test_a_pair_of_its_own_classes_is_judged_on_its_held_out_images(own):
    from tests.helpers import OWN_CLASSES
    state, refs, _, (x, y) = own
    ds = state.test_images(refs[1], 1000)
    assert ds.class_names == OWN_CLASSES and len(ds.y_test) == 40 and ds.name.startswith("held-out")
    np.testing.assert_array_equal(ds.x_test, x)
    assert state.sample_classes(refs[1]) == OWN_CLASSES
    sample = state.sample("dolphin", refs[1], seed=2)
    assert sample.label == "dolphin" and OWN_CLASSES[y[sample.index]] == "dolphin"
    np.testing.assert_array_equal(sample.image, x[sample.index])
    # the sample's file carries its label to every tool, as a CIFAR sample's does
    assert state.tests.identify(sample.path) == (ds.name, sample.index, "dolphin")
    assert all(state.sample("random", refs[1], seed=s).label in OWN_CLASSES for s in range(5))
    with pytest.raises(ValueError, match="'cat' is not"):
        state.sample("cat", refs[1])
    # a CIFAR pair still samples CIFAR's test images
    assert state.sample("cat", None, seed=1).path.endswith("-cat.png")


def test_a_pair_of_its_own_classes_without_held_out_images_is_told_why(own):
    from explorer.app.state import NotApplicable
    state, _, bare, _ = own
    with pytest.raises(NotApplicable, match="10 classes of their own.*holds no held-out images.*labelled zip"):
        state.test_images(bare[1], 100)
    assert state.sample_classes(bare[1]) == []  # no CIFAR class of theirs to draw


def test_the_line_under_sample_says_where_its_images_come_from_for_slot_b(own):
    """Issue #91: with a pair of classes of its own, the data note names its held-out images (or says there are
    none) instead of describing CIFAR's test images, which Sample no longer draws for it."""
    from explorer.ui.images import ImagesColumn
    state, refs, bare, _ = own
    col = ImagesColumn(state)
    held = col.data_note(refs[1])
    assert "the 40 images slot B's fine-tune held out of own" in held and "10 classes of its own" in held, held
    assert "CIFAR" not in held
    none = col.data_note(bare[1])
    assert "none for slot B's model" in none and "no held-out images" in none, none
    assert col.data_note("cifar10-vanilla") == col.data_note(None) == state.tests.note(False)
    assert "CIFAR-10" in col.data_note(None)
