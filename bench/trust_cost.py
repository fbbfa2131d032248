"""What the Trust tab's measures cost on this host, for the shipped pair (cifar10-vanilla, cifar10-spt_lsa):
the whole-set report on 1,000 and 10,000 test images (10,000 needs a CIFAR data folder: --data-dir), the
corruption table (generation and forward passes, reported apart) on a few corruptions, scaled to 15 x 5, and
the faithfulness report on its fixed images.

    python bench/trust_cost.py [--data-dir ../shared/data] [--corruption-images 200]

Prints seconds per measure and images per second. Run it on an otherwise idle machine: the numbers are only
meaningful beside each other from one run (bench/README.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir")
    p.add_argument("--corruption-images", type=int, default=200)
    args = p.parse_args(argv)
    from explorer.analysis import corruptions, faithfulness, trust
    from explorer.checkpoints.store import load_checkpoint
    from explorer.data.datasets import DatasetError, load_test_set
    pair = [load_checkpoint(ROOT / "checkpoints" / n) for n in ("cifar10-vanilla", "cifar10-spt_lsa")]
    models = [m for m, _ in pair]
    for count in (1000, 10000):
        try:
            ds = load_test_set("cifar10", args.data_dir, count, download=False)
        except DatasetError as e:
            print(f"report on {count:,} images: skipped ({e})")
            continue
        if len(ds.y_test) < count:
            print(f"report on {count:,} images: skipped (only {len(ds.y_test):,} here)")
            continue
        data = trust.test_set(ds, count)
        began = time.perf_counter()
        report = trust.trust_pair(models, data)
        s = time.perf_counter() - began
        print(f"report on {count:,} images: {s:.1f} s ({2 * count / s:.0f} images/s over both models; "
              f"forward {sum(m.seconds for m in report.models):.1f} s)")
    ds = load_test_set("cifar10", args.data_dir, args.corruption_images, download=False)
    n = min(args.corruption_images, len(ds.y_test))
    few = ("gaussian_noise", "glass_blur", "frost", "jpeg_compression")
    table = corruptions.corruption_table(models, ds.x_test[:n], ds.y_test[:n], corruptions=few)
    scale = (15 * 5) / (len(few) * 5)
    print(f"corruptions on {n} images, {len(few)} corruptions x 5: generate {table.seconds['corrupt']:.1f} s, "
          f"forward {table.seconds['model 0'] + table.seconds['model 1']:.1f} s; the full 15 x 5 on 1,000 images "
          f"is about {scale * 1000 / n * sum(table.seconds.values()) / 60:.0f} min (these four include the "
          f"slowest, glass blur: an upper estimate)")
    began = time.perf_counter()
    faithfulness.faithfulness_report(pair, ds.x_test)
    print(f"faithfulness ({faithfulness.IMAGES} images, randomisation on {faithfulness.RANDOMISATION_IMAGES}): "
          f"{time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
