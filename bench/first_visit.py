"""Which pair greets a first visit: the shipped 0.2 M pair or the paper-scale 2.7 M pair, measured in one run.

For each pair, on this host, one after the other (nothing else should run):

1. in this process, the app's full analysis of one image for both models (logits, every attention map, the
   per-request pictures) against a plain `model.predict` of both: the analysis/predict ratio, median over
   images (bench/probe_latency.py's (b) / (a));
2. `python app.py` started fresh with the pair as the first visit's (EXPLORER_MODEL_A / _B): seconds until the
   page answers, and until the first answer (`/compare` on the first example) comes back;
3. one gradio_client, one image after another: Compare and a query click (`/attention_query`, what the patch
   picker sends, at the last layer of each model) and every other tab's question once per image (Patches,
   locality, what-if, evidence, Tau): p95 of each, and the click's p95 over Compare's.

    python bench/first_visit.py [--n 30]

The paper-scale pair greets a first visit when, measured here, its analysis/predict ratio is within the
shipped pair's goal (<= 1.0, bench/probe_latency.py), its click p95 is at most 1.5 x its Compare p95, and its
first answer after a fresh start comes within 1.5 x the shipped pair's; else the shipped pair does, with the
paper-scale pair one click away (docs/app.md, "The first visit"). The last line says which.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from _common import ROOT, data_dir, image_files, launch_app, percentile

PAIRS = {"shipped": ("cifar10-vanilla", "cifar10-spt_lsa"),
         "paper scale": ("paper/cifar10-vanilla", "paper/cifar10-spt_lsa")}
RATIO_GOAL, CLICK_GOAL, START_GOAL = 1.0, 1.5, 1.5


def analysis_ratio(pair, images) -> float:
    """Median full analysis of one image (both models) over median model.predict of it (both models)."""
    from explorer.app.attention import analyze_pair, side_by_side_pictures
    from explorer.app.models import ModelStore
    from explorer.app.results import ResultCache
    store = ModelStore(ROOT / "checkpoints")
    models = [store.get(ref) for ref in pair]

    def naive(x):
        for loaded in models:
            loaded.model.predict(x[None].astype("float32"), verbose=0)

    def full(x):
        views = analyze_pair(models, ResultCache(), x, x, layer=models[0].config.num_layers - 1, head="all heads",
                             query_yx=(13.0, 20.0))
        side_by_side_pictures(views)

    for x in images[:3]:  # compiling and the libraries' caches
        naive(x)
        full(x)
    timed = {naive: [], full: []}
    for x in images[3:]:
        for fn, times in timed.items():
            start = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - start)
    return statistics.median(timed[full]) / statistics.median(timed[naive])


def _depth(ref: str) -> int:
    from explorer.checkpoints.store import read_card
    from explorer.model.config import ViTConfig
    return ViTConfig.from_dict(read_card(ROOT / "checkpoints" / ref).config).num_layers


def served(pair, files) -> dict:
    """A fresh app with `pair` as the first visit's: start-up, the first answer, then each question's p95."""
    from gradio_client import Client, handle_file
    os.environ["EXPLORER_MODEL_A"], os.environ["EXPLORER_MODEL_B"] = pair
    start = time.perf_counter()
    proc, url, answered = launch_app(timeout=600)
    try:
        client = Client(url, verbose=False, ssl_verify=False)
        client.predict(handle_file(files[0]), *pair, api_name="/compare")
        first = time.perf_counter() - start
        a, b = pair
        layer = _depth(a) - 1  # A's last layer (B's: the same relative depth, its last)
        ask = {
            "compare": lambda f, i: client.predict(f, a, b, api_name="/compare"),
            "click": lambda f, i: client.predict(f, a, b, layer, "all heads", float(4 * (i % 8) + 1),
                                                 float(4 * ((3 * i) % 8) + 2), api_name="/attention_query"),
            "patches": lambda f, i: client.predict(f, a, b, api_name="/patches"),
            "locality": lambda f, i: client.predict(f, a, b, "this image", api_name="/locality"),
            "what_if": lambda f, i: client.predict(f, a, b, layer, 16.0, 16.0, 0.5, "off", 1.0, "as learned",
                                                   api_name="/what_if"),
            "evidence": lambda f, i: client.predict(f, a, b, "each model's top-1", "the image's mean colour", 1,
                                                    api_name="/evidence"),
            "tau": lambda f, i: client.predict(a, b, api_name="/tau"),
        }
        for fn in ask.values():  # each question once before timing: its first call builds what it needs
            fn(handle_file(files[0]), 0)
        times = {kind: [] for kind in ask}
        for i, path in enumerate(files[1:]):
            for kind, fn in ask.items():
                t = time.perf_counter()
                fn(handle_file(path), i)
                times[kind].append(time.perf_counter() - t)
    finally:
        proc.terminate()
    return {"page": answered, "first": first, "p95": {k: percentile(v, 95) for k, v in times.items()}}


def throughput() -> str:
    """This host's training images/s (bench/train_throughput.py's own line), to read the times against."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "train_throughput.py"), "--rounds", "1"],
                         capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in out.stdout.splitlines() if "images/s" in line]
    return lines[-1] if lines else f"(train_throughput.py gave no images/s: {out.stderr.strip()[-200:]})"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=30, help="images per pair (each question asked once per image)")
    p.add_argument("--no-throughput", action="store_true", help="skip the host's training images/s")
    args = p.parse_args()
    from explorer.data.datasets import load_cifar
    images = load_cifar("cifar10", data_dir()).x_test[:args.n + 4]
    files = image_files(args.n + 1)

    results = {}
    for name, pair in PAIRS.items():
        ratio = analysis_ratio(pair, images)
        results[name] = {"ratio": ratio, **served(pair, files[:args.n + 1])}
        r = results[name]
        print(f"{name} ({' | '.join(pair)}): analysis/predict {ratio:.2f}; page after {r['page']:.1f} s, first "
              f"answer after {r['first']:.1f} s; p95 " + ", ".join(f"{k} {v:.0f} ms" for k, v in r["p95"].items()),
              flush=True)
    if not args.no_throughput:
        print(f"host: {throughput()}")
    shipped, paper = results["shipped"], results["paper scale"]
    checks = {
        f"analysis/predict <= {RATIO_GOAL}": (paper["ratio"], RATIO_GOAL, paper["ratio"] <= RATIO_GOAL),
        f"click p95 <= {CLICK_GOAL} x Compare p95": (paper["p95"]["click"] / paper["p95"]["compare"], CLICK_GOAL,
                                                     paper["p95"]["click"] <= CLICK_GOAL * paper["p95"]["compare"]),
        f"first answer <= {START_GOAL} x the shipped pair's": (paper["first"] / shipped["first"], START_GOAL,
                                                              paper["first"] <= START_GOAL * shipped["first"]),
    }
    print("| pair | analysis / predict | click p95 / Compare p95 | slowest question p95 | first answer after a "
          "fresh start |")
    print("|---|---:|---:|---|---:|")
    for name, r in results.items():
        slowest = max(r["p95"], key=r["p95"].get)
        print(f"| {name} | {r['ratio']:.2f} | {r['p95']['click'] / r['p95']['compare']:.2f} | {slowest} "
              f"{r['p95'][slowest]:.0f} ms | {r['first']:.1f} s |")
    for what, (value, _, ok) in checks.items():
        print(f"paper scale: {what}: {value:.2f} ({'met' if ok else 'missed'})")
    met = all(ok for _, _, ok in checks.values())
    print("first visit: " + ("the paper-scale pair (every goal met)" if met else
                             "the shipped pair, the paper-scale pair one click away (a goal missed)"))


if __name__ == "__main__":
    main()
