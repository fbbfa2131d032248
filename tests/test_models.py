import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from explorer.config import get_preset
from explorer.models import attention_layers, build_vit, replace_head, tau_values
from tests.conftest import ROOT, VARIANT_MODES, tiny_config


@pytest.mark.parametrize("variant, expected", [("vanilla", 21_759_012), ("spt_lsa", 21_787_748)])
def test_keras_io_parameter_counts(variant, expected):
    model = build_vit(get_preset("keras-io", variant=variant), 100)
    assert model.count_params() == expected


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
import explorer.layers  # registers the custom layers; nothing else is needed
x = np.load(sys.argv[1])
for path, out in zip(sys.argv[2::2], sys.argv[3::2]):
    model = keras.saving.load_model(path, safe_mode=True)
    np.save(out, np.asarray(model.predict_on_batch(x)))
"""


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
