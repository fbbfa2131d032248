"""The app's handlers called directly (no server): what each returns, and every refusal."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
from PIL import Image

from explorer.core.card import Epoch
from explorer.data.datasets import DatasetError
from explorer.finetune.plan import ZIP
from explorer.ui import AppState, build_demo
from explorer.ui.attention import AttentionTab
from explorer.ui.compare import CompareTab
from explorer.ui.evidence import LABEL, STRIP_ROW, TOP1, EvidenceTab
from explorer.ui.finetune import PAIR, SCRATCH, FinetuneTab
from explorer.ui.images import ImagesColumn
from explorer.ui.patches import PatchesTab
from explorer.ui.shell import Slots
from explorer.ui.tau import TauTab
from explorer.ui.what_if import WhatIfTab
from tests.helpers import pair_folder

A, B = "cifar10-vanilla", "cifar10-spt_lsa"


# Each AppState's handlers, built once, keyed by the AppState itself (an id() could name a later AppState
# once the first is gone).
_UI: dict[AppState, SimpleNamespace] = {}


def ui(ex: AppState) -> SimpleNamespace:
    """Every tab's handlers on `ex`, as the page wires them."""
    if ex not in _UI:
        finetune = FinetuneTab(ex)
        _UI[ex] = SimpleNamespace(slots=Slots(ex, finetune), images=ImagesColumn(ex), compare=CompareTab(ex),
                                  patches=PatchesTab(ex), attention=AttentionTab(ex), what_if=WhatIfTab(ex),
                                  tau=TauTab(ex), finetune=finetune, evidence=EvidenceTab(ex))
    return _UI[ex]


def built_finetune(ex: AppState) -> FinetuneTab:
    """The Fine-tune tab built on a page of its own: its run's handlers name the components they change."""
    from explorer.ui import finetune
    from explorer.ui.context import Page
    with gr.Blocks():
        page = Page(gr.Dropdown(), gr.Dropdown(), gr.File(), loaded=(gr.State(), gr.State()),
                    cards=(gr.Markdown(), gr.Markdown()))
        return finetune.build(ex, page)


@pytest.fixture(scope="module")
def ex(tmp_path_factory, tiny_checkpoints, data_dir):
    root = pair_folder(tmp_path_factory.mktemp("ui") / "checkpoints", tiny_checkpoints)
    return AppState(root=root, data_dir=str(data_dir))


@pytest.fixture(scope="module")
def image_file(tmp_path_factory, cifar10):
    path = tmp_path_factory.mktemp("img") / "cifar10-test-00042-x.png"
    Image.fromarray(cifar10.x_test[42]).save(path)
    return str(path)


def test_defaults_and_cards(ex):
    assert ex.initial_refs() == (A, B)
    card = ui(ex).slots.card_markdown(B)
    assert "`spt_lsa`" in card and "tau per layer" in card and "parameters" in card and "test top-1" in card
    # The slot list's label and the checkpoint's name: the one names the other.
    label = next(label for label, ref in ex.slot_choices() if ref == B)
    name = ex.store.get(B).summary()["name"]
    assert card.startswith(f"**{label}** (`{name}`)" if name not in label else f"**{label}**"), (card, label)


def test_empty_checkpoint_folder_says_what_to_do(tmp_path):
    empty = AppState(root=tmp_path, data_dir=None)
    assert empty.initial_refs() == (None, None)
    assert "No checkpoints under" in ui(empty).slots.card_markdown(None) and "python -m explorer.train" in \
        ui(empty).slots.card_markdown(None)
    build_demo(empty)  # the app still builds and serves


def test_a_closed_page_releases_its_slots_as_gradio_calls_the_unload_handler(tmp_path, tiny_checkpoints):
    """demo.unload calls app.leave with no inputs: Gradio hands it the request (the page's session) only
    through a parameter typed gr.Request, so it is called here as Gradio calls it."""
    from gradio.helpers import special_args

    from explorer.core.settings import Settings
    root = pair_folder(tmp_path / "checkpoints", tiny_checkpoints)
    app = AppState(root=root, data_dir=None, shared=True, settings=Settings.from_env({}))
    app.arrive("v" * 24, SimpleNamespace(session_hash="tab-1"))
    app.shown(SimpleNamespace(session_hash="tab-1"), "A", "cifar10-vanilla")
    assert app.visitors.shown_refs() == {"cifar10-vanilla"}
    inputs, *_ = special_args(app.leave, [], request=gr.Request(session_hash="tab-1"))
    app.leave(*inputs)
    assert app.visitors.shown_refs() == set()


