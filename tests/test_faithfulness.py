"""Tests of explorer.analysis.faithfulness: deletion/insertion curves, their areas and the randomisation check, on tiny
real models, and the report shipped for the shipped pair."""

from __future__ import annotations

import json

import numpy as np
import pytest

from explorer.analysis import faithfulness as ff
from explorer.analysis.evidence import fill_image, occlusion_batch
from explorer.model.models import build_vit
from explorer.model.probe import Probe
from tests.helpers import ROOT, tiny_config


@pytest.fixture(scope="module")
def probe():
    config = tiny_config(variant="spt_lsa")
    return Probe(build_vit(config, 10), config)


@pytest.fixture(scope="module")
def images():
    from explorer.data.datasets import sample_set
    return sample_set().x_test[:3]


def test_spearman():
    a = np.arange(10.0)[None]
    assert ff.spearman(a, a * 3 + 1)[0] == pytest.approx(1.0)
    assert ff.spearman(a, -a)[0] == pytest.approx(-1.0)
    assert ff.spearman(a, np.ones_like(a))[0] == 0.0


def test_curves_start_and_end_where_they_should(probe, images):
    found, classes = ff.maps(probe, images)
    assert set(found) == set(ff.KINDS) and all(v.shape == (3, 16) for v in found.values())
    clean = probe(images).probabilities[np.arange(3), classes]
    deletion = ff.curves(probe, images, found["rollout"], classes, "deletion")
    insertion = ff.curves(probe, images, found["rollout"], classes, "insertion")
    assert deletion.shape == (3, len(ff.curve_fractions(16)))
    assert np.allclose(deletion[:, 0], clean, atol=1e-5) and np.allclose(insertion[:, -1], clean, atol=1e-5)
    mean_filled = np.stack([fill_image(x, "mean") for x in images])
    assert np.allclose(deletion[:, -1], probe(mean_filled).probabilities[np.arange(3), classes], atol=1e-5)
    blurred = np.stack([fill_image(x, "blur", None, 8.0) for x in images])
    assert np.allclose(insertion[:, 0], probe(blurred).probabilities[np.arange(3), classes], atol=1e-5)


def test_occlusion_ranking_removes_the_most_first(probe, images):
    """With one patch per step, the first deletion step of the occlusion ranking is the largest single-patch
    drop: no ranking can be lower there."""
    found, classes = ff.maps(probe, images)
    occ = ff.curves(probe, images, found["occlusion"], classes, "deletion", step=1)
    for kind in ("rollout", "random"):
        other = ff.curves(probe, images, found[kind], classes, "deletion", step=1)
        assert (occ[:, 1] <= other[:, 1] + 1e-6).all()
    drops = np.stack([o.drop.max() for o in occlusion_batch(probe, images, target=classes)])
    assert np.allclose(occ[:, 0] - occ[:, 1], drops, atol=1e-5)


def test_auc():
    x = ff.curve_fractions(64)
    assert x[0] == 0 and x[-1] == 1 and len(x) == 17
    assert ff.auc(np.ones(17), x) == pytest.approx(1.0)
    assert ff.auc(x, x) == pytest.approx(0.5)


def test_randomisation_top_down(probe, images):
    plan = ff.stages(probe.model)
    assert [name for name, _ in plan] == ["head", "block1", "block0", "embedding"]
    covered = {n for _, layers in plan for n in layers}
    assert covered == {layer.name for layer in probe.model.layers if layer.weights} - {"preprocess"}
    weights_before = probe.model.get_weights()
    names, rc = ff.randomisation(probe.model, probe.config, images)
    assert names == ["head", "block1", "block0", "embedding"]
    # The attention maps do not depend on the head: re-initialising it leaves them exactly as they were.
    assert rc["rollout"][0] == pytest.approx(1.0) and rc["last-layer attention"][0] == pytest.approx(1.0)
    # A model with every layer re-initialised has other maps (no longer the same ranking of patches).
    assert rc["rollout"][-1] < 0.9 and rc["last-layer attention"][-1] < 0.9
    # The trained model itself is left untouched (a copy is randomised).
    assert all(np.array_equal(a, b) for a, b in zip(weights_before, probe.model.get_weights(), strict=True))
    # Seeded: the same check again draws the same re-initialisation, whatever was drawn in between.
    np.random.default_rng().random(3)
    assert ff.randomisation(probe.model, probe.config, images) == (names, rc)


