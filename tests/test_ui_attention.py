"""The Attention tab with a model of the paper's shape (9 layers of 12 heads) beside a shipped-sized one."""

from __future__ import annotations

import shutil

import pytest

from explorer.app.workbench import HEAD_ALL, HEAD_MEAN
from explorer.ui import AppState
from explorer.ui.attention import AttentionTab


@pytest.fixture(scope="module")
def tab(tmp_path_factory, tiny_checkpoints):
    from explorer.checkpoints.store import Card, write_checkpoint
    from explorer.model.config import get_preset
    from explorer.model.models import build_vit
    root = tmp_path_factory.mktemp("ui-paper") / "checkpoints"
    root.mkdir()
    shutil.copytree(tiny_checkpoints["vanilla"], root / "tiny")
    config = get_preset("paper").replace(num_layers=3, projection_dim=48, mlp_units=(96, 48))
    card = Card(config=config.to_dict(), variant=config.variant, class_names=[str(i) for i in range(10)])
    write_checkpoint(build_vit(config, 10), root / "paper-small", card)
    return AttentionTab(AppState(root=root, data_dir=None))


def test_the_layer_and_head_choices_follow_the_models_in_the_slots(tab):
    layer, head = tab.choices("tiny", "paper-small", 1, "head 3")
    assert layer["choices"] == [0, 1, 2] and layer["value"] == 1  # a choice that still exists is kept
    assert head["choices"] == [HEAD_ALL, HEAD_MEAN] + [f"head {i}" for i in range(12)] and head["value"] == "head 3"
    layer, head = tab.choices("tiny", "tiny", 2, "head 11")  # back to two 2-layer, 2-head models
    assert (layer["choices"], layer["value"]) == ([0, 1], 1)
    assert head["choices"] == [HEAD_ALL, HEAD_MEAN, "head 0", "head 1"] and head["value"] == HEAD_ALL
    assert tab.choices("tiny", "no-such-model", 1, HEAD_ALL) == ({"__type__": "update"}, {"__type__": "update"})