def test_compare_returns_both_top5_and_the_true_label(ex, image_file, cifar10):
    top_a, top_b, verdict = ui(ex).compare.compare(image_file, A, B)
    assert len(top_a) == 5 and len(top_b) == 5 and set(top_a) <= set(cifar10.class_names)
    assert abs(sum(top_b.values()) - 1) < 1 and list(top_b.values()) == sorted(top_b.values(), reverse=True)
    truth = cifar10.class_names[cifar10.y_test[42]]
    assert f"True label **{truth}**" in verdict


def test_results_are_cached_and_identical(ex, image_file):
    first = ui(ex).compare.compare(image_file, A, B)
    second = ui(ex).compare.compare(image_file, A, B)
    assert first[:2] == second[:2] and "one call for this image" in second[2] and "cached" not in second[2]
    import re
    took = lambda verdict: re.findall(r"Time: A (\d+) ms.* B (\d+) ms", verdict)  # noqa: E731
    assert took(second[2]) == took(first[2]) != []  # a cached result says what it took when it ran


def test_load_failure_keeps_the_previous_model(ex, tmp_path):
    ref, prev, card = ui(ex).slots.load_slot("nobody/nothing@main", B)
    assert (ref, prev) == (B, B) and "could not load 'nobody/nothing@main'" in card and "`spt_lsa`" in card
    broken = ex.root / "broken"
    shutil.copytree(ex.root / A, broken)
    (broken / "model.weights.h5").write_bytes(b"garbage")
    try:
        ref, _, card = ui(ex).slots.load_slot("broken", A)
        assert ref == A and "cannot load the model" in card
    finally:
        shutil.rmtree(broken)


def test_a_link_reopens_its_models_and_tab_and_a_plain_open_changes_nothing(ex):
    slots = Slots(ex, FinetuneTab(ex), {"attention": "Attention"})
    plain = slots.reopen(B, A, A, B, "attention", False)
    assert all(u == {"__type__": "update"} for u in plain)
    # From a link: the view's models (B in slot A, A in slot B) loaded, the tab opened, everything redrawn.
    ref_a, ref_b, held_a, held_b, card_a, card_b, tabs, label, redraw = slots.reopen(B, A, A, B, "attention", True)
    assert (ref_a, ref_b, held_a, held_b) == (B, A, B, A)
    assert "`spt_lsa`" in card_a and "`vanilla`" in card_b
    assert tabs.selected == "attention" and label == "Attention" and redraw
    assert slots.reopen(A, B, A, B, "", True)[-1] != redraw  # every reopening redraws, models changed or not
    # A model the link names that does not load: the page's default in its slot, and the card says why.
    ref_a, ref_b, held_a, held_b, card_a, card_b, tabs, label, _ = slots.reopen(A, "nobody/nothing@main", A, B,
                                                                                "no-such-tab", True)
    assert (ref_a, held_a, card_a) == ({"__type__": "update"},) * 3
    assert ref_b == held_b == ex.initial_refs()[1] and "the link's model B could not be opened" in card_b
    assert "`spt_lsa`" in card_b and tabs == label == {"__type__": "update"}


def test_new_checkpoints_appear_without_a_restart(ex):
    extra = ex.root / "finetuned" / "later-run"
    shutil.copytree(ex.root / A, extra)
    try:
        a, b, base = ui(ex).slots.refresh(A, B)
        refs = lambda update: [value for _, value in update["choices"]]  # noqa: E731  (label, reference)
        assert "finetuned/later-run" in refs(a) and "finetuned/later-run" in refs(base)
        assert ("fine-tuned · later-run", "finetuned/later-run") in a["choices"]
        assert refs(base)[:2] == [PAIR, SCRATCH]
    finally:
        shutil.rmtree(extra)


