"""The app's what-if and attention views (explorer/app/what_if.py, attention.py) on tiny trained checkpoints,
without a server."""

from __future__ import annotations

import dataclasses
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from explorer.app.attention import analyze_pair
from explorer.app.models import ModelStore
from explorer.app.results import ResultCache, what_if_setting
from explorer.app.what_if import what_if


@pytest.fixture(scope="module")
def store(tmp_path_factory, tiny_checkpoints):
    root = tmp_path_factory.mktemp("wb")
    for variant, path in tiny_checkpoints.items():
        shutil.copytree(path, root / variant)
    return ModelStore(root)


def test_the_models_own_setting_is_no_what_if(store):
    vanilla, lsa = store.get("vanilla"), store.get("spt_lsa")
    assert what_if_setting(lsa, 1.0, None) is None and what_if_setting(lsa, 1.0, True) is None
    assert what_if_setting(vanilla, 1.0, False) is None
    assert what_if_setting(lsa, 1.0, False) == (1.0, False)
    assert what_if_setting(vanilla, 2.0, None) == (2.0, False)
    with pytest.raises(ValueError, match="between 0.25 and 4.0"):
        what_if_setting(lsa, 8, None)
    with pytest.raises(ValueError, match="must be a number"):
        what_if_setting(lsa, "sharp", None)


def test_what_if_results_are_cached_per_setting(store, images):
    loaded, cache = store.get("spt_lsa"), ResultCache()
    learned, _, cached = cache.get(loaded, images[0])
    assert not cached and cache.get(loaded, images[0], 1.0, True)[0] is learned  # the own setting is the probe
    changed, seconds, cached = cache.get(loaded, images[0], 0.25, False)
    assert not cached and seconds > 0 and changed is not learned
    again, seconds_again, cached = cache.get(loaded, images[0], 0.25, False)
    assert cached and seconds_again == seconds and again is changed  # the time it took when it ran
    assert not np.array_equal(changed.attention, learned.attention)


def test_what_if_view(store, images):
    loaded, cache = store.get("spt_lsa"), ResultCache()
    w = what_if(loaded, cache, images[1], images[1], factor=0.25, diagonal_mask=False, layer=9, query_yx=(31, 0))
    assert (w.factor, w.diagonal_mask, w.layer, w.query) == (0.25, False, 1, (3, 0))  # layer clipped
    assert len(w.top5) == 5 and len(w.top5_what_if) == 5
    assert w.entropy.shape == w.distance.shape == (2, 2, 2)
    assert w.entropy[1].mean() < w.entropy[0].mean()  # a smaller tau sharpens
    assert w.maps.ndim == 3 and w.maps.shape[0] > 2 * 96  # a learned row over a what-if row
    learned = analyze_pair([loaded], cache, images[1], images[1])[0]
    assert w.top5 == learned.top5
    np.testing.assert_array_equal(w.entropy[0], learned.view.entropy)


def test_concurrent_what_ifs_with_different_settings_each_get_their_own(store, images):
    settings = [(loaded, f, m) for loaded in (store.get("vanilla"), store.get("spt_lsa"))
                for f, m in [(0.25, None), (1.0, None), (4.0, True), (0.5, False), (2.0, True)]]
    solo = {}
    for i, (loaded, f, m) in enumerate(settings):
        solo[i] = ResultCache().get(loaded, images[i % 4], f, m)[0]
    shared = ResultCache()
    jobs = [i for i in range(len(settings)) for _ in range(4)]

    def run(i):
        loaded, f, m = settings[i]
        return i, (ResultCache() if i % 2 else shared).get(loaded, images[i % 4], f, m)[0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, jobs))
    for i, result in results:
        np.testing.assert_array_equal(result.logits, solo[i].logits)
        np.testing.assert_array_equal(result.attention, solo[i].attention)
    # and the learned model gives exactly what it gave before
    for loaded in (store.get("vanilla"), store.get("spt_lsa")):
        np.testing.assert_array_equal(ResultCache().get(loaded, images[0])[0].logits, loaded.probe(images[:1]).logits)


def test_views_compute_only_the_parts_asked_for(store, images):
    loaded = store.get("spt_lsa")
    full = analyze_pair([loaded], ResultCache(), images[2], images[2], 1, "all heads", (5, 9))[0].view
    click = analyze_pair([loaded], ResultCache(), images[2], images[2], 1, "all heads", (5, 9),
                         parts=("focus", "sheet"))[0].view
    assert click.rollout is None and click.entropy is None
    np.testing.assert_array_equal(click.focus, full.focus)
    np.testing.assert_array_equal(click.sheet, full.sheet)
    with pytest.raises(ValueError, match="head must be"):
        analyze_pair([loaded], ResultCache(), images[2], images[2], 1, "every head", (5, 9))


@pytest.fixture(scope="module")
def paper_shaped(tmp_path_factory):
    """A model of the paper's shape (12 heads of 16, per-head tau, stochastic depth), narrower and shallower."""
    from explorer.checkpoints.store import Card, write_checkpoint
    from explorer.model.config import get_preset
    from explorer.model.models import build_vit
    config = get_preset("paper").replace(num_layers=3, projection_dim=48, mlp_units=(96, 48))
    root = tmp_path_factory.mktemp("paper")
    card = Card(config=config.to_dict(), variant=config.variant, class_names=[str(i) for i in range(10)])
    write_checkpoint(build_vit(config, 10), root / "paper-small", card)
    return ModelStore(root).get("paper-small")


