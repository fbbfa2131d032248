"""How much faster a lean checkpoint (the model alone) loads than the same checkpoint saved with its optimizer.

The fat copy is rebuilt from git history: the newest commit whose model.weights.h5 of the checkpoint still
holds the optimizer's group gives that file and its config.json (with the compile config); the card and the
model card are the lean folder's. Both folders hold the same weights (checked below). Then the two are
loaded in turn, `--repeats` times each, after one unmeasured load of each (Keras' first-time costs): with
`load_folder` (what the app, fine-tuning and conversion use: compile=False) and with a plain
`keras.saving.load_model` (what the model card shows: it compiles a fat checkpoint and restores its
optimizer). Prints each median, the lean/fat ratio and the files' sizes.

    python bench/checkpoint_load.py [--checkpoint checkpoints/cifar10-spt_lsa] [--repeats 15]
"""

from __future__ import annotations

import argparse
import gc
import io
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import ROOT


def git_show(commit: str, path: str) -> bytes:
    return subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, check=True).stdout


def fat_version(rel: str) -> tuple[str, bytes, bytes]:
    """(commit, model.weights.h5, config.json) of `rel` at the newest commit where it held its optimizer."""
    import h5py

    from explorer.checkpoints.store import OPTIMIZER_GROUP
    commits = subprocess.run(["git", "rev-list", "HEAD", "--", f"{rel}/model.weights.h5"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    for commit in commits:
        weights = git_show(commit, f"{rel}/model.weights.h5")
        with h5py.File(io.BytesIO(weights), "r") as f:
            if OPTIMIZER_GROUP in f:
                return commit, weights, git_show(commit, f"{rel}/config.json")
    raise SystemExit(f"no commit holds {rel} with its optimizer state")


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default="checkpoints/cifar10-spt_lsa", help="relative to the repository")
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    import keras
    import numpy as np

    from explorer.checkpoints.store import load_folder, make_lean

    commit, weights, config = fat_version(args.checkpoint)
    with tempfile.TemporaryDirectory() as tmp:
        lean = shutil.copytree(ROOT / args.checkpoint, Path(tmp) / "lean")
        make_lean(lean)  # nothing to do once the folder is lean in the working tree
        fat = shutil.copytree(lean, Path(tmp) / "fat")
        (fat / "model.weights.h5").write_bytes(weights)
        (fat / "config.json").write_bytes(config)
        same = all(np.array_equal(a, b) for a, b in zip(load_folder(fat)[0].get_weights(),
                                                         load_folder(lean)[0].get_weights(), strict=True))
        print(f"{args.checkpoint}: fat copy from {commit[:10]}; same weights: {same}")
        for name, folder in (("fat", fat), ("lean", lean)):
            print(f"  {name:4s} model.weights.h5 {(folder / 'model.weights.h5').stat().st_size:>9,} bytes, "
                  f"folder {size(folder):>9,} bytes")
        print(f"  size ratio lean/fat: weights {(lean / 'model.weights.h5').stat().st_size / len(weights):.3f}, "
              f"folder {size(lean) / size(fat):.3f}")
        loaders = {"load_folder": lambda f: load_folder(f)[0],
                   "keras.saving.load_model": lambda f: keras.saving.load_model(str(f))}
        for label, load in loaders.items():
            times = {"fat": [], "lean": []}
            for i in range(args.repeats + 1):
                for name, folder in (("fat", fat), ("lean", lean)):
                    start = time.perf_counter()
                    model = load(folder)
                    elapsed = time.perf_counter() - start
                    if i:
                        times[name].append(elapsed)
                    del model
                    gc.collect()
            fat_s, lean_s = (statistics.median(times[k]) for k in ("fat", "lean"))
            print(f"{label}, median of {args.repeats}: fat {fat_s * 1000:.0f} ms, lean {lean_s * 1000:.0f} ms: "
                  f"ratio lean/fat {lean_s / fat_s:.2f}")


if __name__ == "__main__":
    main()