def test_sample_by_class(ex, cifar10):
    path, preview, truth = ui(ex).images.sample("ship", B, 0)
    index = int(truth.split("#")[1].rstrip(")"))
    assert cifar10.class_names[cifar10.y_test[index]] == "ship" and "**ship**" in truth
    assert preview.shape == (224, 224, 3)
    np.testing.assert_array_equal(np.asarray(Image.open(path)), cifar10.x_test[index])
    with pytest.raises(gr.Error, match="not a cifar10 class"):
        ui(ex).images.sample("dragon", B, 0)


@pytest.fixture(scope="module")
def bare(tiny_checkpoints, tmp_path_factory):
    """The app on a fresh machine: no data folder, an empty Keras cache, offline (see no_data)."""
    root = pair_folder(tmp_path_factory.mktemp("bare"), tiny_checkpoints)
    return AppState(root=root, data_dir=str(root / "nowhere"))


def test_samples_of_every_class_from_the_bundled_set_without_data(bare, no_data, monkeypatch):
    from explorer.data.datasets import sample_set
    monkeypatch.setenv("EXPLORER_DATA_DIR", str(no_data.parent))  # ignored: the AppState was given a folder
    sample = sample_set()
    for class_name in sample.class_names:
        path, preview, truth = ui(bare).images.sample(class_name, B, 5)
        index = int(truth.split("#")[1].rstrip(")"))
        assert sample.class_names[sample.y_test[index]] == class_name and f"**{class_name}**" in truth
        np.testing.assert_array_equal(np.asarray(Image.open(path)), sample.x_test[index])
        assert bare.tests.true_label(path) == class_name
    assert "bundled with the app" in bare.tests.note() and "JPEG copy" in bare.tests.note()


def test_disagreements_and_locality_on_the_bundled_set_without_data(bare, ex, no_data):
    summary, table, _ = ui(bare).compare.disagreements(A, B, 1000)
    assert "first **1000** cifar10 test images (bundled with the app)" in summary and len(table) == 10
    # the bundled images are the first 1,000 of the test set: the same numbers as with the full data
    assert summary.replace(" (bundled with the app)", "") == ui(ex).compare.disagreements(A, B, 1000)[0]
    with pytest.raises(gr.Error) as e:  # more than the sample, offline: what to do, and nothing lost
        ui(bare).compare.disagreements(A, B, 1050)
    assert "1,050 cifar10 test images are not here" in str(e.value) and "EXPLORER_DATA_DIR" in str(e.value)
    assert len(ui(bare).compare.disagreements(A, B, 60)[1]) == 10
    _, _, table = ui(bare).attention.locality(None, A, B, "64 test images")
    assert len(table) == 2
    with pytest.raises(DatasetError, match="EXPLORER_DATA_DIR"):  # training needs the full data
        bare.tests.training_data("cifar10")
    with pytest.raises(gr.Error, match="could not be downloaded.*EXPLORER_DATA_DIR"):  # and says so in the tab
        ui(bare).finetune.finetune_plan(**_form(data="cifar10"))
    assert bare.runner.snapshot().status == "idle"  # nothing started


def test_true_label_is_not_guessed_beyond_the_bundled_set(bare, tmp_path):
    assert bare.tests.true_label(tmp_path / "cifar10-test-00999-truck.png") is not None
    assert bare.tests.true_label(tmp_path / "cifar10-test-04242-truck.png") is None


def test_patches_use_the_spt_models_patch_size(ex, image_file, cifar10):
    plain, shifted, note = ui(ex).patches.patches(image_file, A, B)
    assert [name for _, name in shifted] == ["original", "left-up", "left-down", "right-up", "right-down"]
    assert "Patch size **4 px** on the 16×16 input" in note
    assert len({plain.shape} | {g.shape for g, _ in shifted}) == 1


