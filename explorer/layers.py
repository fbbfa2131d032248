"""The path every checkpoint's config.json names for the SPT and LSA layers (explorer.model.layers): kept
so that a checkpoint written before the package had subpackages, or by anyone's copy of this code, loads."""

from explorer.model.layers import (  # noqa: F401
    SHIFT_DIRECTIONS,
    SHIFTS,
    DropPath,
    ImagePreprocessing,
    LocalitySelfAttention,
    PatchEncoder,
    ShiftedPatchTokenization,
    attention_what_if,
    extract_patches,
    inverse_temperature,
    shift_images,
)
