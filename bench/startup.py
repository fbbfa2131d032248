"""Time from `python app.py` to the first successful request, resident memory after the app has
loaded its default model pair, and how long each checkpoint of the pair takes to load in this process
(after `import keras`, which the app pays once).

    python bench/startup.py [--checkpoints DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _common import ROOT, launch_app, rss_mib


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoints")
    p.add_argument("--a", default="cifar10-vanilla")
    p.add_argument("--b", default="cifar10-spt_lsa")
    args = p.parse_args()
    from gradio_client import Client
    start = time.perf_counter()
    proc, url, answered = launch_app(args.checkpoints)
    try:
        Client(url, verbose=False).predict(args.a, args.b, api_name="/tau")
        first = time.perf_counter() - start
        print(f"page answered after {answered:.1f} s; first successful request (/tau) after {first:.1f} s "
              f"(goal <= 15 s)")
        print(f"resident memory with the default pair loaded: {rss_mib(proc.pid):.0f} MiB")
    finally:
        proc.terminate()
    load_times(args.checkpoints, (args.a, args.b))


def load_times(checkpoints: str | None, names) -> None:
    start = time.perf_counter()
    import keras  # noqa: F401  (its import is start-up cost, not a checkpoint's)

    from explorer.checkpoints.store import load_checkpoint
    print(f"import keras + explorer: {time.perf_counter() - start:.1f} s")
    folder = Path(checkpoints) if checkpoints else ROOT / "checkpoints"
    for name in names:
        start = time.perf_counter()
        load_checkpoint(folder / name)
        print(f"load {name}: {time.perf_counter() - start:.2f} s (goal < 2 s)")


if __name__ == "__main__":
    main()