def test_the_full_analysis_of_a_paper_shaped_model_has_every_head(paper_shaped, images):
    from explorer.analysis import plots, render
    from explorer.app.attention import side_by_side_pictures, tile_layout
    loaded, cache = paper_shaped, ResultCache()
    layers, heads, grid = 3, 12, 8
    [analysis] = analyze_pair([loaded], cache, images[0], images[0], layer=2, query_yx=(9, 20))
    view = analysis.view
    assert analysis.result.attention.shape == (1, layers, heads, grid * grid, grid * grid)
    assert view.distance.shape == view.entropy.shape == (layers, heads) and np.isfinite(view.entropy).all()
    assert view.query == (2, 5) and len(analysis.top5) == 5
    # one layer's 12 heads in a near square of captioned tiles (3 x 4); no every-layer x head sheet past 4 heads
    columns, tile = tile_layout(heads, 224)
    assert (columns, tile) == (3, 104)
    assert 4 * tile < view.focus.shape[0] < 4 * (tile + 60) and 3 * tile < view.focus.shape[1] < 4 * tile
    assert view.sheet is None and view.marks.distance.shape == view.marks.self_share.shape == (heads,)
    for head in ("mean of heads", "head 11"):
        one = analyze_pair([loaded], cache, images[0], images[0], 2, head, (9, 20), parts=("focus",))[0].view
        # one 224 px map under the words that name it, its colour bar beside it
        assert 224 + 12 < one.focus.shape[0] < 224 + 60 and 224 + render.BAR_WIDTH < one.focus.shape[1] < 224 + 60
    with pytest.raises(ValueError, match="has 12 heads; there is no head 12"):
        analyze_pair([loaded], cache, images[0], images[0], 2, "head 12", (9, 20), parts=("focus",))
    assert set(side_by_side_pictures([analysis, analysis])) == {"focus", "rollout"}
    w = what_if(loaded, cache, images[0], images[0], factor=2.0, diagonal_mask=False, layer=2)
    assert w.entropy.shape == w.distance.shape == (2, layers, heads)
    tau = loaded.probe.tau()
    assert [len(t) for t in tau] == [heads] * layers  # one temperature per head
    plots.figure_to_array(plots.plot_tau({loaded.label: tau}, {loaded.label: loaded.config.initial_tau}))


@pytest.fixture(scope="module")
def churn_root(tmp_path_factory, tiny_checkpoints):
    """Four real checkpoints that answer differently: the two tiny trained ones, and each with its classifier's
    outputs rolled by one class (written as a run writes a checkpoint)."""
    from explorer.checkpoints.store import load_folder, read_card, write_checkpoint
    from explorer.model.models import HEAD
    root = tmp_path_factory.mktemp("churn")
    for variant, path in tiny_checkpoints.items():
        shutil.copytree(path, root / variant)
        model, _ = load_folder(path)
        kernel, bias = model.get_layer(HEAD).get_weights()
        model.get_layer(HEAD).set_weights([np.roll(kernel, 1, axis=-1), np.roll(bias, 1)])
        write_checkpoint(model, root / f"{variant}-rolled", read_card(path))
    return root


def test_answers_never_cross_models_as_the_store_drops_and_loads_them(churn_root, images):
    """A store of two, filled with four checkpoints round after round (every get drops a model and loads
    another), and one checkpoint written again in place between rounds: the cache's answer for the image is
    always the one the model asked gives itself, and a checkpoint loaded again from the same files finds its
    own earlier answer."""
    refs = ["vanilla", "spt_lsa", "vanilla-rolled", "spt_lsa-rolled"]
    store, cache, image = ModelStore(churn_root, capacity=2), ResultCache(), images[0]
    answered, first = set(), {}
    for round_ in range(3):
        if round_ == 1:  # "vanilla" (dropped by now) becomes the rolled model, in new files
            for name in ("model.weights.h5", "explorer.json"):
                shutil.copyfile(churn_root / "vanilla-rolled" / name, churn_root / "vanilla" / name)
        for ref in refs:
            assert not store.has(ref)  # dropped since it was last asked: this get loads it anew
            loaded = store.get(ref)
            own = loaded.probe(image[None]).logits  # the model's own answer, past the cache
            first.setdefault(ref, own)
            result, _, cached = cache.get(loaded, image)
            np.testing.assert_array_equal(result.logits, own, err_msg=f"round {round_}: {ref}")
            version = (ref, round_ >= 1 and ref == "vanilla")
            assert cached == (version in answered), (round_, ref)
            answered.add(version)
            del loaded, result
        assert len(store.loaded()) == 2
    # Every answer differs from every other model's, so a crossed answer could not have passed.
    assert len({first[ref].tobytes() for ref in refs}) == len(refs)
    np.testing.assert_array_equal(cache.get(store.get("vanilla"), image)[0].logits, first["vanilla-rolled"])


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="relies on CPython reusing a freed address")
def test_a_model_in_the_place_of_a_dropped_one_gets_its_own_answers(store, images):
    """CPython gives a new object the address, and so the id(), of one just freed: a model loaded where a
    dropped one lived must get its own answers from the cache, not the dropped model's."""
    vanilla, lsa = store.get("vanilla"), store.get("spt_lsa")
    cache = ResultCache()
    for _ in range(20):
        dropped = dataclasses.replace(vanilla)  # the vanilla checkpoint as the store holds it, then dropped
        cache.get(dropped, images[0])
        address = id(dropped)
        del dropped
        newcomer = dataclasses.replace(lsa)
        if id(newcomer) == address:
            break
    assert id(newcomer) == address  # the premise: the newcomer has the dropped model's id
    np.testing.assert_array_equal(cache.get(newcomer, images[0])[0].logits, lsa.probe(images[:1]).logits)
