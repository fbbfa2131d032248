import numpy as np
import pytest

from explorer.model.models import build_vit, tau_values
from explorer.model.probe import (
    Probe,
    attention_entropy,
    mean_attention_distance,
    query_attention,
    received_attention,
    rollout,
    rollout_map,
)
from tests.helpers import VARIANT_MODES, tiny_config


@pytest.fixture(scope="module")
def probes():
    out = {}
    for variant, tau_mode in VARIANT_MODES:
        config = tiny_config(variant=variant, tau_mode=tau_mode)
        out[(variant, tau_mode)] = Probe(build_vit(config, 10), config)
    return out


def test_probe_returns_logits_attention_and_patches_in_one_call(probes, images):
    for probe in probes.values():
        result = probe(images[:3])
        config = probe.config
        n = config.num_patches
        assert result.logits.shape == (3, 10)
        assert result.attention.shape == (3, config.num_layers, config.num_heads, n, n)
        channels = 15 if config.use_spt else 3
        assert result.patches.shape == (3, n, config.patch_size ** 2 * channels)
        np.testing.assert_allclose(result.attention.sum(-1), 1.0, atol=1e-5)


def test_probe_logits_equal_model_predict(probes, images):
    for probe in probes.values():
        np.testing.assert_allclose(probe(images).logits, probe.model.predict(images.astype("float32"),
                                                                             verbose=0), atol=1e-5)


def test_lsa_diagonal_is_zero_and_vanilla_diagonal_is_not(probes, images):
    for (variant, _), probe in probes.items():
        diagonal = np.diagonal(probe(images).attention, axis1=-2, axis2=-1)
        if probe.config.use_lsa:
            assert np.all(diagonal == 0.0), variant
        else:
            assert np.all(diagonal > 0.0), variant


def test_probe_works_after_a_head_change(images):
    from explorer.model.models import replace_head
    config = tiny_config(variant="spt_lsa")
    model = replace_head(build_vit(config, 10), 3)
    result = Probe(model, config)(images[:2])
    assert result.logits.shape == (2, 3)


def test_probe_rejects_wrong_image_size(probes):
    probe = next(iter(probes.values()))
    with pytest.raises(ValueError, match=r"\(batch, 32, 32, 3\)"):
        probe(np.zeros((1, 64, 64, 3), "uint8"))


def test_tau_shown_equals_the_layer_weight(probes):
    probe = probes[("spt_lsa", "head")]
    layer = probe.model.get_layer("block1_attention")
    layer.tau.assign([1.5, 2.5])
    assert probe.tau()[1] == [1.5, 2.5]
    assert probe.tau() == tau_values(probe.model)