def test_attention_views_show_a_beside_b_and_the_query_maps_in_one_picture(ex, image_file):
    from explorer.analysis import render
    from explorer.app.workbench import analyze_pair
    maps, rollout, caption, cell = ui(ex).attention.attention(image_file, A, B, 1, "mean of heads", 31.0, 0.0)
    assert "row 3, col 0" in caption and "A on the left" in caption
    assert cell == {"row": 3, "col": 0, "grid": 4}  # what the page outlines on the picker
    # The rollout is A's view then B's; the maps from the query are the chosen layer's (A | B) above every
    # layer x head (A | B), each exactly as the workbench draws them for each model alone.
    image, preview = ex.images.get(image_file)
    views = analyze_pair([ex.store.get(A), ex.store.get(B)], ex.cache, image, preview, 1, "mean of heads",
                         (31.0, 0.0))
    pictures = {}
    for part in ("focus", "sheet", "rollout"):
        alone = [getattr(v["view"], part) for v in views]
        titles = [f"model {t}:  {v['model'].label}" for t, v in zip("AB", views, strict=True)]
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
    assert layer0.ndim == 3 and "Layer 0 for A" in caption
    assert not np.array_equal(layer0, ui(ex).attention.attention_query(image_file, A, B, 1, "head 1", 31.0, 0.0)[0])
    assert ui(ex).attention.query_picker(None) is None

    class Click:  # what Gradio hands the picker's select handler: (x, y) in picker pixels
        index = (10, 200)
    qy, qx, *outputs = ui(ex).attention.pick_query(Click(), image_file, A, B, 1, "all heads")
    assert (qy, qx) == (200 * 32 / 224, 10 * 32 / 224)
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
    tau_plot, history_plot, tau_table = ui(ex).tau.tau(A, B)
    assert set(tau_table["layer"]) == {0, 1} and all("spt_lsa" in m for m in tau_table["model"])
    loaded = ex.store.get(B)
    assert tau_table["tau"][0] == f"{loaded.probe.tau()[0][0]:.3f}"


@pytest.fixture(scope="module")
def ablation_root(tmp_path_factory, tiny_checkpoints, cifar10):
    """Three corners of the 2x2 (vanilla, LSA alone, SPT/LSA) and a broken LSA checkpoint."""
    from explorer.training.recipe import TrainConfig
    from explorer.training.runs import train_new
    from tests.helpers import tiny_config
    root = pair_folder(tmp_path_factory.mktemp("ablation") / "checkpoints", tiny_checkpoints)
    train_new(tiny_config(variant="lsa"), "tiny", cifar10.subset(train=128, test=32, seed=2),
              TrainConfig(epochs=1, batch_size=64, validation_fraction=0.25), root, name="cifar10-lsa", verbose=0)
    broken = root / "cifar10-broken"
    shutil.copytree(root / "cifar10-lsa", broken)
    (broken / "model.weights.h5").write_bytes(b"not a weights file")
    return root


def test_the_tau_tab_shows_every_shipped_lsa_model_whatever_the_slots_hold(ablation_root, data_dir):
    root = ablation_root
    here = AppState(root=root, data_dir=str(data_dir))
    tab = TauTab(here)
    assert tab.shipped_lsa() == ["cifar10-broken", "cifar10-lsa", "cifar10-spt_lsa"]  # from the cards alone
    _, _, table = tab.tau(A, A)  # neither slot holds an LSA model
    labels = [here.store.get(r).label for r in ("cifar10-lsa", "cifar10-spt_lsa")]
    assert list(dict.fromkeys(table["model"])) == labels and "(lsa)" in labels[0] and "(spt_lsa)" in labels[1]
    for ref in ("cifar10-lsa", "cifar10-spt_lsa"):
        loaded = here.store.get(ref)
        rows = table[table["model"] == loaded.label]
        assert list(rows["tau"]) == [", ".join(f"{v:.3f}" for v in t) for t in loaded.probe.tau()]
    plot, history, _ = tab.tau(B, A)
    assert [t.get_text() for t in plot.legends[0].get_texts()][:2] == labels  # the legend under the plot


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


def test_disagreements(ex):
    summary, table, gallery = ui(ex).compare.disagreements(A, B, 60)
    assert "first **60** cifar10 test images" in summary and len(table) == 10
    assert all(isinstance(caption, str) and "true" in caption for _, caption in gallery)
    with pytest.raises(gr.Error, match="at least one"):
        ui(ex).compare.disagreements(A, B, 0)


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


