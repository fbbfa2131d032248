"""Model configuration: one frozen dataclass and the named presets."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

VARIANTS = ("vanilla", "spt", "lsa", "spt_lsa")
TAU_MODES = ("layer", "head")
HEADS = ("flatten", "pool")

# Per-channel statistics of CIFAR training images (0-255 scale); the model normalises with these, so a
# saved model takes raw pixel values. Close enough for CIFAR-100 and any other natural images.
CIFAR_MEAN = (125.3, 123.0, 113.9)
CIFAR_STD = (63.0, 62.1, 66.7)


@dataclass(frozen=True)
class ViTConfig:
    """Architecture of a ViT for small datasets; the number of classes comes from the dataset.

    Args:
        image_size: side of the raw square RGB input the model takes (pixels 0-255).
        input_size: side the model resizes to before tokenising (keras.io: 72).
        patch_size: side of a square patch, in pixels of the resized image.
        num_layers: transformer blocks.
        projection_dim: token width.
        num_heads: attention heads.
        key_dim: per-head query/key width (keras.io uses projection_dim).
        mlp_units: hidden widths of the block MLP; the last must equal projection_dim.
        head: "flatten" (keras.io: flatten all tokens) or "pool" (global average over tokens).
        head_units: hidden widths of the classifier MLP.
        dropout: dropout in attention and block MLPs.
        head_dropout: dropout in the classifier.
        drop_path: stochastic depth, the rate at which the last block's residual branches (attention and
            MLP) are dropped per image in training; the rate grows linearly from 0 at the first block, as
            in timm and DeiT. 0 adds no layer at all.
        layer_norm_eps: LayerNormalization epsilon.
        variant: "vanilla", "spt", "lsa" or "spt_lsa".
        tau_mode: LSA temperature shared by a layer's heads ("layer", keras.io) or one per head
            ("head", the paper's code).
        mean, std: per-channel normalisation on the 0-255 scale, applied inside the model.
    """

    image_size: int = 32
    input_size: int = 32
    patch_size: int = 4
    num_layers: int = 6
    projection_dim: int = 64
    num_heads: int = 4
    key_dim: int = 64
    mlp_units: tuple[int, ...] = (128, 64)
    head: str = "pool"
    head_units: tuple[int, ...] = ()
    dropout: float = 0.1
    head_dropout: float = 0.0
    drop_path: float = 0.0
    layer_norm_eps: float = 1e-6
    variant: str = "spt_lsa"
    tau_mode: str = "layer"
    mean: tuple[float, ...] = CIFAR_MEAN
    std: tuple[float, ...] = CIFAR_STD

    def __post_init__(self):
        # Tuples keep the dataclass hashable and JSON round trips exact.
        for name in ("mlp_units", "head_units", "mean", "std"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("image_size", "input_size", "patch_size", "num_layers", "projection_dim",
                     "num_heads", "key_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.tau_mode not in TAU_MODES:
            raise ValueError(f"tau_mode must be one of {TAU_MODES}, got {self.tau_mode!r}")
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {self.head!r}")
        if self.input_size % self.patch_size:
            raise ValueError(
                f"input_size {self.input_size} is not a multiple of patch_size {self.patch_size}")
        if self.patch_size < 2:
            raise ValueError(f"patch_size must be at least 2 (SPT shifts by half a patch), "
                             f"got {self.patch_size}")
        if not self.mlp_units or self.mlp_units[-1] != self.projection_dim:
            raise ValueError(f"mlp_units must end with projection_dim {self.projection_dim} "
                             f"(residual connection), got {self.mlp_units!r}")
        if any(u < 1 for u in self.mlp_units + self.head_units):
            raise ValueError(f"hidden widths must be positive, got {self.mlp_units + self.head_units!r}")
        for name in ("dropout", "head_dropout", "drop_path"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError(f"mean and std need 3 channels with std > 0, got {self.mean!r}, {self.std!r}")

    @property
    def grid_size(self) -> int:
        return self.input_size // self.patch_size

    @property
    def num_patches(self) -> int:
        return self.grid_size ** 2

    @property
    def use_spt(self) -> bool:
        return self.variant in ("spt", "spt_lsa")

    @property
    def use_lsa(self) -> bool:
        return self.variant in ("lsa", "spt_lsa")

    @property
    def initial_tau(self) -> float:
        return math.sqrt(self.key_dim)

    @property
    def pixels_per_patch(self) -> float:
        """Side of one patch measured in pixels of the raw input image."""
        return self.patch_size * self.image_size / self.input_size

    def replace(self, **changes) -> ViTConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> ViTConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ViTConfig fields {unknown}; known fields: {sorted(known)}")
        return cls(**data)


PRESETS: dict[str, ViTConfig] = {
    # Exactly the keras.io vit_small_ds model (the 100-class head gives 21,759,012 / 21,787,748 params).
    "keras-io": ViTConfig(image_size=32, input_size=72, patch_size=6, num_layers=8, projection_dim=64,
                          num_heads=4, key_dim=64, mlp_units=(128, 64), head="flatten",
                          head_units=(2048, 1024), dropout=0.1, head_dropout=0.5),
    # Trains one CIFAR-10 epoch in about two minutes on two CPU cores.
    "cifar-small": ViTConfig(image_size=32, input_size=32, patch_size=4, num_layers=6, projection_dim=64,
                             num_heads=4, key_dim=16, mlp_units=(128, 64), head="pool", head_units=(),
                             dropout=0.0, head_dropout=0.0),
    # Unit tests and smoke runs: seconds per epoch.
    "tiny": ViTConfig(image_size=32, input_size=16, patch_size=4, num_layers=2, projection_dim=32,
                      num_heads=2, key_dim=16, mlp_units=(64, 32), head="pool", head_units=(),
                      dropout=0.0, head_dropout=0.0),
    # The paper's ViT for CIFAR (the authors' code, models/create_model.py): patch 4 on 32 px, width 192,
    # depth 9, 12 heads of 16, MLP ratio 2, stochastic depth 0.1; SPT/LSA with one temperature per head.
    # For 10 classes: 2,697,226 parameters (vanilla), 2,734,678 (spt_lsa, tau per head). Theirs has a class
    # token and bias-free query/key/value projections where ours pools the tokens and has biases (+4,800).
    "paper": ViTConfig(image_size=32, input_size=32, patch_size=4, num_layers=9, projection_dim=192,
                       num_heads=12, key_dim=16, mlp_units=(384, 192), head="pool", head_units=(),
                       dropout=0.0, head_dropout=0.0, drop_path=0.1, variant="spt_lsa", tau_mode="head"),
}


def get_preset(name: str, **overrides) -> ViTConfig:
    """The named preset, with any fields overridden (for example variant="vanilla")."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name].replace(**overrides)
