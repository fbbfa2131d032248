"""Regenerates the sample set the app ships: the first N CIFAR-10 test images, labels and class names.

    python tools/make_sample_set.py ../shared/data/cifar-10-batches-py
    python tools/make_sample_set.py ~/.keras/datasets/cifar-10-batches-py-target/cifar-10-batches-py

The first N (not a random pick): with the sample alone, "the first N test images" (Find disagreements,
Locality, the cards' 200-image check set) are the same images they are with the full test set. Written
as one compressed .npz of uint8 arrays (no pickles), to explorer/samples/ unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from explorer.data.datasets import SAMPLE_FILE, provenance_note, read_cifar_test  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="a cifar-10-batches-py folder (test_batch and batches.meta)")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--out", default=str(SAMPLE_FILE))
    args = p.parse_args(argv)
    folder = Path(args.folder)
    x, y, class_names = read_cifar_test(folder, "cifar10")
    if not 1 <= args.count <= len(x):
        p.error(f"--count must be between 1 and {len(x)}")
    n = args.count
    missing = sorted(set(range(len(class_names))) - set(y[:n].tolist()))
    if missing:
        p.error(f"the first {n} test images lack classes {missing}; take more")
    note = provenance_note(folder) or "pixels as in the original CIFAR-10 test_batch"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.npz")
    np.savez_compressed(tmp, images=x[:n], labels=y[:n].astype(np.uint8), class_names=np.asarray(class_names),
                        test_index=np.arange(n, dtype=np.uint16), note=np.asarray(note))
    os.replace(tmp, out)
    counts = np.bincount(y[:n], minlength=len(class_names))
    print(f"wrote {out}: {n} images, {out.stat().st_size / 2**20:.2f} MiB; per class "
          + ", ".join(f"{c} {k}" for c, k in zip(class_names, counts, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
