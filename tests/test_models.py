import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from explorer.checkpoints.store import load_folder, read_card
from explorer.model.config import ViTConfig, get_preset
from explorer.model.layers import DropPath
from explorer.model.models import attention_layers, build_vit, drop_path_rates, replace_head, tau_values
from tests.helpers import ROOT, VARIANT_MODES, tiny_config


@pytest.mark.parametrize("variant, expected", [("vanilla", 21_759_012), ("spt_lsa", 21_787_748)])
def test_keras_io_parameter_counts(variant, expected):
    model = build_vit(get_preset("keras-io", variant=variant), 100)
    assert model.count_params() == expected


@pytest.mark.parametrize("variant, tau_mode, expected", [("vanilla", "layer", 2_697_226),
                                                         ("spt_lsa", "head", 2_734_678)])
def test_paper_parameter_counts(variant, tau_mode, expected):
    """The counts issue 44 gives for the paper's ViT (width 192, depth 9, 12 heads of 16, MLP ratio 2)."""
    model = build_vit(get_preset("paper", variant=variant, tau_mode=tau_mode), 10)
    assert model.count_params() == expected


@pytest.mark.parametrize("name", ["cifar10-vanilla", "cifar10-spt_lsa"])
def test_without_drop_path_the_model_is_layer_for_layer_what_the_shipped_checkpoints_hold(name):
    """drop_path 0 adds nothing: the layers' saved configs and the weights' paths are those of checkpoints
    saved before stochastic depth existed, so every existing checkpoint loads unchanged."""
    folder = ROOT / "checkpoints" / name
    saved = json.loads((folder / "config.json").read_text())["config"]["layers"]
    card = read_card(folder)
    model = build_vit(ViTConfig.from_dict(card.config), len(card.class_names))
    assert ViTConfig.from_dict(card.config).drop_path == 0.0  # cards without the field read as 0
    assert json.loads(json.dumps(keras.saving.serialize_keras_object(model)))["config"]["layers"] == saved
    loaded, _ = load_folder(folder)
    assert [(w.path, w.shape) for w in model.weights] == [(w.path, w.shape) for w in loaded.weights]


def test_drop_path_rates_grow_linearly_to_the_last_block():
    np.testing.assert_allclose(drop_path_rates(get_preset("paper")), np.linspace(0.0, 0.1, 9))
    assert drop_path_rates(tiny_config(num_layers=1, drop_path=0.3)) == [0.0]
    model = build_vit(tiny_config(num_layers=3, drop_path=0.2), 10)
    found = {layer.name: layer.rate for layer in model.layers if isinstance(layer, DropPath)}
    # block 0's rate is 0: no layer; each later block drops its attention and its MLP branch
    assert found == pytest.approx({"block1_drop_path1": 0.1, "block1_drop_path2": 0.1,
                                   "block2_drop_path1": 0.2, "block2_drop_path2": 0.2})
    assert model.count_params() == build_vit(tiny_config(num_layers=3), 10).count_params()


def test_a_model_with_drop_path_trains_stochastically_saves_and_reloads(tmp_path, images):
    from explorer.checkpoints.store import Card, load_checkpoint, write_checkpoint
    config = tiny_config(num_layers=3, drop_path=0.5)
    model = build_vit(config, 10)
    x = images[:8].astype("float32")
    inference = np.asarray(model(x, training=False))
    np.testing.assert_allclose(np.asarray(model.predict_on_batch(x)), inference, rtol=1e-5, atol=1e-5)
    assert not np.allclose(np.asarray(model(x, training=True)), inference)  # branches dropped in training
    folder = write_checkpoint(model, tmp_path / "drop-path", Card(config=config.to_dict(), variant="spt_lsa",
                                                                  class_names=[str(i) for i in range(10)]))
    loaded, card = load_checkpoint(folder)
    assert ViTConfig.from_dict(card.config) == config
    assert [layer.name for layer in loaded.layers] == [layer.name for layer in model.layers]
    np.testing.assert_allclose(np.asarray(loaded.predict_on_batch(x)), inference, rtol=1e-5, atol=1e-5)


def test_num_classes_comes_from_the_caller():
    assert build_vit(tiny_config(), 7).output_shape == (None, 7)
    with pytest.raises(ValueError, match="num_classes"):
        build_vit(tiny_config(), 1)


def test_variants_use_the_right_layers():
    for variant, spt, lsa in [("vanilla", False, False), ("spt", True, False), ("lsa", False, True),
                              ("spt_lsa", True, True)]:
        model = build_vit(tiny_config(variant=variant), 10)
        assert model.get_layer("tokenizer").shifted is spt
        assert all(hasattr(layer, "tau") == lsa for layer in attention_layers(model))
        assert len(tau_values(model)) == (2 if lsa else 0)


_RELOAD = """
import sys, numpy as np, keras
import explorer.model.layers  # registers the custom layers; nothing else is needed
x = np.load(sys.argv[1])
for path, out in zip(sys.argv[2::2], sys.argv[3::2]):
    model = keras.saving.load_model(path, safe_mode=True)
    np.save(out, np.asarray(model.predict_on_batch(x)))
"""


@pytest.mark.slow  # about 10 s or more (pytest.ini)
def test_keras_and_folder_saves_reload_equal_in_a_fresh_process(tmp_path, images):
    """Every variant and tau mode, saved as .keras and as the unzipped folder, reloaded elsewhere."""
    x = images[:4].astype("float32")
    np.save(tmp_path / "x.npy", x)
    args, expected = [], {}
    for variant, tau_mode in VARIANT_MODES:
        model = build_vit(tiny_config(variant=variant, tau_mode=tau_mode), 10)
        if tau_values(model):  # make tau differ from its initial value, so a lost tau shows
            for layer in attention_layers(model):
                layer.tau.assign(layer.tau.numpy() * 0.5 + 0.1)
        expected[(variant, tau_mode)] = np.asarray(model.predict_on_batch(x))
        for kind in ("keras", "dir"):
            path = tmp_path / f"{variant}-{tau_mode}.{kind}"
            keras.saving.save_model(model, str(path), zipped=(kind == "keras"))
            args += [str(path), str(tmp_path / f"{variant}-{tau_mode}-{kind}.npy")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", _RELOAD, str(tmp_path / "x.npy"), *args], check=True, env=env,
                   cwd=tmp_path, timeout=300)
    for (variant, tau_mode), logits in expected.items():
        for kind in ("keras", "dir"):
            reloaded = np.load(tmp_path / f"{variant}-{tau_mode}-{kind}.npy")
            np.testing.assert_allclose(reloaded, logits, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{variant}/{tau_mode}/{kind}")


def test_replace_head_keeps_backbone_weights_and_freezes_on_request():
    model = build_vit(tiny_config(variant="spt_lsa"), 10)
    new = replace_head(model, 3, freeze=True)
    assert new.output_shape == (None, 3)
    assert new.get_layer("tokenizer") is model.get_layer("tokenizer")
    assert {w.path for w in new.trainable_weights} == {"head/kernel", "head/bias"}
