"""The Attention tab with a model of the paper's shape (12 heads, more layers) beside a shipped-sized one: a layer
for each model, any depth through the API, each head's tile measured and the marked heads."""

from __future__ import annotations

import shutil

import gradio as gr
import numpy as np
import pytest

from explorer.analysis import render
from explorer.app.attention import HEAD_ALL, HEAD_MEAN, SAME_DEPTH, HeadMarks, same_depth
from explorer.ui import AppState
from explorer.ui.attention import SELF_HEAD_LABEL, AttentionTab


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
    layer, layer_b, head = tab.choices("tiny", "paper-small", 1, 2, "head 3")
    assert layer["choices"] == [0, 1] and layer["value"] == 1  # A's layers; a choice that still exists is kept
    assert layer_b["choices"] == [SAME_DEPTH, 0, 1, 2] and layer_b["value"] == SAME_DEPTH  # B's own, at A's depth
    assert head["choices"] == [HEAD_ALL, HEAD_MEAN] + [f"head {i}" for i in range(12)] and head["value"] == "head 3"
    layer, layer_b, head = tab.choices("paper-small", "tiny", 2, 1, "head 11")
    assert (layer["choices"], layer["value"], layer_b["choices"]) == ([0, 1, 2], 2, [SAME_DEPTH, 0, 1])
    layer, _, head = tab.choices("tiny", "tiny", 2, 1, "head 11")  # back to two 2-layer, 2-head models
    assert (layer["choices"], layer["value"]) == ([0, 1], 1)
    assert head["choices"] == [HEAD_ALL, HEAD_MEAN, "head 0", "head 1"] and head["value"] == HEAD_ALL
    assert tab.choices("tiny", "no-such-model", 1, SAME_DEPTH, HEAD_ALL) == ({"__type__": "update"},) * 3


def test_the_same_depth_is_the_same_place_in_each_model():
    assert [same_depth(layer, 9, 6) for layer in (0, 4, 8)] == [0, 3, 5]  # first, middle, last
    assert [same_depth(layer, 6, 9) for layer in (0, 5)] == [0, 8] and same_depth(0, 1, 6) == 5


@pytest.fixture(scope="module")
def image(tmp_path_factory, cifar10):
    from PIL import Image
    path = tmp_path_factory.mktemp("img") / "cifar10-test-00007-x.png"
    Image.fromarray(cifar10.x_test[7]).save(path)
    return str(path)


def test_each_model_has_its_own_layer_said_in_words(tab, image):
    _, _, caption, _ = tab.attention(image, "tiny", "paper-small", 1, HEAD_ALL, 16, 16)
    assert "Layer 1 of 2 (the last) for A, layer 2 of 3 (the last) for B" in caption  # B at A's depth
    _, caption, _ = tab.attention_query(image, "tiny", "paper-small", 0, HEAD_ALL, 16, 16, 1)
    assert "Layer 0 of 2 (the first) for A, layer 1 of 3 for B" in caption
    # A layer past the small model's depth, for a deeper model; out of its range, a message naming the range.
    maps, _, caption, _ = tab.attention(image, "paper-small", "paper-small", 2, "head 11", 16, 16, "1")
    assert maps.ndim == 3 and "Layer 2 of 3 (the last) for A, layer 1 of 3 for B" in caption
    with pytest.raises(gr.Error, match=r"model A \(tiny-vanilla\) has 2 layers: its layer is 0 to 1, got 2"):
        tab.attention(image, "tiny", "paper-small", 2, HEAD_ALL, 16, 16)
    with pytest.raises(gr.Error, match=r"model B \(paper-small\) has 3 layers: its layer is 0 to 2, got 5"):
        tab.attention_query(image, "tiny", "paper-small", 0, HEAD_ALL, 16, 16, 5)
    # The page's own redraw after a change of models clips what the dropdowns still hold.
    assert "Layer 1 of 2 (the last) for A" in tab.redraw(image, "tiny", "paper-small", 8, HEAD_ALL, 16, 16, 8)[2]


def test_each_head_tile_is_measured_and_the_marked_heads_are_named(tab, image):
    maps, _, caption, _ = tab.attention(image, "tiny", "paper-small", 0, HEAD_ALL, 16, 16)
    assert "**dist**" in caption and "**self**" in caption and "even attention: 1.56 %" in caption
    assert "A: most local head" in caption and "B: most local head" in caption
    assert "no head attends to the query's own patch (LSA masks it)" in caption  # paper-small is SPT + LSA
    assert "Every layer × head is drawn for models of up to 4 heads" in caption  # 12 heads: one layer at a time
    maps, _, caption, _ = tab.attention(image, "paper-small", "paper-small", 0, HEAD_ALL, 16, 16)
    assert 2 * 3 * 104 < maps.shape[1] < 2 * 4 * 104 and 4 * 104 < maps.shape[0] < 4 * (104 + 70)  # 3 x 4 tiles each


def test_one_head_or_the_mean_is_named_on_its_map_and_in_the_caption(tab, image):
    shown = {h: tab.attention_query(image, "tiny", "paper-small", 0, h, 16, 16)
             for h in ("head 0", "head 1", HEAD_MEAN)}
    (maps0, said0, _), (maps1, said1, _), (mean, said_mean, _) = shown.values()
    assert "Shown: **head 0** of each layer. A's attends" in said0 and "Shown: **head 1**" in said1
    assert "**mean of the heads** of each layer (A's 2, B's 12)" in said_mean
    # Each map carries its own words ("L0 head 1") between the model's title and the picture: a band of
    # dark text on white, different for each head and for the mean.
    band = slice(18, 34)
    for m in (maps0, maps1, mean):
        assert m.shape[0] > 224 + 2 * 16 and (m[band, :150] < 80).any() and (m[band, :150] == 255).mean() > 0.5
    assert not np.array_equal(maps0[band, :150], maps1[band, :150])
    assert not np.array_equal(maps0[band, :150], mean[band, :150])