def _zip(tmp_path, members):
    path = tmp_path / "data.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(path)


def _form(**changes):
    form = dict(what=PAIR, preset="tiny", variant="spt_lsa", data="cifar10", zip_file=None, epochs=1, lr=1e-3,
                batch_size=32, images=256, freeze=False, name="", ref_a=A, ref_b=B)
    form.update(changes)
    return form


@pytest.mark.parametrize("changes, message", [
    (dict(epochs=-1), "epochs must be between 1 and"), (dict(epochs=10**6), "epochs must be between"),
    (dict(lr=-1.0), "learning rate"), (dict(batch_size=-2), "batch size"),
    (dict(images=10**9), "images must be between"), (dict(images=1), "images must be between"),
    (dict(epochs=2.5), "whole number"), (dict(name="../../etc"), "run name"),
    (dict(data=ZIP), "upload a zip"), (dict(what=SCRATCH, preset="huge"), "choose a preset"),
    (dict(ref_b=None), "slot B holds no model"), (dict(what="finetuned/nothing"), "could not|not"),
    (dict(data="imagenet"), "unknown data source"),
])
def test_fine_tune_form_is_validated(ex, changes, message):
    with pytest.raises(gr.Error, match=message):
        ui(ex).finetune.finetune_plan(**_form(**changes))


def test_fine_tune_form_plans(ex):
    pair = ui(ex).finetune.finetune_plan(**_form(epochs=0, lr=0, batch_size=0, images=300))
    assert [m.tag for m in pair.members] == ["A", "B"] and len(pair.dataset.x_train) == 300
    assert pair.recipe == {"epochs": None, "learning_rate": None, "batch_size": None, "freeze_backbone": False}
    alone = ui(ex).finetune.finetune_plan(**_form(what=A))
    assert [(m.tag, m.base) for m in alone.members] == [("A", str((ex.root / A).resolve()))]
    new = ui(ex).finetune.finetune_plan(**_form(what=SCRATCH, variant="lsa"))
    assert new.scratch and new.members[0].variant == "lsa" and new.members[0].base is None


def test_fine_tune_zip_problems(ex, tmp_path):
    png = Image.new("RGB", (8, 8))
    import io
    buf = io.BytesIO()
    png.save(buf, format="PNG")
    cases = [({"a.png": buf.getvalue(), "b.png": buf.getvalue()}, "needs class folders"),
             ({"../x/a.png": buf.getvalue(), "c/b.png": buf.getvalue()}, "unsafe member path")]
    for members, message in cases:
        with pytest.raises(gr.Error, match=message):
            ui(ex).finetune.finetune_plan(**_form(data=ZIP, zip_file=_zip(tmp_path, members)))
    bomb = _zip(tmp_path, {"a/x.png": b"\0" * (300 * 2**20), "b/y.png": buf.getvalue()})
    assert (tmp_path / "data.zip").stat().st_size < 2 * 2**20  # a real bomb: tiny on disk
    with pytest.raises(gr.Error, match="expands to 300 MiB; the limit is 200 MiB"):
        ui(ex).finetune.finetune_plan(**_form(data=ZIP, zip_file=bomb))


def test_cancel_without_a_run(ex):
    assert ui(ex).finetune.cancel() == "No run is going on."


@pytest.mark.parametrize("ref", ["", "   ", "../etc/passwd", "owner/../x", "my model/with spaces",
                                 "nobody/does-not-exist", "nobody/does-not-exist@v1", "hf://nobody/x"])
def test_bad_hub_ids_answer_fast_and_keep_the_model(ex, ref):
    import time
    start = time.perf_counter()
    slot, prev, card = ui(ex).slots.load_slot(ref, A)
    assert time.perf_counter() - start < 2.0
    assert (slot, prev) == (A, A) and "could not load" in card and "`vanilla`" in card


