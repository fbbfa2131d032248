"""The analysis tabs' handlers called directly (no server): Compare and its disagreements, Patches,
Attention, What if, Locality, Tau and its ablation pairs, Evidence; what each returns, and every refusal."""

from __future__ import annotations

import shutil
from pathlib import Path

import gradio as gr
import numpy as np
import pytest

from explorer.ui import AppState, build_demo
from explorer.ui.evidence import LABEL, STRIP_ROW, TOP1
from explorer.ui.tau import TauTab, on_page
from tests.handlers import A, B, ui
from tests.helpers import pair_folder


def test_compare_returns_both_top5_and_the_true_label(ex, image_file, cifar10):
    top_a, top_b, verdict = ui(ex).compare.compare(image_file, A, B)
    assert len(top_a) == 5 and len(top_b) == 5 and set(top_a) <= set(cifar10.class_names)
    assert abs(sum(top_b.values()) - 1) < 1 and list(top_b.values()) == sorted(top_b.values(), reverse=True)
    truth = cifar10.class_names[cifar10.y_test[42]]
    assert f"True label **{truth}**" in verdict


def test_the_verdict_checks_an_answer_only_against_a_class_the_models_know():
    from explorer.ui.compare import verdict
    cifar = ["cat", "dog", "frog"]
    # agreeing is not being right: the sign says agreement, the true label's line says who is right
    both_wrong = verdict("frog", "frog", ("cifar10", 7, "cat"), cifar, cifar)
    assert both_wrong.startswith("= both say **frog**") and "✔" not in both_wrong and "A ✘ · B ✘" in both_wrong
    assert verdict("cat", "dog", ("cifar10", 7, "cat"), cifar, cifar).endswith("A ✔ · B ✘")
    assert verdict("cat", "dog", None, cifar, cifar) == "≠ they disagree: **cat** (A) vs **dog** (B)"
    # a CIFAR image shown to models of classes of their own carries no verdict, and the page says why
    own = ["apple", "maple"]
    shown = verdict("apple", "maple", ("cifar10", 7, "cat"), own, own)
    assert "not a class of these models, so no verdict" in shown and "✘" not in shown and "✔" not in shown
    # a pair of two class sets (A of CIFAR-10, B fine-tuned on its own): each side judged by its own classes
    mixed = verdict("cat", "apple", ("held-out own", 3, "apple"), cifar, own)
    assert mixed.endswith("True label **apple** · A – (not one of its classes) · B ✔"), mixed
    assert verdict("cat", "apple", ("cifar10", 3, "cat"), cifar, own).endswith("A ✔ · B – (not one of its classes)")


def test_results_are_cached_and_identical(ex, image_file):
    first = ui(ex).compare.compare(image_file, A, B)
    second = ui(ex).compare.compare(image_file, A, B)
    assert first[:2] == second[:2] and "one call for this image" in second[2] and "cached" not in second[2]
    import re
    took = lambda verdict: re.findall(r"Time: A (\d+) ms.* B (\d+) ms", verdict)  # noqa: E731
    assert took(second[2]) == took(first[2]) != []  # a cached result says what it took when it ran


@pytest.mark.parametrize("file, message", [(None, "No image yet")])
def test_missing_image(ex, file, message):
    with pytest.raises(gr.Error, match=message):
        ui(ex).compare.compare(file, A, B)


def test_bad_uploads_get_a_message_and_nothing_breaks(ex, tmp_path, image_file):
    bad = tmp_path / "fake.png"
    bad.write_text("not a png")
    preview, note, truth = ui(ex).images.take_image(str(bad))
    assert preview is None and "not an image PIL can read" in note
    with pytest.raises(gr.Error, match="fake.png"):
        ui(ex).compare.compare(str(bad), A, B)
    assert len(ui(ex).compare.compare(image_file, A, B)[0]) == 5


def test_disagreements(ex):
    summary, table, gallery = ui(ex).compare.disagreements(A, B, 60)
    assert "first **60** cifar10 test images" in summary and len(table) == 10
    assert all(isinstance(caption, str) and "true" in caption for _, caption in gallery)
    with pytest.raises(gr.Error, match="at least one"):
        ui(ex).compare.disagreements(A, B, 0)


