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
    rollout = [line for line in after.splitlines() if line.startswith("| attention rollout")]
    cells = [[c.strip() for c in row.strip("|").split("|")][1:] for row in rollout]
    assert cells == [[tag, *(shown[(m, "rollout")][col] for col in ("deletion ↓", "insertion ↑"))]
                     for tag, m in zip("AB", (label_a, label_b), strict=True)]
    assert "occlusion" not in after and "random ranking" in after
    occlusion = map_note(tab.app, ("occlusion",))("cifar10-spt_lsa", "cifar10-vanilla")
    assert "| occlusion |" in occlusion and "attention rollout" not in occlusion
    again = tab.trust_faithfulness("cifar10-vanilla", "cifar10-spt_lsa", progress=no_progress)
    assert "(cache)" in again[0]


def _ship_for(tab, tmp_path, monkeypatch):
    """The shipped results rewritten for the tiny pair's weights, in a folder of their own."""
    from explorer.analysis import corruptions
    digests = [tab.service.digest(tab.app.model(ref)) for ref in ("cifar10-vanilla", "cifar10-spt_lsa")]
    for name in ("corruptions", "faithfulness"):
        data = json.loads((corruptions.SHIPPED.parent / f"{name}.json").read_text())
        data["weights"] = digests
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    monkeypatch.setattr(corruptions, "SHIPPED", tmp_path / "corruptions.json")
    monkeypatch.setattr("explorer.analysis.faithfulness.SHIPPED", tmp_path / "faithfulness.json")


def test_a_pair_with_shipped_results_shows_them_on_arrival_verdict_first(tab, tmp_path, monkeypatch):
    _ship_for(tab, tmp_path, monkeypatch)
    shown = tab.arrive("cifar10-vanilla", "cifar10-spt_lsa")
    assert shown.verdict.startswith("**Verdict**") and "mCE" in shown.verdict and "most faithful" in shown.verdict
    summary, figure, table, files = shown.corr
    assert "(shipped;" in summary and len(table) == 30 and figure.ndim == 3 and shown.corr_count == 1000
    summary, figure, table, files = shown.faith
    assert "(shipped)" in summary and len(table) == 8 and figure.ndim == 3
    updates = shown.updates()
    assert [u.visible for u in updates if isinstance(u, gr.Column)] == [True] * 4 + [False]  # the report's: later


def test_a_pair_without_shipped_results_says_in_words_what_each_button_costs(tab):
    shown = tab.arrive("cifar10-vanilla", "cifar10-spt_lsa", 1000)
    assert shown.verdict == "" and shown.faith is None and shown.corr is None
    assert "nothing is shipped for this pair" in shown.corr_text and "about " in shown.corr_text
    assert f"first {shown.corr_count:,} test images" in shown.corr_text
    assert 100 <= shown.corr_count <= 1000 and shown.corr_count % 100 == 0
    assert "nothing is shipped" in shown.faith_text and "about " in shown.faith_text
    assert "1,000 images" in shown.report_text and "computed when the tab opens" in shown.report_text
    updates = shown.updates()
    # No empty table on the page: each result's box stays hidden until it has something to show.
    assert [u.visible for u in updates if isinstance(u, gr.Column)] == [False] * 5
    assert updates[2] is None and updates[9] is None  # the tables: nothing, not empty frames


def test_the_cost_is_measured_once_the_report_has_run(tab):
    from explorer.analysis.trust_service import PATIENCE
    pair = [tab.app.model(ref) for ref in ("cifar10-vanilla", "cifar10-spt_lsa")]
    count = tab.service.corruption_count(pair)
    assert tab.service.corruption_cost(pair, count).seconds <= PATIENCE or count == 100
    tab.trust_report("cifar10-vanilla", "cifar10-spt_lsa", TEST, None, 300, progress=no_progress)
    assert tab.service.rate(pair).measured
    words = tab.arrive("cifar10-vanilla", "cifar10-spt_lsa").corr_text
    assert "at this host's measured rate" in words


def test_the_report_computes_itself_when_the_tab_opens_once_per_pair(tab):
    skipped = tab.opened("Compare", "cifar10-vanilla", "cifar10-spt_lsa", None, 200, progress=no_progress)
    assert len(skipped) == 11 and all(isinstance(s, type(gr.skip())) for s in skipped)
    out = tab.opened("Trust", "cifar10-vanilla", "cifar10-spt_lsa", None, 200, progress=no_progress)
    assert "200 images" in out[0]
    again = tab.opened("Trust", "cifar10-vanilla", "cifar10-spt_lsa", out[-1], 200, progress=no_progress)
    assert all(isinstance(s, type(gr.skip())) for s in again)


