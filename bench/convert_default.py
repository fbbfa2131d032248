"""The keras.io example's 2022 model at its default hyper-parameters (72 px, patch 6, 8 blocks of width 64,
4 heads, MLP head 2048-1024, 100 classes: 21.8 M parameters), built with tf-keras in its own process and
saved as a SavedModel, then `python -m explorer.convert` on it; the checkpoint opened with plain
`keras.saving.load_model` and compared with the Keras 2 model on the same images.

    python bench/convert_default.py [--variant spt_lsa|vanilla] [--keep FOLDER]

Needs tf-keras (requirements-test.txt). Prints the parameter counts, the largest difference of the top-5
probabilities, whether the top-5 classes and the temperatures are equal, and how long each step took.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", choices=("spt_lsa", "vanilla"), default="spt_lsa")
    p.add_argument("--keep", help="build and convert in this folder (kept) instead of a temporary one")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        spec = {"name": "default", "vanilla": args.variant == "vanilla"}
        env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND",)}
        env.update(TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
        start = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "tests" / "fixtures" / "make_keras2_example.py"), str(work),
                        json.dumps([spec])], env=env, check=True)
        built = time.perf_counter() - start
        info = json.loads((work / "default.json").read_text())

        start = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "explorer.convert", str(work / "default"), "--out",
                              str(work / "out")], cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "KERAS_BACKEND": "tensorflow", "CUDA_VISIBLE_DEVICES": ""})
        converted = time.perf_counter() - start
        if run.returncode:
            sys.exit(run.stderr)
        folder = Path(run.stdout.strip().splitlines()[-1])

        os.environ.setdefault("KERAS_BACKEND", "tensorflow")
        import keras
        import numpy as np

        import explorer  # noqa: F401  (registers our layers, as a user of the checkpoint does)
        from explorer.model.models import tau_values
        start = time.perf_counter()
        model = keras.saving.load_model(folder)
        loaded = time.perf_counter() - start
        images = np.load(work / "images.npy")
        got = keras.ops.convert_to_numpy(keras.ops.softmax(model(images, training=False), axis=-1))
        expected = np.load(work / "default.probs.npy")
        top5 = np.argsort(-expected, axis=1)[:, :5]
        same_top5 = bool((np.argsort(-got, axis=1)[:, :5] == top5).all())
        diff5 = float(np.abs(np.take_along_axis(got, top5, 1) - np.take_along_axis(expected, top5, 1)).max())
        taus = np.float32([t[0] for t in tau_values(model)])
        card = json.loads((folder / "explorer.json").read_text())
        print(f"variant {args.variant}: Keras 2 model {info['parameters']:,} parameters (with the Normalization's "
              f"7 statistics), converted {model.count_params():,}")
        print(f"{len(images)} images: top-5 classes equal: {same_top5}; largest top-5 probability difference "
              f"{diff5:.2e} (all 100: {float(np.abs(got - expected).max()):.2e})")
        print(f"temperatures equal: {bool(np.array_equal(taus, np.float32(info['taus'])))} "
              f"({', '.join(f'{t:.4f}' for t in taus) or 'none: vanilla'})")
        print(f"card: preset {card['preset']}, dataset {card['dataset']['name']}, class names assumed "
              f"{card['source']['class_names_assumed']}")
        print(f"build + save with tf-keras {built:.1f} s; python -m explorer.convert {converted:.1f} s; "
              f"keras.saving.load_model {loaded:.1f} s")


if __name__ == "__main__":
    main()