def test_patches_use_the_spt_models_patch_size(ex, image_file, cifar10):
    plain, shifted, note = ui(ex).patches.patches(image_file, A, B)
    assert [name for _, name in shifted] == ["original", "left-up", "left-down", "right-up", "right-down"]
    assert "Patch size **4 px** on the 16×16 input" in note
    assert len({plain.shape} | {g.shape for g, _ in shifted}) == 1


def test_attention_views_show_a_beside_b_and_the_query_maps_in_one_picture(ex, image_file):
    from explorer.analysis import render
    from explorer.app.attention import analyze_pair
    maps, rollout, caption, cell = ui(ex).attention.attention(image_file, A, B, 1, "mean of heads", 31.0, 0.0)
    assert "row 3, col 0" in caption and "A on the left" in caption
    assert cell == {"row": 3, "col": 0, "grid": 4}  # what the page outlines on the picker
    # The rollout is A's view then B's; the maps from the query are the chosen layer's (A | B) above every
    # layer x head (A | B), each exactly as explorer.app.attention draws them for each model alone.
    image, preview = ex.images.get(image_file)
    views = analyze_pair([ex.store.get(A), ex.store.get(B)], ex.cache, image, preview, 1, "mean of heads",
                         (31.0, 0.0))
    pictures = {}
    for part in ("focus", "sheet", "rollout"):
        alone = [getattr(v.view, part) for v in views]
        titles = [f"model {t}:  {v.model.label}" for t, v in zip("AB", views, strict=True)]
        picture = render.side_by_side(alone, titles)
        title = picture.shape[0] - max(a.shape[0] for a in alone)
        assert title > 5 and picture.shape[1] == sum(a.shape[1] for a in alone) + 16
        np.testing.assert_array_equal(picture[title:title + alone[0].shape[0], :alone[0].shape[1]], alone[0])
        np.testing.assert_array_equal(picture[title:title + alone[1].shape[0], -alone[1].shape[1]:], alone[1])
        pictures[part] = picture
    np.testing.assert_array_equal(rollout, pictures["rollout"])
    focus, sheet = pictures["focus"], pictures["sheet"]
    np.testing.assert_array_equal(maps[:focus.shape[0], :focus.shape[1]], focus)
    np.testing.assert_array_equal(maps[-sheet.shape[0]:, :sheet.shape[1]], sheet)
    assert maps.shape[0] == focus.shape[0] + sheet.shape[0] + 12
    with pytest.raises(gr.Error, match="no head 9"):
        ui(ex).attention.attention(image_file, A, B, 0, "head 9", 0, 0)
    heads = ex.store.get(B).config.num_heads
    tiles = ui(ex).attention.attention(image_file, A, B, 1, "all heads", 31.0, 0.0)[0]
    # Every head of the layer as a captioned half-size tile, two to a row (the tiny model has two heads),
    # for each model, above the sheets.
    assert heads == 2 and tiles.shape[0] > 112 and 2 * 2 * 112 < tiles.shape[1]


def test_a_query_click_sends_one_picture_and_the_cell_the_page_outlines(ex, image_file):
    full = ui(ex).attention.attention(image_file, A, B, 1, "all heads", 31.0, 0.0)
    maps, caption, cell = ui(ex).attention.attention_query(image_file, A, B, 1, "all heads", 31.0, 0.0)
    np.testing.assert_array_equal(maps, full[0])
    assert caption == full[2] and cell == full[3] == {"row": 3, "col": 0, "grid": 4}
    picker = ui(ex).attention.query_picker(image_file)
    assert picker.shape == (224, 224, 3)  # the plain image: no outline drawn into it
    np.testing.assert_array_equal(picker, ui(ex).attention.query_picker(image_file))
    layer0, caption, _ = ui(ex).attention.attention_query(image_file, A, B, 0, "head 1", 31.0, 0.0)
    assert layer0.ndim == 3 and "Layer 0 of 2 (the first) for A" in caption
    assert not np.array_equal(layer0, ui(ex).attention.attention_query(image_file, A, B, 1, "head 1", 31.0, 0.0)[0])
    assert ui(ex).attention.query_picker(None) is None

    class Click:  # what Gradio hands the picker's select handler: (x, y) in picker pixels
        index = (10, 200)
    qy, qx, *outputs = ui(ex).attention.pick_query(Click(), image_file, A, B, 1, "all heads")
    assert (qy, qx) == (28.0, 1.0)  # whole pixels of the 32 px input: int(200 * 32 / 224), int(10 * 32 / 224)
    assert "row 3, col 0" in outputs[1] and outputs[2] == {"row": 3, "col": 0, "grid": 4}


