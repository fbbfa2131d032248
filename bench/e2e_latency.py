"""Launches `python app.py` on 127.0.0.1 and measures what a user waits for, through gradio_client:

1. one client, one image after another: Compare, the full Attention view (a new image), a query click
   (`/attention_query`: what the patch picker sends) and a layer/head change (`/attention_layer`);
2. 20 concurrent clients x 10 mixed requests (Compare, Attention, click, layer change, what-if, Patches),
   each result checked against the same request computed alone beforehand.

    python bench/e2e_latency.py [--n 50] [--clients 20] [--requests 10]

Ends with one line: click p95, compare p95, their ratio, the worst endpoint's p95 under load, and the
number of errors (failed requests plus results that differ from the one computed alone).

The clients are made with `ssl_verify=False`: the URL is plain http on 127.0.0.1, so no TLS is used
either way, but gradio_client's default builds a fresh TLS context from the CA bundle for every file it
downloads (~20-40 ms per picture here; a browser pays nothing of the kind). One extra line reports the
click with that default client, for reference.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor

from _common import image_files, launch_app, percentile

A, B = "cifar10-vanilla", "cifar10-spt_lsa"
HEADS = ("all heads", "mean of heads", "head 0", "head 1", "head 2", "head 3")


def request(client, kind, image, i, layers):
    """One request of `kind` on `image`; `i` varies the query, layer and head like a user would."""
    from gradio_client import handle_file
    f = handle_file(image)
    query = (float(4 * (i % 8) + 1), float(4 * ((3 * i) % 8) + 2))
    if kind == "compare":
        return client.predict(f, A, B, api_name="/compare")
    if kind == "attention":
        return client.predict(f, A, B, layers - 1, "all heads", 16.0, 16.0, api_name="/attention")
    if kind == "click":
        return client.predict(f, A, B, layers - 1, "all heads", *query, api_name="/attention_query")
    if kind == "layer":
        return client.predict(f, A, B, i % layers, HEADS[i % len(HEADS)], 16.0, 16.0, api_name="/attention_layer")
    if kind == "what_if":
        return client.predict(f, A, B, layers - 1, *query, (0.25, 0.5, 2.0)[i % 3], "off", 0.5, "as learned",
                              api_name="/what_if")
    if kind == "patches":
        return client.predict(f, A, B, api_name="/patches")
    raise ValueError(kind)


def canonical(kind, result):
    """A comparable form of a result: pictures by their bytes, labels rounded, timings dropped."""
    def digest(path):
        return hashlib.sha256(open(path, "rb").read()).hexdigest()

    def one(item):
        if isinstance(item, dict) and "confidences" in item:
            return tuple((c["label"], round(c["confidence"], 6)) for c in item["confidences"])
        if isinstance(item, dict):  # a plot: drawn from the numbers the text already carries
            return item.get("type")
        if isinstance(item, list):  # a gallery
            return tuple((digest(g["image"]), g["caption"]) for g in item)
        if isinstance(item, str) and item.startswith("/") and "\n" not in item:
            return digest(item)
        return re.sub(r"(Time:|what-if pass) [^\n]*", "", item)

    return tuple(one(item) for item in result)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=50, help="images for the one-client part")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--requests", type=int, default=10, help="requests per concurrent client")
    p.add_argument("--checkpoints", help="checkpoint folder the app serves (default: checkpoints/)")
    p.add_argument("--layers", type=int, default=6, help="layers of the smaller model")
    args = p.parse_args()

    from gradio_client import Client

    files = image_files(args.n + 12, "img{i}.png")
    solo_files, load_files = files[:args.n], files[args.n:]
    proc, url, _ = launch_app(args.checkpoints)
    errors = 0
    try:
        client = Client(url, verbose=False, ssl_verify=False)
        for kind in ("compare", "attention", "click", "layer", "what_if"):  # warm-up
            request(client, kind, files[0], 0, args.layers)
        times = {kind: [] for kind in ("compare", "attention", "click", "layer")}
        for i, f in enumerate(solo_files):
            for kind in times:  # a new image: its Compare and Attention views, then a click and a layer
                start = time.perf_counter()
                try:
                    request(client, kind, f, i, args.layers)
                except Exception as e:
                    errors += 1
                    print(f"error: {kind} alone: {e}")
                times[kind].append(time.perf_counter() - start)

        default_client, default_click = Client(url, verbose=False), []
        for i, f in enumerate(solo_files[:20]):
            start = time.perf_counter()
            request(default_client, "click", f, i + 1, args.layers)
            default_click.append(time.perf_counter() - start)

        kinds = ("compare", "attention", "click", "layer", "what_if", "patches")
        rng = random.Random(17)
        plan = [[(rng.choice(kinds), rng.choice(load_files), rng.randrange(64)) for _ in range(args.requests)]
                for _ in range(args.clients)]
        expected = {}
        for requests in plan:
            for key in requests:
                if key not in expected:
                    expected[key] = canonical(key[0], request(client, key[0], key[1], key[2], args.layers))

        def session(requests):
            c = Client(url, verbose=False, ssl_verify=False)
            out = []
            for key in requests:
                start = time.perf_counter()
                try:
                    got = canonical(key[0], request(c, key[0], key[1], key[2], args.layers))
                except Exception as e:
                    got = e
                out.append((key, got, time.perf_counter() - start))
            return out

        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            sessions = list(pool.map(session, plan))
    finally:
        proc.terminate()

    for kind, values in times.items():
        print(f"one client  /{kind:<10} n={len(values):<4} p50 {percentile(values, 50):6.1f} ms  "
              f"p95 {percentile(values, 95):6.1f} ms")
    print(f"one client  /click with gradio_client's default TLS context per download: n={len(default_click)} "
          f"p50 {percentile(default_click, 50):6.1f} ms  p95 {percentile(default_click, 95):6.1f} ms")
    under_load = {}
    failed = differ = 0
    for key, got, seconds in (r for s in sessions for r in s):
        under_load.setdefault(key[0], []).append(seconds)
        if isinstance(got, Exception):
            failed += 1
            print(f"error: {key[0]} under load: {got}")
        elif got != expected[key]:
            differ += 1
            print(f"error: {key[0]} under load differs from the result computed alone")
    for kind, values in sorted(under_load.items()):
        print(f"{args.clients} clients /{kind:<10} n={len(values):<4} p50 {percentile(values, 50) / 1000:5.2f} s  "
              f"p95 {percentile(values, 95) / 1000:5.2f} s")
    errors += failed + differ
    print(f"under load: {failed} failed, {differ} differ from the result computed alone "
          f"(goals: one client click p95 <= 200 ms and <= 1.5 x compare p95; under load every p95 <= 2 s, "
          f"0 errors)")
    click, compare = percentile(times["click"], 95), percentile(times["compare"], 95)
    worst = max(percentile(v, 95) for v in under_load.values()) / 1000
    print(f"click p95 {click:.0f} ms, compare p95 {compare:.0f} ms, ratio {click / compare:.2f}, "
          f"load p95 max {worst:.2f} s, errors {errors}")


if __name__ == "__main__":
    main()