def test_report_round_trips(probe, images):
    m = ff.model_faithfulness(probe, images, "tiny")
    report = ff.FaithfulnessReport([m], "three", 3, 0, ff.curve_fractions(16).tolist())
    back = ff.FaithfulnessReport.from_json(json.loads(json.dumps(report.to_json())))
    assert back.models[0].deletion_auc == m.deletion_auc and len(back.rows()) == len(ff.KINDS)


@pytest.mark.parametrize("pair", [("cifar10-vanilla", "cifar10-spt_lsa"), ("paper/cifar10-vanilla",
                                                                           "paper/cifar10-spt_lsa")])
def test_shipped_report_is_the_shipped_pairs(pair):
    from explorer.analysis.corruptions import weights_digest
    digests = [weights_digest(ROOT / "checkpoints" / n) for n in pair]
    report = ff.shipped(digests)
    assert report is not None, f"no report in explorer/shipped/ for {pair}: tools/make_trust_results.py faithfulness"
    assert [m.name for m in report.models] == list(pair)
    assert ff.shipped(digests[::-1]) is None
    for m in report.models:
        assert set(m.deletion_auc) == set(ff.KINDS) and m.stages[0] == "head"
        # Occlusion ranks by the quantity deletion measures: on trained models it beats a random ranking.
        assert m.deletion_auc["occlusion"] < m.deletion_auc["random"]
        assert m.rank_correlation["rollout"][0] == pytest.approx(1.0)


def _measured(name, deletion, insertion):
    kinds = list(deletion)
    return ff.ModelFaithfulness(name, {}, {}, deletion, insertion, dict.fromkeys(kinds, 0.0),
                                dict.fromkeys(kinds, 0.0))


def test_note_gives_each_map_against_a_random_ranking_and_what_is_not_measured():
    a = _measured("a", {"rollout": 0.2, "last-layer attention": 0.5, "random": 0.4},
                  {"rollout": 0.6, "last-layer attention": 0.45, "random": 0.5})
    text = ff.note([("A", "a", (a, "cifar10", 32)), ("B", "b", None)], ("rollout", "last-layer attention"),
                   "measure it there")
    assert "over the first 32 cifar10 test images" in text
    assert "| attention rollout | A | 0.200 | 0.600 |" in text
    assert "| a random ranking (for scale) | A | 0.400 | 0.500 |" in text and "| B |" not in text
    assert ("A: attention rollout beats a random ranking on both curves; last-layer attention (mean of heads) "
            "not on both: read it with care.") in text
    assert text.endswith("_How faithful the maps are is not measured yet for B: b. Measure it there._")
    both = ff.note([("A", "a", (a, "the first 32 test images", 32)), ("B", "b", (a, "x", 32))], ("rollout",))
    assert "over the first 32 test images;" in both and "A and B: attention rollout beats" in both
    neither = ff.note([("A", "a", None), ("B", "b", None)], ("occlusion",))
    assert neither == "_How faithful the maps are is not measured yet for A: a; B: b._"


def test_shipped_for_finds_one_model_by_its_weights():
    from explorer.analysis.corruptions import weights_digest
    if not ff.SHIPPED.is_file():
        pytest.skip("not computed yet: python tools/make_trust_results.py faithfulness")
    digest = weights_digest(ROOT / "checkpoints" / "cifar10-spt_lsa")
    measured, dataset, count = ff.shipped_for(digest)
    assert measured.name == "cifar10-spt_lsa" and count == 32 and "32" in dataset
    assert ff.shipped_for(weights_digest(ROOT / "checkpoints" / "cifar10-lsa")) is None
    assert ff.shipped_for("") is None


@pytest.mark.slow
def test_the_shipped_randomisation_check_is_what_a_recompute_gives():
    """The randomisation check of the shipped pair, recomputed here on the shipped report's images, is the
    shipped table's (the Trust tab shows either, and they must agree)."""
    from explorer.analysis.corruptions import weights_digest
    from explorer.checkpoints.store import load_checkpoint
    from explorer.data.datasets import sample_set
    from explorer.model.config import ViTConfig
    images = sample_set().x_test
    for name in ("cifar10-spt_lsa", "paper/cifar10-spt_lsa"):
        folder = ROOT / "checkpoints" / name
        measured, _, _ = ff.shipped_for(weights_digest(folder))
        model, card = load_checkpoint(folder)
        config = ViTConfig.from_dict(card.config)
        names, rc = ff.randomisation(model, config, images[:ff.RANDOMISATION_IMAGES])
        assert names == measured.stages
        for kind, values in rc.items():
            np.testing.assert_allclose(values, measured.rank_correlation[kind], atol=1e-3, err_msg=(name, kind))
