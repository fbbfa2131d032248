"""The page's own handlers called directly (no server): the model slots and their cards, links that reopen a
view, samples and the bundled set without data, the first visit's precomputed answers, the Small data tab."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest
from PIL import Image

from explorer.data.datasets import DatasetError
from explorer.finetune.state import RunStatus
from explorer.ui import AppState, build_demo
from explorer.ui.finetune import PAIR, SCRATCH, FinetuneTab
from explorer.ui.shell import Slots
from tests.handlers import A, B, fine_tune_form, ui
from tests.helpers import pair_folder


def test_defaults_and_cards(ex):
    assert ex.initial_refs() == (A, B)
    card = ui(ex).slots.card_markdown(B)
    assert "`spt_lsa`" in card and "tau per layer" in card and "parameters" in card and "test top-1" in card
    # One name, the slot list's label, and the reference the slots and the API take; the card's own name
    # (tiny-spt_lsa) is not a third.
    label = next(label for label, ref in ex.slot_choices() if ref == B)
    name = ex.store.get(B).summary()["name"]
    assert label != B and ex.store.get(B).label == label and name != B
    assert card.startswith(f"**{label}** · `{B}` · `spt_lsa`") and name not in card, (card, label)


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


@pytest.mark.parametrize("ref", ["", "   ", "../etc/passwd", "owner/../x", "my model/with spaces",
                                 "nobody/does-not-exist", "nobody/does-not-exist@v1", "hf://nobody/x"])
def test_bad_hub_ids_answer_fast_and_keep_the_model(ex, ref):
    import time
    start = time.perf_counter()
    slot, prev, card = ui(ex).slots.load_slot(ref, A)
    assert time.perf_counter() - start < 2.0
    assert (slot, prev) == (A, A) and "could not load" in card and "`vanilla`" in card


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
        ui(bare).finetune.finetune_plan(**fine_tune_form(data="cifar10"))
    assert bare.runner.snapshot().status == RunStatus.IDLE  # nothing started


def test_true_label_is_not_guessed_beyond_the_bundled_set(bare, tmp_path):
    assert bare.tests.true_label(tmp_path / "cifar10-test-00999-truck.png") is not None
    assert bare.tests.true_label(tmp_path / "cifar10-test-04242-truck.png") is None


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


def test_the_small_data_tab_says_what_the_shipped_study_measured_recipe_by_recipe(tmp_path):
    """Issue 54: over the shipped checkpoints, the tab's heading follows the study's paired gaps (its results
    file), and its words and tables on attention keep the recipes apart: the paper's recipe in a paragraph and
    a per-layer table of its own, from the numbers the app ships (checkpoints/study/mechanisms.csv)."""
    from explorer.study import mechanisms
    from explorer.study.report import lsa_question, read_results
    from explorer.ui.data_size import DataSizeTab
    root = Path(__file__).resolve().parents[1] / "checkpoints"
    tab = DataSizeTab(AppState(root=root, data_dir=str(tmp_path / "no-data")))
    rows = read_results(root / "study" / "results.csv")
    assert tab.results() == rows and any(r.get("recipe") == "paper" for r in rows)
    assert tab.question() == lsa_question(rows)  # the page's heading (the browser tests open it by it)
    said = tab.mechanisms()
    shipped = mechanisms.read_csv(root / "study" / "mechanisms.csv")
    assert said.startswith(mechanisms.answer(shipped)) and "**Under the paper's recipe**" in said
    assert "| paper | 1,000 | ViT |" in said and "Layer by layer where the paper's recipe ran" in said
    assert mechanisms.layer_table(shipped) in said
    # the paper-scale ViT in its paragraph and in the pick beside the study's models, by its reference
    assert "**At the paper's scale**" in said and "| paper scale | 45,000 | ViT |" in said
    refs = [ref for _, ref in tab.models()]
    assert "paper/cifar10-vanilla" in refs and "study/cifar10-1000-vanilla" in refs and "cifar10-vanilla" not in refs


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
    assert [lab.split(" · ")[:2] for lab in labels[:2]] == [["shipped", "SPT + LSA"], ["shipped", "ViT"]], labels
    assert labels[2:] == ["small data · 1,000 images · ViT", "small data · 1,000 images · SPT + LSA",
                          "small data · 2,500 images · ViT", "small data · 2,500 images · SPT + LSA",
                          "small data · 5,000 images · ViT"]
    assert any(d.get("api_name") == "study_pair" for d in config["dependencies"])


def test_a_buttons_refusal_is_said_in_place_and_still_reaches_an_api_caller(capsys):
    """context.in_place: the handler's answer unchanged; a gr.Error empties the outputs, the Markdown says why
    and the caller gets the error without a toast (one line in the log); a fault says so in place and is
    raised as it was. The outputs are marked for the CSS that hides Gradio's badge; the endpoint keeps the
    handler's name, docstring and signature."""
    import inspect

    from explorer.ui.context import FAULT, IN_PLACE, in_place

    def report(ref_a: str, count: float, request: gr.Request = None, progress=gr.Progress()):
        """Both models over a set."""
        if count < 0:
            raise gr.Error("choose a zip of class folders first")
        if count == 0:
            raise ZeroDivisionError("a bug")
        return f"{ref_a}: {count}", [1, 2], "table"

    with gr.Blocks():
        summary, picture, table = gr.Markdown(), gr.Image(elem_classes="pic"), gr.Dataframe()
        state = gr.State()
    wrapped = in_place(report, [summary, picture, table, state], summary, "not evaluated")
    assert (wrapped.__name__, wrapped.__doc__) == (report.__name__, report.__doc__)
    assert inspect.signature(wrapped) == inspect.signature(report) and inspect.isgeneratorfunction(wrapped)
    assert picture.elem_classes == ["pic", IN_PLACE] and summary.elem_classes == table.elem_classes == [IN_PLACE]
    assert list(wrapped("A", 3)) == [("A: 3", [1, 2], "table")]
    refused = wrapped("A", -1)
    assert next(refused) == ("**⚠ not evaluated:** choose a zip of class folders first", None, None, None)
    with pytest.raises(gr.Error, match="choose a zip of class folders first") as e:
        next(refused)
    assert not e.value.visible and "report refused: choose a zip" in capsys.readouterr().out
    failed = wrapped("A", 0)
    assert next(failed)[0] == f"**⚠ not evaluated:** {FAULT}"
    with pytest.raises(ZeroDivisionError, match="a bug"):
        next(failed)


def test_a_repository_file_is_a_link_on_a_space_and_its_path_elsewhere():
    from explorer.ui.context import repo_link
    assert repo_link("docs/trust.md", "me/explorer") == \
        "[docs/trust.md](https://huggingface.co/spaces/me/explorer/blob/main/docs/trust.md)"
    assert repo_link("study/README.md", None) == "`study/README.md`"


def test_every_child_of_the_tabs_is_a_tab(ex):
    """A component made among gr.Tabs' children but in no tab (a State after a tab's block) is taken for a tab by
    the page: opening the Trust tab then showed it twice, in the Tau tab's place."""
    import gradio as gr

    from explorer.ui import build_demo
    demo = build_demo(ex)
    tabs = [block for block in demo.blocks.values() if isinstance(block, gr.Tabs)]
    assert tabs and all(isinstance(child, gr.Tab) for t in tabs for child in t.children), [
        type(child).__name__ for t in tabs for child in t.children]