def test_the_first_visit_opens_analysed_without_a_model_call_per_visitor(ex):
    from explorer.data.samples import examples
    first = examples()[0]
    demo = build_demo(ex)
    props = {c["props"].get("elem_id"): c["props"] for c in demo.config["components"] if c["props"].get("elem_id")}
    assert props["upload"]["value"]["path"].endswith(Path(first.path).name)
    assert props["label-a"]["value"]["label"] and props["label-b"]["value"]["label"]
    assert f"True label **{first.label}**" in props["verdict"]["value"]
    assert props["maps"]["value"] and props["rollout"]["value"] and "Query patch row" in props["attn-caption"]["value"]
    assert props["picker"]["value"] and f"**{first.label}**" in props["truth"]["value"]
    # Tables filled on a click show their own column names until then, not Gradio's 1, 2, 3.
    assert props["robustness-table"]["value"]["headers"][:2] == ["model", "top-1"]
    assert props["dis-table"]["value"]["headers"] == ["class", "A top-1", "B top-1", "B − A (points)"]
    assert "Patch size" in next(c["props"]["value"] for c in demo.config["components"]
                                if "Patch size" in str(c["props"].get("value")))
    # What a visitor gets is in the page's config, computed once: pages open with no model call.
    image, _ = ex.images.get(first.path)
    calls = ex.cache.get(ex.store.get(A), image)
    assert calls[2]  # cached since the page was built
    examples_block = [c for c in demo.config["components"] if c["type"] == "dataset"]
    assert len(examples_block) == 1 and len(examples_block[0]["props"]["samples"]) == len(examples())


def test_examples_cover_every_case_with_their_true_labels(ex):
    from explorer.data.samples import examples
    found = examples()
    assert {e.case for e in found} == {"a", "b", "both", "neither"} and len({e.label for e in found}) == len(found)
    for e in found:  # named like test samples: the app knows each one's label
        assert ex.tests.true_label(e.path) == e.label
        assert ui(ex).images.take_image(e.path)[0].shape == (224, 224, 3)


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


def test_fine_tune_form_refuses_a_zip_too_small_to_judge_unless_told_to_train_on_all(ex, tmp_path):
    import io
    members = {}
    for c in ("cat", "dog"):
        buf = io.BytesIO()
        Image.new("RGB", (32, 32), "red" if c == "cat" else "blue").save(buf, format="PNG")
        members[f"set/{c}/0.png"] = buf.getvalue()
    form = _form(data=ZIP, zip_file=_zip(tmp_path, members), images=0)
    with pytest.raises(gr.Error, match="would hold 0, too few to judge them by. Give at least 23 images per class"):
        ui(ex).finetune.finetune_plan(**form)
    plan = ui(ex).finetune.finetune_plan(**form, train_on_all=True)
    assert len(plan.dataset.x_train) == 2 and len(plan.dataset.x_test) == 0


