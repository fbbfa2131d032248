"""Tests of the Trust tab's handlers (explorer/ui/trust.py) on the tiny pair, called as the page calls them;
and that the tab is on the page with every event named."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import numpy as np
import pytest

from explorer.ui.context import AppState
from explorer.ui.trust import TEST, ZIP, TrustTab
from tests.helpers import pair_folder


@pytest.fixture(scope="module")
def tab(tmp_path_factory, tiny_checkpoints, data_dir):
    root = pair_folder(tmp_path_factory.mktemp("trust") / "checkpoints", tiny_checkpoints)
    return TrustTab(AppState(root=root, data_dir=str(data_dir)))


def no_progress(*args, **kwargs):
    return None


def test_report_cells_and_download(tab):
    out = tab.trust_report("cifar10-vanilla", "cifar10-spt_lsa", TEST, None, 200, progress=no_progress)
    summary, confusion, table_a, table_b, classes, reliability, cal, only_a, only_b, files, key = out
    assert "200 images" in summary and confusion.ndim == 3 and reliability.ndim == 3
    counts = table_a.iloc[:, 1:].to_numpy()
    assert counts.sum() == 200 and list(table_a.columns)[:3] == ["true class", "airpl", "autom"]
    assert len(classes) == 10 and list(cal["model"]) == ["A", "B"]
    # A cell's gallery holds exactly the images its count says, each captioned with both answers.
    row, col = np.unravel_index(np.argmax(counts), counts.shape)
    gallery, text = tab.cell(key, 0, int(row), int(col) + 1)
    assert len(gallery) == min(60, counts[row, col]) and f"**{counts[row, col]}**" in text
    assert " · A: " in gallery[0][1] and " · B: " in gallery[0][1]
    names = {Path(f).name for f in files}
    assert {"trust.json", "confusion_A.csv", "confusion_B.csv", "confusion.png", "reliability.png"} <= names
    saved = json.loads(Path(next(f for f in files if f.endswith("trust.json"))).read_text())
    assert saved["images"] == 200 and saved["models"][0]["confusion"] == counts.tolist()
    assert len(only_a) == min(60, len(saved["models"][0]["only_right"]))
    again = tab.trust_report("cifar10-vanilla", "cifar10-spt_lsa", TEST, None, 200, progress=no_progress)
    assert "from the cache" in again[0]


def test_a_cell_before_a_report_says_so(tab):
    with pytest.raises(gr.Error, match="evaluate the models first"):
        tab.cell(None, 0, 1, 1)


def test_zip_needs_a_file(tab):
    with pytest.raises(gr.Error, match="zip"):
        tab.trust_report("cifar10-vanilla", "cifar10-spt_lsa", ZIP, None, 100, progress=no_progress)


def test_the_tab_is_on_the_page_with_named_events(tiny_checkpoints, data_dir, tmp_path):
    from explorer.ui.shell import build_demo
    root = pair_folder(tmp_path / "checkpoints", tiny_checkpoints)
    demo = build_demo(AppState(root=root, data_dir=str(data_dir)))
    names = {d.get("api_name") for d in demo.config["dependencies"]}
    assert {"trust_report", "trust_cell_a", "trust_cell_b", "trust_corruptions", "trust_faithfulness"} <= names


def test_faithfulness_is_measured_then_shown_beside_the_maps(tab):
    from explorer.ui.trust import map_note
    note = map_note(tab.app, ("rollout", "last-layer attention"))
    before = note("cifar10-vanilla", "cifar10-spt_lsa")
    label_a, label_b = (tab.app.model(ref).label for ref in ("cifar10-vanilla", "cifar10-spt_lsa"))
    assert f"not measured yet for A: {label_a}; B: {label_b}." in before
    assert "|" not in before and "Which map to trust" in before
    summary, figure, table, files = tab.trust_faithfulness("cifar10-vanilla", "cifar10-spt_lsa",
                                                           progress=no_progress)
    assert "32 images" in summary and "(computed)" in summary and figure.ndim == 3
    assert len(table) == 8 and {Path(f).name for f in files} >= {"faithfulness.csv", "faithfulness.png"}
    shown = {(r["model"], r["map"]): r for _, r in table.iterrows()}
    after = note("cifar10-vanilla", "cifar10-spt_lsa")
    assert "not measured" not in after
    # The note's numbers are the table's, row by row, for both models; occlusion belongs to Evidence's note.
    rollout = next(line for line in after.splitlines() if line.startswith("| attention rollout"))
    cells = [c.strip() for c in rollout.strip("|").split("|")][1:]
    assert cells == [shown[(m, "rollout")][col] for m in (label_a, label_b)
                     for col in ("deletion AUC (lower is better)", "insertion AUC (higher is better)")]
    assert "occlusion" not in after and "random ranking" in after
    occlusion = map_note(tab.app, ("occlusion",))("cifar10-spt_lsa", "cifar10-vanilla")
    assert "| occlusion |" in occlusion and "attention rollout" not in occlusion
    again = tab.trust_faithfulness("cifar10-vanilla", "cifar10-spt_lsa", progress=no_progress)
    assert "(cache)" in again[0]
