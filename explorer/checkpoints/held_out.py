"""A fine-tuned checkpoint's own held-out images: the test split of the data it was fine-tuned on, kept beside
its weights, so that the app's whole-set tools (Trust, Compare's disagreements, Evidence's shift curves, the
test samples) judge models of classes of their own on images they were never trained on, with their labels.

    <name>/held_out.npz    x (N, H, W, 3) uint8, y (N,) int64 indices into `class_names`, class_names,
                           source (the data's name: the zip it came from), version

A reader meets a missing, older or broken file with None (the tools then say in place that nothing fits),
never with an error: the weights load whatever this file holds.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from explorer.core import atomic
from explorer.data.datasets import Dataset

HELD_OUT = "held_out.npz"
VERSION = 1


def write_held_out(folder: str | os.PathLike, x: np.ndarray, y: np.ndarray, class_names: list[str],
                   source: str) -> Path | None:
    """Writes the held-out images `x` (uint8) with labels `y` (indices into `class_names`) into a checkpoint
    `folder`; nothing when there are none (a run trained on all of its images). Returns the file or None."""
    x, y = np.asarray(x, np.uint8), np.asarray(y, np.int64)
    if len(x) == 0:
        return None
    if len(x) != len(y) or x.ndim != 4 or x.shape[-1] != 3:
        raise ValueError(f"held-out images {x.shape} and labels {y.shape} do not line up")
    target = Path(folder) / HELD_OUT
    with atomic.replacing(target, durable=False) as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, x=x, y=y, class_names=np.asarray(class_names, dtype=str),
                            source=np.asarray(str(source)), version=np.asarray(VERSION))
    return target


def read_held_out(folder: str | os.PathLike, class_names: list[str]) -> Dataset | None:
    """The held-out images of the checkpoint in `folder`, labelled in the model's `class_names` (as its test
    split, with no training split), or None when it has none that fit: no file, a broken or newer one, or
    classes that are not the model's."""
    path = Path(folder) / HELD_OUT
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            if int(data["version"]) > VERSION:
                return None
            x, y = np.asarray(data["x"], np.uint8), np.asarray(data["y"], np.int64)
            names, source = [str(c) for c in data["class_names"]], str(data["source"])
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # a broken file: as if there were none
        return None
    if sorted(names) != sorted(class_names) or len(x) != len(y) or len(x) == 0 or y.min() < 0 or y.max() >= len(names):
        return None
    order = np.asarray([class_names.index(c) for c in names], np.int64)  # the file's order -> the model's
    empty = np.zeros((0, *x.shape[1:]), np.uint8)
    return Dataset(f"held-out {source}", empty, np.zeros(0, np.int64), x, order[y], list(class_names),
                   source=str(path))
