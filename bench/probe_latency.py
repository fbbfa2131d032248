"""(a) a plain `model.predict(x)` per model vs (b) the app's full analysis of the same image for BOTH
models (logits, all attention maps, rollout, distances, entropy, every per-request picture).

    python bench/probe_latency.py [--a checkpoints/cifar10-vanilla] [--b checkpoints/cifar10-spt_lsa]

Prints the medians and the ratio b / a, measured in this one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import ROOT, data_dir


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", default=str(ROOT / "checkpoints" / "cifar10-vanilla"))
    p.add_argument("--b", default=str(ROOT / "checkpoints" / "cifar10-spt_lsa"))
    p.add_argument("--repeats", type=int, default=50)
    args = p.parse_args()

    from explorer import render
    from explorer.data import load_cifar
    from explorer.workbench import ModelStore, ResultCache, analyze_pair
    store = ModelStore(ROOT)
    models = [store.get(args.a), store.get(args.b)]
    images = load_cifar("cifar10", data_dir()).x_test[:args.repeats + 5]

    def naive(i):
        for lm in models:
            lm.model.predict(images[i][None].astype("float32"), verbose=0)

    def full(i):
        cache = ResultCache()  # a fresh cache: every model runs, nothing is reused between images
        views = analyze_pair(models, cache, images[i], images[i], layer=models[1].config.num_layers - 1,
                             head="all heads", query_yx=(13.0, 20.0))
        spt = models[1].config
        render.patch_grid(images[i], spt.patch_size)
        render.spt_grids(images[i], spt.patch_size)
        return views

    for i in range(3):  # warm up both paths (compilation, caches of the libraries)
        naive(i)
        full(i)
    a, b = [], []
    for i in range(5, 5 + args.repeats):
        start = time.perf_counter()
        naive(i)
        a.append(time.perf_counter() - start)
        start = time.perf_counter()
        full(i)
        b.append(time.perf_counter() - start)
    ma, mb = statistics.median(a) * 1000, statistics.median(b) * 1000
    print(f"models: {models[0].label} | {models[1].label}; {args.repeats} images")
    print(f"(a) model.predict, both models, one image: median {ma:.1f} ms ({ma / 2:.1f} ms per model)")
    print(f"(b) full analysis, both models, one image: median {mb:.1f} ms")
    print(f"ratio b / a = {mb / ma:.2f}  (goal <= 1.0; absolute goal b <= 60 ms)")


if __name__ == "__main__":
    main()
