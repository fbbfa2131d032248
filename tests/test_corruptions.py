"""Tests of explorer.analysis.corruptions: the mended imagecorruptions package, the corruption error's arithmetic, and
the table shipped for the shipped pair."""

from __future__ import annotations

import importlib
import inspect
import json

import numpy as np
import pytest

from explorer.analysis import corruptions as cc
from explorer.analysis.trust import predict
from explorer.model.models import build_vit
from tests.helpers import ROOT, tiny_config

pytest.importorskip("imagecorruptions")


@pytest.fixture(scope="module")
def images():
    from explorer.data.datasets import sample_set
    return sample_set().x_test[:4]


def test_the_fifteen_are_the_librarys_common_corruptions():
    from imagecorruptions import get_corruption_names
    assert tuple(get_corruption_names("common")) == cc.CORRUPTIONS
    assert sum(len(v) for v in cc.FAMILIES.values()) == 15


def test_the_mends_are_still_needed():
    """Fails when imagecorruptions or scikit-image change what explorer.analysis.corruptions mends: then drop the
    mend."""
    import skimage.filters
    module = importlib.import_module("imagecorruptions.corruptions")
    cc._library()
    assert "multichannel=True" in inspect.getsource(module.glass_blur)
    assert "np.float_" in inspect.getsource(module.plasma_fractal)
    assert "sk.util.random_noise" in inspect.getsource(module.impulse_noise)
    with pytest.raises(TypeError):
        skimage.filters.gaussian(np.zeros((4, 4, 3)), sigma=1, multichannel=True)
    assert not hasattr(np, "float_")


@pytest.mark.parametrize("name", cc.CORRUPTIONS)
def test_every_corruption_runs_and_repeats(name, images):
    state = np.random.get_state()
    low, high = cc.corrupt(images, name, 1), cc.corrupt(images, name, 5)
    assert low.dtype == np.uint8 and low.shape == images.shape == high.shape
    assert np.array_equal(high, cc.corrupt(images, name, 5))  # the same corruption on every call
    assert not np.array_equal(low, images) and not np.array_equal(low, high)
    assert np.array_equal(np.random.get_state()[1], state[1])  # NumPy's global generator left as it was


def test_bad_names_and_severities_are_refused(images):
    with pytest.raises(ValueError, match="corruption must be one of"):
        cc.corrupt(images, "speckle_noise", 1)
    with pytest.raises(ValueError, match="severity"):
        cc.corrupt(images, "fog", 6)


def table(errors_a, errors_b, clean=(0.1, 0.1)):
    accuracy = 1 - np.stack([np.full((15, 5), errors_a), np.full((15, 5), errors_b)])
    return cc.CorruptionTable(["A", "B"], "synthetic", 10, 1 - np.asarray(clean), accuracy)


def test_corruption_error_follows_hendrycks_and_dietterich():
    t = table(0.6, 0.3)
    assert t.mce(0) == pytest.approx(1.0) and t.mce(1) == pytest.approx(0.5)
    assert t.ce(1).shape == (15,)
    # Relative: (0.3 - 0.1) / (0.6 - 0.1).
    assert t.relative_mce(1) == pytest.approx(0.4)
    assert t.mean_accuracy.tolist() == pytest.approx([0.4, 0.7])
    back = cc.CorruptionTable.from_json(json.loads(json.dumps(t.to_json())))
    assert np.array_equal(back.accuracy, t.accuracy) and back.models == ["A", "B"]
    assert len(t.rows()) == 15 and len(t.rows()[0]) == 1 + 2 * 6 + 2


def test_table_on_tiny_models(images):
    models = [build_vit(tiny_config(variant=v), 10) for v in ("vanilla", "spt_lsa")]
    labels = np.arange(len(images))
    steps = []
    t = cc.corruption_table(models, images, labels, "four", corruptions=("fog", "pixelate"), severities=(1, 5),
                            progress=lambda f, m: steps.append(m))
    assert t.accuracy.shape == (2, 2, 2) and len(steps) == 4
    direct = (predict(models[1], cc.corrupt(images, "pixelate", 5)).argmax(-1) == labels).mean()
    assert t.accuracy[1, 1, 1] == pytest.approx(direct)


@pytest.mark.parametrize("pair", [("cifar10-vanilla", "cifar10-spt_lsa"), ("paper/cifar10-vanilla",
                                                                           "paper/cifar10-spt_lsa")])
def test_shipped_table_is_the_shipped_pairs(pair):
    """Each shipped pair's table (corruptions.json, corruptions-paper.json) is found by its weights, A then B."""
    digests = [cc.weights_digest(ROOT / "checkpoints" / n) for n in pair]
    t = cc.shipped(digests)
    assert t is not None, f"no table in explorer/shipped/ for {pair}: tools/make_trust_results.py corruptions"
    assert t.models == list(pair) and t.accuracy.shape == (2, 15, 5) and t.count == 1000
    assert t.library == "imagecorruptions==1.1.2"
    assert cc.shipped(digests[::-1]) is None
    # More severe is worse, on average over the corruptions, for both models.
    assert (np.diff(t.accuracy.mean(1), axis=-1) < 0.02).all()
    assert (t.clean > t.mean_accuracy).all()
