"""Launches `python app.py` on 127.0.0.1 and sends N Compare and N Attention requests through
gradio_client, one client after another, each on a different test image; prints p50/p95 per endpoint.

    python bench/e2e_latency.py [--n 100] [--checkpoints DIR]
"""

from __future__ import annotations

import argparse
import time

from _common import data_dir, launch_app, percentile


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--checkpoints", help="checkpoint folder the app serves (default: checkpoints/)")
    p.add_argument("--a", default="cifar10-vanilla")
    p.add_argument("--b", default="cifar10-spt_lsa")
    p.add_argument("--layers", type=int, default=6, help="layers of the smaller model (the layer cycles)")
    args = p.parse_args()

    import tempfile
    from pathlib import Path
    from gradio_client import Client, handle_file
    from PIL import Image
    from explorer.data import load_cifar

    images = load_cifar("cifar10", data_dir()).x_test[:args.n]
    folder = Path(tempfile.mkdtemp())
    files = []
    for i, x in enumerate(images):
        files.append(folder / f"img{i}.png")
        Image.fromarray(x).save(files[-1])
    proc, url, _ = launch_app(args.checkpoints)
    try:
        client = Client(url, verbose=False)
        client.predict(handle_file(str(files[0])), args.a, args.b, api_name="/compare")  # warm-up
        times = {"compare": [], "attention": []}
        for i, f in enumerate(files):
            start = time.perf_counter()
            client.predict(handle_file(str(f)), args.a, args.b, api_name="/compare")
            times["compare"].append(time.perf_counter() - start)
            start = time.perf_counter()
            client.predict(handle_file(str(f)), args.a, args.b, i % args.layers, "all heads", float(i % 32), 16.0,
                           api_name="/attention")
            times["attention"].append(time.perf_counter() - start)
    finally:
        proc.terminate()
    for name, values in times.items():
        print(f"/{name:<10} n={len(values)}  p50 {percentile(values, 50):6.1f} ms  p95 {percentile(values, 95):6.1f} ms"
              f"  (goal p95 <= 400 ms)")


if __name__ == "__main__":
    main()
