"""The keras.io example's own models -> our checkpoints: `python -m explorer.convert SOURCE [--out FOLDER]`.

SOURCE is a local folder or file, or a Hub id `owner/name[@revision]`, holding a model of the keras.io
example "Train a Vision Transformer on small datasets" (vit_small_ds), vanilla or SPT/LSA, at any of its
hyper-parameters:

- the 2022 (Keras 2) example saved as a TensorFlow SavedModel (saved_model.pb, keras_metadata.pb,
  variables/), as `push_to_hub_keras` published keras-io/vit_small_ds_v2. Its layers are read from the
  SavedModel's Keras metadata and its weights with TensorFlow's checkpoint reader: no tf-keras is needed;
- a `.keras` archive saved by the current (Keras 3) example, whose classes ShiftedPatchTokenization,
  PatchEncoder and MultiHeadAttentionLSA are registered nowhere: config.json and model.weights.h5 are read
  from the zip.

The model is rebuilt with explorer.model.models.build_vit and written with explorer.checkpoints.store.write_checkpoint;
the card's `source` says where it came from and what was mapped. Everything is checked before anything
is written: a model this cannot map exactly is refused with a ConvertError that names the layer or shape.

    python -m explorer.convert keras-io/vit_small_ds_v2 --out checkpoints
    python -m explorer.convert path/to/saved_model_folder --name my-vit
    python -m explorer.convert vit_small_ds.keras

The app's model slots take such a Hub id as they take a checkpoint's: `hub_checkpoint` converts it on first
use into the repo's snapshot in the Hugging Face cache, which keeps it from then on.
"""

from __future__ import annotations

import argparse
import sys

from explorer.checkpoints import hub
from explorer.convert.files import APP_SELECTION, HUB_SELECTION, KERAS3_FILES, SAVEDMODEL_FILES, locate, read_source
from explorer.convert.keras2 import read_savedmodel
from explorer.convert.keras3 import read_keras_archive
from explorer.convert.labels import CIFAR10_CLASSES, CIFAR100_CLASSES, LABEL_FILES, class_names_for
from explorer.convert.mapping import KERAS_EPSILON, Mapping, map_example
from explorer.convert.source import INACTIVE, KERAS2, KERAS3, KIND, ConvertError, SourceLayer, SourceModel
from explorer.convert.write import CONVERTED, build_model, convert, hub_checkpoint
from explorer.core.settings import Settings, SettingsError

__all__ = [
    "APP_SELECTION", "CIFAR10_CLASSES", "CIFAR100_CLASSES", "CONVERTED", "HUB_SELECTION", "INACTIVE", "KERAS2",
    "KERAS3", "KERAS3_FILES", "KERAS_EPSILON", "KIND", "LABEL_FILES", "SAVEDMODEL_FILES", "ConvertError", "Mapping",
    "SourceLayer", "SourceModel", "build_model", "class_names_for", "convert", "hub_checkpoint", "locate", "main",
    "map_example", "read_keras_archive", "read_savedmodel", "read_source",
]


def main(argv=None) -> int:
    """`python -m explorer.convert SOURCE [--out FOLDER] [--name NAME]`."""
    p = argparse.ArgumentParser(prog="python -m explorer.convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="a SavedModel folder, a .keras file, or a Hub id owner/name[@revision]")
    p.add_argument("--out", default="checkpoints", help="folder the new checkpoint goes in (default: checkpoints)")
    p.add_argument("--name", help="the checkpoint's name (default: from the source); never overwrites")
    p.add_argument("--max-mb", type=float, default=None,
                   help="refuse a Hub repo whose model files exceed this many MB (default: $EXPLORER_MAX_HUB_MB, "
                        "as the app; see explorer.settings)")
    args = p.parse_args(argv)
    try:
        limit = args.max_mb if args.max_mb is not None else Settings.from_env().max_hub_mb
    except SettingsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        folder = convert(args.source, args.out, args.name, max_hub_bytes=int(limit * hub.MB))
    except ConvertError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(folder)
    return 0
