"""Measures LSA's switches over CIFAR-10's full test set (10,000 images) for the shipped SPT + LSA models and
writes explorer/shipped/lsa_switches.json, which the Attention tab's LSA switches section shows:

    python tools/make_lsa_switches.py [--data-dir DIR] [--limit N] [CHECKPOINT ...]

Each model's top-1 as trained, with the diagonal mask off, with every head's tau at sqrt(d_k), and both, on
the same weights (explorer.analysis.lsa_switches); each row is keyed by the weights' SHA-256.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("paper/cifar10-spt_lsa", "cifar10-spt_lsa")


def main(argv=None) -> None:
    from explorer.analysis import lsa_switches as ls
    from explorer.analysis.corruptions import weights_digest
    from explorer.checkpoints.store import load_checkpoint
    from explorer.data.datasets import find_cifar, read_cifar_test

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=list(MODELS), help="checkpoints under checkpoints/")
    parser.add_argument("--data-dir", default=None, help="where cifar-10-batches-py is (else the usual places)")
    parser.add_argument("--limit", type=int, default=None, help="the first N test images only (a trial)")
    parser.add_argument("--out", default=str(ls.SHIPPED))
    args = parser.parse_args(argv)
    folder = find_cifar("cifar10", args.data_dir)
    if folder is None:
        raise SystemExit("CIFAR-10 is not here: pass --data-dir (the folder holding cifar-10-batches-py)")
    x, y, _ = read_cifar_test(folder, "cifar10")
    x, y = x[:args.limit], y[:args.limit]
    dataset = f"cifar10 test set ({len(y):,} images)" if args.limit is None else f"cifar10 test images 0-{len(y) - 1}"
    rows = {r.weights: r for r in ls.read(args.out)}
    for ref in args.models:
        began = time.perf_counter()
        model, card = load_checkpoint(ROOT / "checkpoints" / ref)
        top1 = ls.measure(model, x, y, progress=lambda f, m, ref=ref: print(f"{ref} {f:5.0%} {m}", flush=True))
        row = ls.SwitchRow(ref, weights_digest(ROOT / "checkpoints" / ref), dataset, len(y), top1,
                           ls.tau_ratio(model))
        rows[row.weights] = row
        print(f"{ref}: {top1} (card: {card.metrics.test_top1}) in {time.perf_counter() - began:.0f} s", flush=True)
    ls.write(list(rows.values()), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