def test_progress_says_done_of_total_and_the_time_left():
    from explorer.analysis.trust_service import Eta
    from explorer.ui import trust_text
    assert (trust_text.progress_line("gaussian_noise severity 3 (3/75)", 3, 75, "settings", 30.4)
            == "gaussian_noise severity 3 · 3 of 75 settings · about 30 s left")
    assert trust_text.progress_line("model A", 0, 2000, "images", None) == "model A · 0 of 2,000 images"
    assert trust_text.progress_line("x", 1, 4, "steps", 600) == "x · 1 of 4 steps · about 10 min left"
    eta = Eta(began=100.0)
    assert eta.left(0.25, now=110.0) == pytest.approx(30.0) and eta.left(0.0, now=110.0) is None
    seen = []
    report = trust_text.timed(lambda f, desc: seen.append((f, desc)), 10, "steps")
    report(0.5, "A: rollout curves")
    assert seen[0][0] == 0.5 and seen[0][1].startswith("A: rollout curves · 5 of 10 steps · about ")
    assert trust_text.cost(trust_text.Cost(40.2, True)) == "about 40 s at this host's measured rate"
    assert trust_text.cost(trust_text.Cost(400, False)) == "about 7 min (estimated from the models' sizes)"


def test_a_pair_of_its_own_classes_is_judged_on_its_held_out_images_and_never_by_an_error(
        tmp_path, tiny_checkpoints, cifar10, data_dir):
    """A fine-tune on classes CIFAR does not have: the report opens on the images its fine-tune held out and
    says so; a pair without them gets the reason in place, as an answer, from every Trust measure."""
    from tests.helpers import OWN_CLASSES, own_pair
    root = tmp_path / "checkpoints"
    held = own_pair(root / "with", tiny_checkpoints, (cifar10.x_test[:50], np.arange(50) % 10))
    bare = own_pair(root / "without", tiny_checkpoints, None)
    tab = TrustTab(AppState(root=root, data_dir=str(data_dir)))
    summary, *_, classes, _, _, _, _, _, key = tab.trust_report(*[f"with/{r}" for r in held], TEST, None, 1000,
                                                                progress=no_progress)
    assert summary.startswith("**held-out own") and "50 images" in summary and key is not None
    assert list(classes["class"]) == OWN_CLASSES and classes["images"].sum() == 50
    refs = [f"without/{r}" for r in bare]
    for out in (tab.trust_report(*refs, TEST, None, 1000, progress=no_progress),
                tab.opened("Trust", *refs, None, 1000, progress=no_progress),
                tab.trust_corruptions(*refs, 1000, progress=no_progress),
                tab.trust_faithfulness(*refs, progress=no_progress)):
        assert "10 classes of their own" in out[0] and all(o is None for o in out[1:])


def test_a_zip_that_cannot_judge_the_pair_is_said_under_it_naming_their_classes(tmp_path, tiny_checkpoints, cifar10,
                                                                               data_dir):
    """Issue #91's bad input: a zip of other, more, fewer or no classes, an empty or a corrupt one gets one
    line under the zip naming the pair's classes (the line itself when it is chosen; at Evaluate, the line and
    a refusal that stops the report, so the one shown stays); a zip of their classes says what it holds."""
    from explorer.ui.trust import quiet_note
    from tests.helpers import OWN_CLASSES, class_zip, own_pair
    root = tmp_path / "checkpoints"
    refs = own_pair(root, tiny_checkpoints, None)
    tab = TrustTab(AppState(root=root, data_dir=str(data_dir)))
    x = cifar10.x_test[:20]
    right = class_zip(tmp_path / "right.zip", x, np.arange(20) % 10, OWN_CLASSES)
    note = tab.zip_note(ZIP, str(right), *refs)
    assert note.startswith("**right.zip**: 20 images of the models' 10 classes: **Evaluate"), note
    assert tab.zip_note(TEST, str(right), *refs) == "" and tab.zip_note(ZIP, None, *refs) == ""
    assert list(tab.zip_gate(ZIP, str(right), *refs)) == [note]  # it lets the report run
    x = x[:12]
    some = class_zip(tmp_path / "some.zip", x, np.arange(12) % 3, OWN_CLASSES[:3])
    empty = tmp_path / "empty.zip"
    with __import__("zipfile").ZipFile(empty, "w"):
        pass
    corrupt = tmp_path / "corrupt.zip"
    corrupt.write_bytes(some.read_bytes()[:200])
    bad = {"other": class_zip(tmp_path / "other.zip", x, np.arange(12) % 2, ["pumpkin", "apple"]),
           "more": class_zip(tmp_path / "more.zip", x, np.arange(12) % 11, [*OWN_CLASSES, "zebra"]),
           "fewer": some, "empty": empty, "corrupt": corrupt, "none": None}
    for why, path in bad.items():
        shown = quiet_note(tab.zip_note)(ZIP, path and str(path), *refs)
        gate = tab.zip_gate(ZIP, path and str(path), *refs)
        said = next(gate)
        with pytest.raises(gr.Error):
            next(gate)
        assert said.startswith("**⚠ not evaluated:**") and "report shown is still" in said, (why, said)
        assert ", ".join(OWN_CLASSES) in said, (why, said)
        if path is not None:
            assert shown.startswith("**⚠ this zip cannot judge these models:**") and ", ".join(OWN_CLASSES) in shown
    assert "zebra" in next(tab.zip_gate(ZIP, str(bad["more"]), *refs))
    assert f"no images of {', '.join(OWN_CLASSES[3:])}" in next(tab.zip_gate(ZIP, str(some), *refs))
