import pytest

from explorer.model.config import PRESETS, ViTConfig, get_preset


def test_presets_are_valid_and_round_trip():
    for name, config in PRESETS.items():
        assert ViTConfig.from_dict(config.to_dict()) == config, name


def test_keras_io_preset_geometry():
    c = get_preset("keras-io")
    assert (c.input_size, c.patch_size, c.num_patches, c.num_layers) == (72, 6, 144, 8)
    assert (c.projection_dim, c.num_heads, c.key_dim, c.mlp_units, c.head_units) == (64, 4, 64, (128, 64),
                                                                                       (2048, 1024))


@pytest.mark.parametrize("changes, message", [
    (dict(variant="nope"), "variant"), (dict(patch_size=5), "multiple"), (dict(tau_mode="x"), "tau_mode"),
    (dict(mlp_units=(128, 32)), "projection_dim"), (dict(num_layers=0), "num_layers"),
    (dict(dropout=1.5), "dropout"), (dict(head="cls"), "head"), (dict(drop_path=1.0), r"drop_path .*got 1\.0"),
    (dict(drop_path=-0.1), "drop_path"), (dict(drop_path="0.1"), "drop_path")])
def test_invalid_configs_raise_with_the_value(changes, message):
    with pytest.raises(ValueError, match=message):
        get_preset("cifar-small", **changes)


def test_unknown_preset_and_unknown_field():
    with pytest.raises(ValueError, match="unknown preset 'big'"):
        get_preset("big")
    with pytest.raises(ValueError, match="unknown ViTConfig fields"):
        ViTConfig.from_dict({**PRESETS["tiny"].to_dict(), "depth": 3})


def test_paper_preset_is_the_authors_vit():
    c = get_preset("paper")
    assert (c.image_size, c.input_size, c.patch_size, c.num_patches) == (32, 32, 4, 64)
    assert (c.projection_dim, c.num_layers, c.num_heads, c.key_dim, c.mlp_units) == (192, 9, 12, 16, (384, 192))
    assert (c.head, c.dropout, c.drop_path, c.variant, c.tau_mode) == ("pool", 0.0, 0.1, "spt_lsa", "head")
    assert all(p.drop_path == 0.0 for name, p in PRESETS.items() if name != "paper")