def test_the_marks_are_the_most_local_and_the_most_self_attending_heads():
    from explorer.model.config import get_preset
    config = get_preset("paper")  # 32 px, 8 x 8 patches
    n = config.grid_size ** 2
    attention = np.full((1, 3, n, n), 1.0 / n, np.float32)  # even attention...
    attention[0, 1] = np.eye(n)  # ...but head 1 keeps everything for its own patch
    attention[0, 2] = (np.ones((n, n)) - np.eye(n)) / (n - 1)  # and head 2 none (LSA's mask)
    marks = HeadMarks.of(attention, 0, 27, config)
    assert (marks.most_local, marks.most_self) == (1, 1) and marks.distance[1] == 0 and marks.self_share[1] == 1
    assert marks.self_share[2] == 0 and marks.frames(1) == (render.MOST_LOCAL_COLOR, render.MOST_SELF_COLOR)
    assert marks.lines(1, 0)[-1] == ("most local, most self", render.MOST_LOCAL_COLOR) and marks.frames(0) == ()
    masked = attention.copy()
    masked[0, :2] = masked[0, 2]  # every head LSA's
    assert HeadMarks.of(masked, 0, 27, config).most_self is None
    # The framed tile: its frame's colours, outermost first, in the gap around it.
    maps = attention[0, :, 27].reshape(3, 8, 8)
    sheet = render.marked_tiles(np.zeros((32, 32, 3), np.uint8), maps, query=(3, 3), cell=40, columns=3,
                                lines=[marks.lines(j, 0) for j in range(3)], frames=[marks.frames(j) for j in range(3)])
    step = 40 + 2 * 6  # a tile and the gap that holds two frames of 3 px on each side
    assert tuple(sheet[20, step]) == render.MOST_LOCAL_COLOR and tuple(sheet[20, step + 3]) == render.MOST_SELF_COLOR


def test_the_api_takes_any_layer_and_a_button_shows_the_self_attending_head(tmp_path, tiny_checkpoints, data_dir):
    from explorer.ui import build_demo
    from tests.helpers import pair_folder
    root = pair_folder(tmp_path / "checkpoints", tiny_checkpoints)
    for variant in ("vanilla", "spt_lsa"):
        shutil.copytree(tiny_checkpoints[variant], root / "paper" / f"cifar10-{variant}")
    demo = build_demo(AppState(root=root, data_dir=str(data_dir)))
    fns = {fn.api_name: fn for fn in demo.fns.values() if fn.api_name}
    for name in ("attention", "what_if"):
        dropdowns = [c for c in fns[name].inputs if getattr(c, "label", None) in ("A's layer", "B's layer")]
        assert len(dropdowns) == 2 and all(d.preprocess(8) == 8 for d in dropdowns)  # past the tiny models' 2
    button = next(c for c in demo.config["components"] if c["props"].get("value") == SELF_HEAD_LABEL)
    [fn] = [fn for fn in demo.fns.values() if (button["id"], "click") in fn.targets]
    labels = [getattr(c, "label", None) for c in fn.outputs]
    assert labels[:2] == ["Model A", "Model B"] and labels[2:5] == ["A's layer", "B's layer", "head"]
    assert fn.fn() == ("paper/cifar10-vanilla", "paper/cifar10-spt_lsa", 0, SAME_DEPTH, HEAD_ALL, 16.0, 16.0)


def test_the_lsa_switches_take_a_layer_for_each_model_and_say_what_was_measured(tab, image):
    from explorer.ui.what_if import WhatIfTab
    what_if = WhatIfTab(tab.app)
    summary = what_if.what_if(image, "tiny", "paper-small", 1, 16, 16, 1.0, "as learned", 2.0, "off")[-1]
    assert "layer 1 for A, 2 for B" in summary  # B at A's depth: both last
    summary = what_if.what_if(image, "tiny", "paper-small", 0, 16, 16, 1.0, "as learned", 2.0, "off", "1")[-1]
    assert "layer 0 for A, 1 for B" in summary
    with pytest.raises(gr.Error, match=r"model B \(paper-small\) has 3 layers"):
        what_if.what_if(image, "tiny", "paper-small", 0, 16, 16, 1.0, "as learned", 2.0, "off", 8)
    # Neither tiny model is a shipped one: the whole-test-set table says so, naming the one without LSA.
    said = what_if.measured("tiny", "paper-small")
    assert "| model |" not in said and "Not measured" in said
    assert "A (tiny-vanilla, no LSA) and B (paper-small)" in said


def test_a_what_if_of_many_heads_draws_each_setting_as_rows_of_six_64_px_tiles():
    """12 heads (the paper-scale model): not one row of 40 px cells, but two rows of six captioned tiles for the
    learned maps above two for the what-if; 4 heads keep one row of 96 px cells for each."""
    from explorer.app.what_if import MANY_HEADS_TILE, _sheet
    image = np.zeros((224, 224, 3), np.uint8)
    many = _sheet(image, np.random.default_rng(0).random((2, 12, 8, 8)), (1, 1), 3)
    assert 6 * MANY_HEADS_TILE < many.shape[1] < 7 * MANY_HEADS_TILE and many.shape[0] > 4 * MANY_HEADS_TILE + 60
    few = _sheet(image, np.random.default_rng(0).random((2, 4, 8, 8)), (1, 1), 3)
    assert 4 * 96 < few.shape[1] < 5 * 96 + 60 and 2 * 96 < few.shape[0] < 3 * 96