def test_rollout_rows_sum_to_one(probes, images):
    attention = probes[("spt_lsa", "layer")](images[:1]).attention[0]
    joint, cumulative = rollout(attention)
    np.testing.assert_allclose(joint.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(cumulative.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(cumulative[0], joint[0], atol=1e-7)
    np.testing.assert_allclose(cumulative[1], joint[1] @ joint[0], atol=1e-6)
    assert rollout_map(cumulative[-1], 4).shape == (4, 4)
    np.testing.assert_allclose(rollout_map(cumulative[-1], 4).sum(), 1.0, atol=1e-6)


def test_rollout_of_identity_attention_is_identity():
    attention = np.broadcast_to(np.eye(9), (2, 3, 9, 9))
    _, cumulative = rollout(attention)
    np.testing.assert_allclose(cumulative[-1], np.eye(9))


def test_mean_attention_distance_identity_is_zero():
    attention = np.broadcast_to(np.eye(9), (2, 3, 9, 9))
    np.testing.assert_array_equal(mean_attention_distance(attention, 3, 4.0), np.zeros((2, 3)))


def test_mean_attention_distance_uniform_on_a_2x2_grid_by_hand():
    # 2x2 grid, 8-pixel patches: from any patch the four keys lie at 0, 8, 8 and 8*sqrt(2) pixels.
    attention = np.full((1, 1, 4, 4), 0.25)
    expected = (0 + 8 + 8 + 8 * np.sqrt(2)) / 4
    np.testing.assert_allclose(mean_attention_distance(attention, 2, 8.0), [[expected]])


def test_mean_attention_distance_uniform_on_a_3x3_grid_by_hand():
    # Mean over all ordered pairs of the 3x3 lattice of centre distances, in patches:
    # per query sums: corners 0+1+2+1+2+sqrt2+sqrt5+sqrt5+sqrt8, edges 3+2sqrt2+2sqrt5... computed here:
    pts = [(r, c) for r in range(3) for c in range(3)]
    total = sum(np.hypot(a[0] - b[0], a[1] - b[1]) for a in pts for b in pts)
    attention = np.full((2, 1, 1, 9, 9), 1 / 9)  # with a batch dim
    np.testing.assert_allclose(mean_attention_distance(attention, 3, 1.0), [[total / 81]])


def test_entropy_bounds():
    n = 16
    uniform = np.full((1, 2, n, n), 1 / n)
    np.testing.assert_allclose(attention_entropy(uniform), np.log(n))
    np.testing.assert_allclose(attention_entropy(np.broadcast_to(np.eye(n), (1, 2, n, n))), 0.0, atol=1e-9)


def test_query_and_received_attention_shapes(probes, images):
    attention = probes[("vanilla", "layer")](images[:1]).attention[0]
    q = query_attention(attention, layer=1, query=5, grid=4)
    assert q.shape == (2, 4, 4)
    np.testing.assert_allclose(q.reshape(2, -1), attention[1, :, 5, :])
    received = received_attention(attention, 4)
    assert received.shape == (2, 2, 4, 4)
    np.testing.assert_allclose(received.reshape(2, 2, -1).sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("variant", ["vanilla", "spt_lsa"])
def test_probe_on_the_keras_io_preset(variant, images):
    from explorer.model.config import get_preset
    config = get_preset("keras-io", variant=variant, tau_mode="head")
    result = Probe(build_vit(config, 100), config)(images[:1])
    assert result.logits.shape == (1, 100)
    assert result.attention.shape == (1, 8, 4, 144, 144)
    assert result.patches.shape == (1, 144, 6 * 6 * (15 if variant == "spt_lsa" else 3))
    assert config.pixels_per_patch == pytest.approx(6 * 32 / 72)


# --- the what-if probe: LSA's two mechanisms switched at inference, the model untouched -----------------

@pytest.fixture(scope="module")
def what_ifs(probes):
    from explorer.model.probe import WhatIfProbe
    return {key: WhatIfProbe(probe) for key, probe in probes.items()}


def test_what_if_with_the_models_own_setting_is_the_probe(probes, what_ifs, images):
    for key, probe in probes.items():
        expected = probe(images[:3])
        got = what_ifs[key](images[:3], 1.0, probe.diagonal_mask)
        np.testing.assert_allclose(got.logits, expected.logits, atol=1e-6, err_msg=str(key))
        np.testing.assert_allclose(got.attention, expected.attention, atol=1e-6, err_msg=str(key))
        np.testing.assert_array_equal(got.patches, expected.patches)


@pytest.mark.parametrize("key", [("lsa", "layer"), ("spt_lsa", "head")])
def test_what_if_equals_a_copy_of_the_model_with_tau_scaled_and_no_mask(probes, what_ifs, images, key):
    from explorer.model.models import attention_layers
    probe = probes[key]
    copy = build_vit(probe.config, 10)
    copy.set_weights(probe.model.get_weights())
    for layer in attention_layers(copy):
        layer.tau.assign(layer.tau.numpy() * 0.5)
        layer.diagonal_mask = False  # read when the copy's probe is traced
    expected = Probe(copy, probe.config)(images[:2])
    got = what_ifs[key](images[:2], 0.5, False)
    np.testing.assert_allclose(got.attention, expected.attention, atol=1e-5)
    np.testing.assert_allclose(got.logits, expected.logits, atol=1e-5)


def test_a_small_tau_factor_sharpens_and_a_large_one_flattens(probes, what_ifs, images):
    for key in [("lsa", "layer"), ("spt_lsa", "head"), ("vanilla", "layer")]:
        probe, what_if = probes[key], what_ifs[key]
        own = probe.diagonal_mask
        entropy = {f: attention_entropy(what_if(images[:4], f, own).attention).mean() for f in (0.25, 1.0, 4.0)}
        assert entropy[0.25] < entropy[1.0] < entropy[4.0], (key, entropy)


def test_the_diagonal_mask_switches_both_ways(probes, what_ifs, images):
    lsa, vanilla = ("spt_lsa", "layer"), ("vanilla", "layer")
    assert probes[lsa].diagonal_mask and not probes[vanilla].diagonal_mask
    unmasked = np.diagonal(what_ifs[lsa](images[:2], 1.0, False).attention, axis1=-2, axis2=-1)
    assert np.all(unmasked > 0.0)
    masked = np.diagonal(what_ifs[vanilla](images[:2], 1.0, True).attention, axis1=-2, axis2=-1)
    assert np.all(masked == 0.0)


def test_what_ifs_leave_the_model_bit_identical(probes, what_ifs, images):
    probe, what_if = probes[("spt_lsa", "head")], what_ifs[("spt_lsa", "head")]
    weights = [w.copy() for w in probe.model.get_weights()]
    nodes = [len(layer._inbound_nodes) for layer in probe.model.layers]
    before = probe(images)
    for factor, mask in [(0.25, False), (4.0, True), (0.5, True), (2.0, False)] * 3:
        what_if(images[:2], factor, mask)
    after = probe(images)
    for w0, w1 in zip(weights, probe.model.get_weights(), strict=True):
        np.testing.assert_array_equal(w0, w1)
    np.testing.assert_array_equal(before.logits, after.logits)
    np.testing.assert_array_equal(before.attention, after.attention)
    assert [len(layer._inbound_nodes) for layer in probe.model.layers] == nodes  # no node added


@pytest.mark.parametrize("factor", [0.2, 4.5, float("nan")])
def test_what_if_refuses_a_factor_out_of_range(what_ifs, images, factor):
    with pytest.raises(ValueError, match="tau factor must be between 0.25 and 4.0"):
        what_ifs[("lsa", "layer")](images[:1], factor, True)