def test_what_if_handler(ex, image_file):
    top_a, top_a2, top_b, top_b2, maps, plot, summary = ui(ex).what_if.what_if(
        image_file, A, B, 1, 16.0, 16.0, 0.25, "as learned", 1.0, "off")
    assert top_a == ui(ex).compare.compare(image_file, A, B)[0] and len(top_a2) == 5 and len(top_b2) == 5
    assert "τ × 0.25, diagonal mask off (learned: off)" in summary
    assert "τ × 1, diagonal mask off (learned: on)" in summary
    assert maps.ndim == 3 and plot.ndim == 3 and plot.shape[1] == 520 < plot.shape[0]  # its panels stacked
    assert maps.shape[0] > maps.shape[1]  # A's learned/what-if sheet above B's, two rows each
    again = ui(ex).what_if.what_if(image_file, A, B, 1, 16.0, 16.0, 0.25, "as learned", 1.0, "off")[5]
    assert again is plot  # drawn once: the same content comes from the plot cache
    with pytest.raises(gr.Error, match="between 0.25 and 4.0"):
        ui(ex).what_if.what_if(image_file, A, B, 1, 16.0, 16.0, 10, "as learned", 1.0, "off")
    with pytest.raises(gr.Error, match="diagonal mask is one of"):
        ui(ex).what_if.what_if(image_file, A, B, 1, 16.0, 16.0, 1, "sometimes", 1.0, "off")
    with pytest.raises(gr.Error, match="No image yet"):
        ui(ex).what_if.what_if(None, A, B, 1, 16.0, 16.0, 1, "on", 1.0, "off")


def test_locality_and_tau(ex, image_file):
    dist, ent, table = ui(ex).attention.locality(image_file, A, B, "this image")
    assert list(table.columns) == ["model", "mean distance (px)", "mean entropy (nats)"] and len(table) == 2
    dist64, _, _ = ui(ex).attention.locality(image_file, A, B, "64 test images")
    assert len(dist.axes[0].get_lines()) >= 2
    tau_plot, history_plot, tau_table, note = ui(ex).tau.tau(A, B)
    loaded = ex.store.get(B)
    assert set(tau_table["layer"]) == {0, 1} and set(tau_table["model"]) == {f"B: {loaded.label}"}
    # one tau per layer: three decimals, as the card has it
    assert tau_table["tau"][0] == f"{loaded.probe.tau()[0][0]:.3f}" and history_plot is not None


@pytest.fixture(scope="module")
def ablation_root(tmp_path_factory, tiny_checkpoints, cifar10):
    """Three corners of the 2x2 (vanilla, LSA alone, SPT/LSA) and a broken LSA checkpoint."""
    from explorer.training.recipe import TrainConfig
    from explorer.training.runs import train_new
    from tests.helpers import eager_compile, tiny_config
    root = pair_folder(tmp_path_factory.mktemp("ablation") / "checkpoints", tiny_checkpoints)
    with eager_compile():
        train_new(tiny_config(variant="lsa"), "tiny", cifar10.subset(train=128, test=32, seed=2),
                  TrainConfig(epochs=1, batch_size=64, validation_fraction=0.25), root, name="cifar10-lsa",
                  verbose=0)
    broken = root / "cifar10-broken"
    shutil.copytree(root / "cifar10-lsa", broken)
    (broken / "model.weights.h5").write_bytes(b"not a weights file")
    return root


