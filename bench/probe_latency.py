"""(a) a plain `model.predict(x)` per model vs (b) the app's full analysis of the same image for BOTH
models (logits, all attention maps, rollout, distances, entropy, every per-request picture); and (c) the
probe of both models vs (d) their what-if probe (tau scaled, diagonal mask switched: one more forward
pass each, never a rebuild); and the evidence views against (a): (e) the occlusion map of both models
(every single-patch occluded copy of the image, mean fill, in one batched call per model) and (f) the
shift strip of both models (the image moved by -4..+4 px and mirrored, one call per model).

    python bench/probe_latency.py [--a checkpoints/cifar10-vanilla] [--b checkpoints/cifar10-spt_lsa]

Prints the medians and the ratios b / a, d / c, e / a, f / a and (e + f) / c, measured in this one run.
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

    from explorer.analysis import evidence, render, robustness
    from explorer.app.attention import analyze_pair, side_by_side_pictures
    from explorer.app.models import ModelStore
    from explorer.app.results import ResultCache
    from explorer.data.datasets import load_cifar
    store = ModelStore(ROOT)
    models = [store.get(args.a), store.get(args.b)]
    images = load_cifar("cifar10", data_dir()).x_test[:args.repeats + 5]

    def naive(i):
        for loaded in models:
            loaded.model.predict(images[i][None].astype("float32"), verbose=0)

    def probe(i):
        for loaded in models:
            loaded.probe(images[i][None])

    def what_if(i):
        for loaded in models:
            with loaded.lock:
                loaded.what_if_probe()(images[i][None], (0.25, 0.5, 2.0, 4.0)[i % 4], i % 2 == 0)

    def full(i):
        cache = ResultCache()  # a fresh cache: every model runs, nothing is reused between images
        views = analyze_pair(models, cache, images[i], images[i], layer=models[1].config.num_layers - 1,
                             head="all heads", query_yx=(13.0, 20.0))
        side_by_side_pictures(views)  # what the Attention tab sends: A beside B, one picture per kind
        spt = models[1].config
        render.patch_grid(images[i], spt.patch_size)
        render.spt_grids(images[i], spt.patch_size)
        return views

    def occlusion(i):
        pair = evidence.occlusion_pair(models, images[i], window=1, fill="mean")
        evidence.occlusion_picture(pair, images[i], ["A", "B"])  # what the tab would send
        return pair

    def strip(i):
        shifted = robustness.shift_strip(models, images[i], max_shift=4)
        robustness.strip_picture(shifted)
        return shifted

    start = time.perf_counter()
    what_if(0)  # builds and compiles each model's what-if probe, once
    built = time.perf_counter() - start
    for i in range(3):  # warm up every path (compilation, caches of the libraries)
        naive(i)
        full(i)
        probe(i)
        what_if(i)
        occlusion(i)
        strip(i)
    a, b, c, d, e, f = [], [], [], [], [], []
    for i in range(5, 5 + args.repeats):
        for fn, times in ((naive, a), (full, b), (probe, c), (what_if, d), (occlusion, e), (strip, f)):
            start = time.perf_counter()
            fn(i)
            times.append(time.perf_counter() - start)
    ma, mb, mc, md, me, mf = (statistics.median(t) * 1000 for t in (a, b, c, d, e, f))
    print(f"models: {models[0].label} | {models[1].label}; {args.repeats} images")
    print(f"(a) model.predict, both models, one image: median {ma:.1f} ms ({ma / 2:.1f} ms per model)")
    print(f"(b) full analysis, both models, one image: median {mb:.1f} ms")
    print(f"ratio b / a = {mb / ma:.2f}  (goal <= 1.0; absolute goal b <= 60 ms)")
    print(f"(c) probe, both models, one image: median {mc:.1f} ms")
    print(f"(d) what-if probe (tau x factor, diagonal mask switched), both models: median {md:.1f} ms "
          f"(built once in {built:.1f} s on first use)")
    print(f"ratio d / c = {md / mc:.2f}  (goal: about one more forward pass, ~1.0)")
    copies = models[1].config.grid_size ** 2 + 1
    print(f"(e) occlusion map, both models ({copies} copies each, one call per model, with its picture): "
          f"median {me:.1f} ms")
    print(f"ratio e / a = {me / ma:.2f}  (one batched call per model against one model.predict per model)")
    print(f"(f) shift strip, both models (-4..+4 px and the mirror, one call per model, with its picture): "
          f"median {mf:.1f} ms")
    print(f"ratio f / a = {mf / ma:.2f}")
    print(f"ratio (e + f) / c = {(me + mf) / mc:.2f}  (both evidence views in probe calls' time; goal: a few)")


if __name__ == "__main__":
    main()