def test_the_fine_tune_tab_says_when_a_gpu_would_sit_idle(ex, tmp_path, monkeypatch):
    """A GPU's driver files present, JAX's CUDA plugin missing (as in this test environment: JAX's CPU
    wheel only): the tab says runs train on the CPU and what to change."""
    gpu = tmp_path / "proc" / "driver" / "nvidia" / "gpus" / "0000:00:1e.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text("Model: NVIDIA L4\n")
    monkeypatch.setenv("EXPLORER_DRIVER_ROOT", str(tmp_path))
    monkeypatch.delenv("EXPLORER_TRAIN_BACKEND", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    import importlib.util
    if any(importlib.util.find_spec(n) for n in ("jax_cuda12_plugin", "jax_cuda13_plugin")):
        pytest.skip("JAX's CUDA plugin is installed here")
    here = AppState(root=ex.root, data_dir=ex.data_dir)  # the settings are read as the app starts
    notes = [c["props"]["value"] for c in build_demo(here).config["components"]
             if c["props"].get("elem_id") == "ft-hardware"]
    assert len(notes) == 1 and "has an NVIDIA GPU, but runs will train on its CPU" in notes[0]
    assert "pip install -r requirements-gpu.txt" in notes[0]


def test_the_small_data_tab_puts_a_size_pair_in_the_slots(tmp_path, tiny_checkpoints, data_dir):
    """Study pairs at two sizes (and a lone model at a third) beside the shipped pair: the slots list them
    grouped and labelled, the tab offers the sizes with both models, picking one names the pair, and the
    curve is drawn from the results the app ships."""
    from explorer.checkpoints.store import update_card
    from explorer.ui.data_size import DataSizeTab
    root = pair_folder(tmp_path / "checkpoints", tiny_checkpoints, dataset={"train_images": 45000},
                       metrics={"test_top1": 0.8})
    for variant, path in tiny_checkpoints.items():
        for n in (1000, 2500) if variant == "spt_lsa" else (1000, 2500, 5000):
            shutil.copytree(path, root / "study" / f"cifar10-{n}-{variant}")
            update_card(root / "study" / f"cifar10-{n}-{variant}", dataset={"train_images": n})
    rows = ["train_images,variant,seed,test_top1,trial"] + [
        f"{n},{v},{s},{0.3 + n / 10000 + (0.04 if v == 'spt_lsa' else 0) + s / 100},t{n}{v}{s}"
        for n in (1000, 2500) for v in ("vanilla", "spt_lsa") for s in range(3)]
    (root / "study" / "results.csv").write_text("\n".join(rows) + "\n")
    ex = AppState(root=root, data_dir=str(data_dir))
    tab = DataSizeTab(ex)
    assert [n for _, n in tab.sizes()] == [1000, 2500, 45000]
    assert tab.pair(2500) == ("study/cifar10-2500-vanilla", "study/cifar10-2500-spt_lsa")
    assert tab.pair("45000") == ("cifar10-vanilla", "cifar10-spt_lsa")
    with pytest.raises(gr.Error, match="no pair was trained on 5000 images here; sizes with a pair: 1,000, 2,500"):
        tab.pair(5000)
    figure, gaps, text = tab.curve()
    assert len(figure.axes) == 1 and len(figure.axes[0].get_lines()) == 2 and "| 1,000 | 3 | +4.00 ± 0.00 |" in text
    assert list(gaps.axes[0].get_lines()[0].get_xdata()) == [1000, 2500]
    config = build_demo(ex).config
    slot = next(c for c in config["components"] if c["props"].get("label") == "Model A")
    labels = [choice[0] for choice in slot["props"]["choices"]]
    assert labels[:2] == ["cifar10-spt_lsa", "cifar10-vanilla"]
    assert labels[2:] == ["small data · 1,000 images · ViT", "small data · 1,000 images · SPT + LSA",
                          "small data · 2,500 images · ViT", "small data · 2,500 images · SPT + LSA",
                          "small data · 5,000 images · ViT"]
    assert any(d.get("api_name") == "study_pair" for d in config["dependencies"])


def test_the_tau_panel_of_a_run_says_whose_tau_comes_and_never_that_there_is_no_lsa(ex):
    from explorer.analysis.plots import NO_LSA_TEXT
    from explorer.finetune.state import MemberState, RunState
    tab = built_finetune(ex)
    plan = tab.finetune_plan(**_form(epochs=1, images=64))
    state = RunState(running=True, status="training", members=[MemberState("A", m.label) for m in plan.members],
                     description=plan.description, started=1.0)
    state.members[0].history = [Epoch(epoch=1, loss=1.0, tau=[])]  # A (vanilla) trains first: no tau
    changed = tab.view.run_outputs(state, plan, A, B)
    out = tab.view.outputs  # a run going on changes its status and plots, nothing else
    assert set(changed) == {out.status, out.curves, out.tau} and len(out.components()) == 14
    assert changed[out.curves]["visible"] and changed[out.tau]["visible"]  # hidden until a run draws them
    tau = changed[out.tau]["value"]
    texts = [t.get_text() for t in tau.axes[0].texts]
    assert texts and NO_LSA_TEXT not in texts and plan.members[1].label in texts[0], texts
    alone = tab.finetune_plan(**_form(what=A, epochs=1, images=64))
    state.members = [MemberState("A", alone.members[0].label)]
    tau = tab.view.run_outputs(state, alone, A, B)[tab.view.outputs.tau]["value"]
    assert [t.get_text() for t in tau.axes[0].texts] == ["no LSA layers in the models being fine-tuned"]