def test_the_tau_tab_names_only_the_slots_models_and_says_when_one_has_no_tau(ablation_root, data_dir):
    """Issue: "Tau names only the slots' models and says when one has no τ"; cifar10-lsa, an LSA model in
    neither slot, is not shown."""
    here = AppState(root=ablation_root, data_dir=str(data_dir))
    tab = TauTab(here)
    plot, history, table, note = tab.tau(A, B)  # A: a ViT, B: SPT + LSA
    loaded, name_a = here.store.get(B), here.store.get(A).label  # each by its one name on the page
    name_b = loaded.label
    assert name_b == "shipped · SPT + LSA · 192 images"
    assert set(table["model"]) == {f"B: {name_b}"} and "cifar10-lsa" not in note
    assert f"**A**: {name_a} is a ViT without LSA: it has no tau." in note and f"**B**: {name_b} learns" in note
    assert list(table["tau"]) == [", ".join(f"{v:.{3 if len(t) == 1 else 2}f}" for v in t) for t in loaded.probe.tau()]
    titles = [ax.get_title() for ax in plot.axes if ax.images]
    assert titles == [f"B: {name_b} · √d_k = {loaded.config.initial_tau:.3g}"]
    assert history is not None
    _, _, table, note = tab.tau("cifar10-lsa", B)  # both slots hold LSA: both shown, A's first, none else
    lsa = here.store.get("cifar10-lsa").label
    assert list(dict.fromkeys(table["model"])) == [f"A: {lsa}", f"B: {name_b}"] and "no tau" not in note
    plot, history, table, note = tab.tau(A, A)  # neither slot holds an LSA model; both hold the same one
    assert plot is None and history is None and table.empty
    assert note == f"**A = B**: {name_a} is a ViT without LSA: it has no tau."
    shown = on_page(tab.tau)(A, A)  # the page hides the pictures it has no plot for
    assert [shown[i]["visible"] for i in (0, 1)] == [False, False]
    shown = on_page(tab.tau)(A, B)
    assert [shown[i]["visible"] for i in (0, 1)] == [True, True] and shown[0]["value"].shape[1] == 520


def test_a_card_without_tau_per_epoch_gets_words_not_an_empty_trajectory(tmp_path, tiny_checkpoints, data_dir):
    import json
    root = pair_folder(tmp_path / "checkpoints", tiny_checkpoints)
    card = root / B / "explorer.json"
    data = json.loads(card.read_text())
    data["history"] = [{k: v for k, v in epoch.items() if k != "tau"} for epoch in data["history"]]
    card.write_text(json.dumps(data))
    plot, history, table, note = TauTab(AppState(root=root, data_dir=str(data_dir))).tau(A, B)
    assert plot is not None and history is None and len(table) == 2
    assert "its card records no tau per epoch, so there is no trajectory to draw" in note


def test_ablation_pairs_put_two_corners_of_the_2x2_in_the_slots_in_one_click(ablation_root, data_dir, ex):
    here = AppState(root=ablation_root, data_dir=str(data_dir))
    pairs = here.ablation_pairs(B)
    # One checkpoint per variant (cifar10-lsa, not the other LSA folder), pairs in the reader's order.
    assert pairs == [("ViT | SPT + LSA", A, B), ("ViT | LSA alone", A, "cifar10-lsa"),
                     ("LSA alone | SPT + LSA", "cifar10-lsa", B)]
    demo = build_demo(here)
    buttons = {c["id"]: c["props"]["value"] for c in demo.config["components"]
               if "pair-btn" in (c["props"].get("elem_classes") or [])}
    assert sorted(buttons.values()) == sorted(label for label, _, _ in pairs)
    slots = {c["props"].get("label"): c["id"] for c in demo.config["components"]}
    wired = {}
    for fn in demo.fns.values():
        for label in [buttons[t[0]] for t in fn.targets if t[0] in buttons and t[1] == "click"]:
            assert [o._id for o in fn.outputs] == [slots["Model A"], slots["Model B"]]
            wired[label] = fn.fn()
    assert wired == {label: (a, b) for label, a, b in pairs}
    assert ex.ablation_pairs(B) == []  # two variants are no ablation: no row of pairs
    assert not any("pair-btn" in (c["props"].get("elem_classes") or []) for c in build_demo(ex).config["components"])


