"""Evidence and shift robustness of checkpoints over the CIFAR-10 test images, as markdown tables for
docs/results.md: test top-1; how concentrated each model's occlusion evidence is (single-patch occlusion, mean
fill, the probability of the true label by default: the share of the drop carried by the top 10 % of
patches and the drop's mean distance from its centre of mass); and top-1 accuracy and unchanged top-1
when the image moves by 1..4 px (averaged over left, right, up, down; zero padding) or is mirrored.

    python bench/evidence_summary.py [checkpoints/cifar10-vanilla checkpoints/cifar10-spt_lsa ...]
                                     [--limit 1000] [--occlusion-limit N] [--target label|top1]

Images go through the models in chunks, so memory stays bounded whatever --limit is.
"""

from __future__ import annotations

import argparse
import sys
import time

from _common import ROOT, data_dir

DEFAULT = [str(ROOT / "checkpoints" / "cifar10-vanilla"), str(ROOT / "checkpoints" / "cifar10-spt_lsa")]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def summarise(loaded, x, y, occlusion_count: int, target: str, max_shift: int, padding: str, batch_size: int) -> dict:
    from explorer.analysis import evidence, robustness
    started = time.perf_counter()
    results = []
    chunk = max(1, batch_size // (loaded.config.num_patches + 1)) * 16
    for start in range(0, occlusion_count, chunk):
        stop = min(start + chunk, occlusion_count)
        results += evidence.occlusion_batch(loaded, x[start:stop], target=target, labels=y[start:stop],
                                            window=1, fill="mean", max_batch=batch_size)
        log(f"  {loaded.name}: occlusion {stop}/{occlusion_count} ({time.perf_counter() - started:.0f} s)")
    occluded = time.perf_counter()
    logged = [0]

    def progress(done, total):
        if done - logged[0] >= 1000 or done == total:
            logged[0] = done
            log(f"  {loaded.name}: shifts {done}/{total} ({time.perf_counter() - occluded:.0f} s)")

    robustness = robustness.shift_robustness(loaded, x, y, max_shift=max_shift, padding=padding,
                                           batch_size=batch_size, progress=progress)
    return {"name": loaded.name, "variant": loaded.config.variant,
            "concentration": evidence.mean_concentration(results),
            "robustness": robustness, "occlusion_s": occluded - started,
            "shift_s": time.perf_counter() - occluded}


def pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def tables(rows: list[dict], images: int, occlusion_count: int, target: str, padding: str) -> str:
    c0 = next((r["concentration"] for r in rows if r["concentration"]["share"] is not None), None)
    lines = [f"Evidence: single-patch occlusion (mean fill) of the {'true label' if target == 'label' else 'top-1'}"
             f"'s probability, first {occlusion_count:,} CIFAR-10 test images"
             + (f" (evidence spread evenly: top 10 % carry {pct(c0['uniform_share'])}, spread "
                f"{c0['uniform_spread']:.1f} px)" if c0 else ""),
             "",
             "| model | variant | test top-1 | top 10 % of patches carry | spread from centre | images with evidence |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        c, rb = r["concentration"], r["robustness"]
        spread = "–" if c["spread"] is None else f"{c['spread']:.2f} px"
        lines.append(f"| {r['name']} | {r['variant']} | {pct(rb.accuracy[0])} | {pct(c['share'])} | {spread} | "
                     f"{c['with_evidence']:,} / {c['images']:,} |")
    shifts = rows[0]["robustness"].shifts[1:]
    head = " | ".join(f"{s} px" for s in shifts)
    lines += ["", f"Shift robustness over the first {images:,} CIFAR-10 test images: top-1 accuracy, then the share "
              f"of unchanged top-1, when the image moves by 1..{shifts[-1]} px (mean of left, right, up, down; "
              f"{padding} padding) or is mirrored",
              "",
              f"| model | top-1 at 0 | {head} | flip | unchanged: {head} | flip |",
              "|---|" + "---:|" * (2 * len(shifts) + 3)]
    for r in rows:
        rb = r["robustness"]
        acc = " | ".join(pct(v) for v in rb.accuracy[1:])
        unchanged = " | ".join(pct(v) for v in rb.unchanged[1:])
        lines.append(f"| {r['name']} | {pct(rb.accuracy[0])} | {acc} | {pct(rb.flip_accuracy)} | {unchanged} | "
                     f"{pct(rb.flip_unchanged)} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("refs", nargs="*", default=DEFAULT, help="checkpoint folders or Hub ids (default: the shipped two)")
    p.add_argument("--limit", type=int, default=None, help="only the first N test images (default: all 10,000)")
    p.add_argument("--occlusion-limit", type=int, default=None,
                   help="occlusion over only the first N of those (default: all of them)")
    p.add_argument("--target", choices=("label", "top1"), default="label",
                   help="whose probability the occlusion measures: the true label's or each model's top-1")
    p.add_argument("--max-shift", type=int, default=4)
    p.add_argument("--padding", choices=("zero", "edge"), default="zero")
    p.add_argument("--batch-size", type=int, default=1024, help="images per forward call")
    args = p.parse_args()

    from explorer.app.models import ModelStore
    from explorer.data.datasets import load_cifar
    ds = load_cifar("cifar10", data_dir(), download=False)
    x, y = ds.x_test[:args.limit], ds.y_test[:args.limit]
    occlusion_count = min(len(x), args.occlusion_limit or len(x))
    store = ModelStore(ROOT)
    rows = []
    for ref in args.refs:
        loaded = store.get(ref)
        log(f"{loaded.label}: {len(x):,} images")
        rows.append(summarise(loaded, x, y, occlusion_count, args.target, args.max_shift, args.padding,
                              args.batch_size))
        r = rows[-1]
        log(f"  {loaded.name}: occlusion {r['occlusion_s']:.0f} s, shifts {r['shift_s']:.0f} s")
    print(tables(rows, len(x), occlusion_count, args.target, args.padding))
    print()
    print("seconds: " + "; ".join(f"{r['name']} occlusion {r['occlusion_s']:.0f} s, shifts {r['shift_s']:.0f} s"
                                  for r in rows))


if __name__ == "__main__":
    main()
