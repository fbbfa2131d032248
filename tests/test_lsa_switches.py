"""LSA's switches over a test set: the as-trained row is the model's own accuracy, the switches change only what
they name and leave the model as it was, and the shipped table is keyed by the weights and read back whole."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from explorer.analysis import lsa_switches as ls


@pytest.fixture(scope="module")
def spt_lsa(tiny_checkpoints):
    from explorer.checkpoints.store import load_checkpoint
    return load_checkpoint(tiny_checkpoints["spt_lsa"])[0]


def test_the_switches_on_a_test_set(spt_lsa, cifar10):
    from explorer.model.predict import predict_logits
    x, y = cifar10.x_test[:64], cifar10.y_test[:64]
    before = [keras.ops.convert_to_numpy(layer.tau).copy() for layer in ls.lsa_layers(spt_lsa)]
    top1 = ls.measure(spt_lsa, x, y, batch=25)  # a batch that does not divide the images
    assert list(top1) == [name for name, *_ in ls.SETTINGS]
    assert top1["as trained"] == pytest.approx(float((predict_logits(spt_lsa, x).argmax(-1) == y).mean()))
    # the model is as it was: its temperatures are put back
    for layer, tau in zip(ls.lsa_layers(spt_lsa), before, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.tau), tau)
    ratio = ls.tau_ratio(spt_lsa)
    assert ratio == pytest.approx(np.mean([t / math.sqrt(layer._key_dim)
                                           for layer, t in zip(ls.lsa_layers(spt_lsa), before, strict=True)]))


def test_a_vanilla_model_has_no_switch_to_measure(tiny_checkpoints, cifar10):
    from explorer.checkpoints.store import load_checkpoint
    vanilla = load_checkpoint(tiny_checkpoints["vanilla"])[0]
    with pytest.raises(ValueError, match="has no LSA layer"):
        ls.measure(vanilla, cifar10.x_test[:4], cifar10.y_test[:4])


def test_the_shipped_rows_are_found_by_their_weights(tmp_path, tiny_checkpoints):
    from explorer.analysis.corruptions import weights_digest
    folder = tiny_checkpoints["spt_lsa"]
    row = ls.SwitchRow("tiny", weights_digest(folder), "cifar10 test images 0-63", 64,
                       {name: 0.5 for name, *_ in ls.SETTINGS}, 1.01)
    path = tmp_path / "lsa_switches.json"
    ls.write([row], path)
    assert ls.read(path) == [row] and ls.read(tmp_path / "absent.json") == []
    assert ls.shipped_row(folder, path=path) == row
    assert ls.shipped_row(tiny_checkpoints["vanilla"], path=path) is None


def test_the_shipped_file_has_both_shipped_spt_lsa_models():
    from explorer.analysis.corruptions import weights_digest
    from tests.helpers import ROOT
    rows = {r.name: r for r in ls.read()}
    for name in ("paper/cifar10-spt_lsa", "cifar10-spt_lsa"):
        assert rows[name].count == 10_000 and rows[name].weights == weights_digest(ROOT / "checkpoints" / name)