def test_the_paper_scale_pair_is_one_click_from_the_first_screen(tmp_path, tiny_checkpoints, data_dir, ex):
    """A button beside the toolbar puts the paper-scale ViT and SPT + LSA in the slots, when both are here."""
    root = pair_folder(tmp_path / "checkpoints", tiny_checkpoints)
    for variant in ("vanilla", "spt_lsa"):
        shutil.copytree(tiny_checkpoints[variant], root / "paper" / f"cifar10-{variant}")
    demo = build_demo(AppState(root=root, data_dir=str(data_dir)))
    button = [c["id"] for c in demo.config["components"] if c["props"].get("elem_id") == "paper-pair-btn"]
    assert len(button) == 1
    slots = {c["props"].get("label"): c["id"] for c in demo.config["components"]}
    wired = [fn for fn in demo.fns.values() if (button[0], "click") in [tuple(t) for t in fn.targets]]
    assert len(wired) == 1 and [o._id for o in wired[0].outputs] == [slots["Model A"], slots["Model B"]]
    assert wired[0].fn() == ("paper/cifar10-vanilla", "paper/cifar10-spt_lsa")
    assert not any(c["props"].get("elem_id") == "paper-pair-btn" for c in build_demo(ex).config["components"])
    # Drawn as chosen while the slots hold the pair, and only then: the slots' changes say which.
    [look] = [fn for fn in demo.fns.values() if [o._id for o in fn.outputs] == button
              and (slots["Model A"], "change") in [tuple(t) for t in fn.targets]]
    assert look.fn("paper/cifar10-vanilla", "paper/cifar10-spt_lsa")[0]["variant"] == "primary"
    assert look.fn("paper/cifar10-vanilla", "vanilla")[0]["variant"] == "secondary"
    refs = AppState(root=root, data_dir=str(data_dir)).initial_refs()
    drawn = next(c for c in demo.config["components"] if c["id"] == button[0])["props"]["variant"]
    assert drawn == ("primary" if tuple(refs) == ("paper/cifar10-vanilla", "paper/cifar10-spt_lsa") else "secondary")


def test_evidence_tab_occlusion_strip_and_robustness(ex, image_file, cifar10):
    from explorer.analysis import evidence, robustness
    mean = "the image's mean colour"
    picture, text = ui(ex).evidence.evidence(image_file, A, B, TOP1, mean, 1)
    a, b = ex.store.get(A), ex.store.get(B)
    image, _ = ex.images.get(image_file)
    pair = evidence.occlusion_pair([a, b], image)  # what the tab shows, computed without it
    assert f"**A** · {evidence.occlusion_caption(pair.results[0])}" in text
    assert f"**B** · {evidence.occlusion_caption(pair.results[1])}" in text and f"({pair.vmax:.3f})" in text
    assert picture.ndim == 3 and picture.shape[1] > picture.shape[0]
    truth = cifar10.class_names[cifar10.y_test[42]]
    _, text = ui(ex).evidence.evidence(image_file, A, B, LABEL, "a blur of the image", 2)
    assert f"p({truth})" in text and "(true label)" in text and "2×2 patches" in text
    _, text = ui(ex).evidence.evidence(image_file, A, B, "ship", mean, 1)
    assert text.count("p(ship)") == 2 and "(chosen class)" in text
    with pytest.raises(gr.Error, match="known only for test samples"):
        ui(ex).evidence.evidence(_holiday(image_file), A, B, LABEL, mean, 1)
    with pytest.raises(gr.Error, match="not a class both models predict"):
        ui(ex).evidence.evidence(image_file, A, B, "dragon", mean, 1)
    with pytest.raises(gr.Error, match="No image yet"):
        ui(ex).evidence.evidence(None, A, B, TOP1, mean, 1)
    strip = ui(ex).evidence.shift_strip(image_file, A, B, 2, "edge")
    alone = robustness.strip_picture(robustness.shift_strip([a, b], image, 2, "edge"), per_row=STRIP_ROW)
    np.testing.assert_array_equal(strip, alone)
    plot, table, summary = ui(ex).evidence.robustness(A, B, 60, 2, "zero")
    curves = robustness.robustness_pair([a, b], cifar10.x_test[:60], cifar10.y_test[:60], 2, "zero")
    assert list(table["unchanged at S px"]) == [f"{100 * r.unchanged[-1]:.1f} %" for r in curves]
    assert list(table["top-1"]) == [f"{100 * r.accuracy[0]:.1f} %" for r in curves]
    assert "first **60** cifar10 test images" in summary and len(plot.axes) == 2
    assert ui(ex).evidence.robustness(A, B, 60, 2, "zero")[1].equals(table)  # cached, the same
    with pytest.raises(gr.Error, match="at least one test image"):
        ui(ex).evidence.robustness(A, B, 60, 0, "zero")


def test_an_upload_is_analysed_for_evidence_only_while_the_evidence_tab_is_open(ex, image_file):
    from explorer.ui.evidence import STALE, TAB
    mean = "the image's mean colour"
    form = (image_file, A, B, TOP1, mean, 1, 2, "edge")
    assert ui(ex).evidence.upload("Compare", *form) == (None, STALE, None)  # no occlusion pass elsewhere
    shown, text, strip = ui(ex).evidence.upload(TAB, *form)
    alone, alone_text = ui(ex).evidence.evidence(image_file, A, B, TOP1, mean, 1)
    np.testing.assert_array_equal(shown, alone)
    assert text == alone_text
    np.testing.assert_array_equal(strip, ui(ex).evidence.shift_strip(image_file, A, B, 2, "edge"))
    assert ui(ex).evidence.upload(TAB, None, *form[1:]) == (None, STALE, None)  # a cleared upload box


def _holiday(image_file):
    """The same pixels under a name that is not a test sample's: no true label."""
    target = Path(image_file).with_name("holiday.png")
    shutil.copy(image_file, target)
    return str(target)


def test_the_pages_compare_sends_each_heading_with_its_bars(ex, image_file):
    """A new image or other models: each top-k comes in one update with the heading of the models that gave it
    (a heading never stands over the previous models' bars), and Compare's fine-tune line is empty for a
    visitor with no Start."""
    top_a, top_b, verdict = ui(ex).compare.answer(image_file, A, B)
    alone = ui(ex).compare.compare(image_file, A, B)
    assert top_a["label"] == "Model A top-5" and top_b["label"] == "Model B top-5"
    assert (top_a["value"], top_b["value"], verdict) == alone
    assert ui(ex).finetune.running_note() == ""


def test_a_what_if_answer_is_marked_once_the_switches_no_longer_match_it():
    from explorer.ui.what_if import STALE, marked
    shown = ([1.0, "as learned", 1.0, "off"], "B: diagonal mask off")
    assert marked([1.0, "as learned", 1.0, "off"], shown) == "B: diagonal mask off"
    stale = marked([1.0, "as learned", 1.0, "as learned"], shown)
    assert stale.startswith(STALE) and stale.endswith("B: diagonal mask off")


def test_a_mixed_pair_gets_each_tool_over_one_labelled_set_refused_in_place(tmp_path, tiny_checkpoints, cifar10,
                                                                           data_dir):
    """Issue #91 (c): A of CIFAR-10 beside B fine-tuned on classes of its own. Every tool that measures both
    models on one labelled set says in place, as an answer (never an error), that it does not apply and why;
    Compare judges each side by its own classes."""
    from explorer.ui.trust import TEST, TrustTab
    from tests.helpers import OWN_CLASSES, own_pair
    root = pair_folder(tmp_path / "checkpoints", tiny_checkpoints)
    own = own_pair(root, tiny_checkpoints, (cifar10.x_test[:30], np.arange(30) % 10))
    state = AppState(root=root, data_dir=str(data_dir))
    pair = (A, own[1])

    def refused(text):
        return "Not for this pair: A knows 10 classes (airplane," in text and "B 10 (apple, bicycle" in text
    summary, table, gallery = ui(state).compare.disagreements(*pair, 100)
    assert refused(summary) and table is None and gallery is None, summary
    plot, table, summary = ui(state).evidence.robustness(*pair, 50, 2, "edge")
    assert refused(summary) and plot is None and table is None, summary
    tab = TrustTab(state)
    for out in (tab.trust_report(*pair, TEST, None, 1000, progress=lambda *a, **k: None),
                tab.trust_corruptions(*pair, 1000, progress=lambda *a, **k: None)):
        assert refused(out[0]) and all(o is None for o in out[1:]), out[0]
    sample = state.sample(None, own[1], seed=3)
    assert sample.label in OWN_CLASSES
    verdict = ui(state).compare.compare(sample.path, *pair)[2]
    assert f"True label **{sample.label}** · A – (not one of its classes) · B " in verdict, verdict
