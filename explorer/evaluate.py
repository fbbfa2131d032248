"""Evaluates checkpoints side by side and stores the metrics in each checkpoint's card.

    python -m explorer.evaluate checkpoints/cifar10-vanilla checkpoints/cifar10-spt_lsa
"""

from __future__ import annotations

import argparse
import sys

from explorer.checkpoints import CheckpointError, load_checkpoint, update_card
from explorer.data import DatasetError, load_dataset
from explorer.train import accuracy_metrics, predict_logits

CHECK_SET = 200


def evaluate(refs: list[str], dataset_name: str | None = None, data_dir: str | None = None,
             limit: int | None = None, store: bool = True) -> list[dict]:
    """Top-1, top-5 and per-class accuracy of each checkpoint on its dataset's test split."""
    results, datasets = [], {}
    for ref in refs:
        model, card = load_checkpoint(ref)
        name = dataset_name or card.get("dataset", {}).get("name", "cifar10")
        if name not in datasets:
            datasets[name] = load_dataset(name, data_dir)
        ds = datasets[name]
        if ds.num_classes != model.output_shape[-1]:
            raise CheckpointError(f"{ref} predicts {model.output_shape[-1]} classes but {name} has "
                                  f"{ds.num_classes}")
        x, y = (ds.x_test[:limit], ds.y_test[:limit]) if limit else (ds.x_test, ds.y_test)
        logits = predict_logits(model, x)
        metrics = accuracy_metrics(logits, y)
        results.append({"ref": str(ref), "card": card, "dataset": ds, "metrics": metrics})
        if store and card.get("dataset", {}).get("name") == name and not limit:
            # A fixed check set (the first CHECK_SET test images) lets anyone verify the card quickly.
            check = accuracy_metrics(logits[:CHECK_SET], y[:CHECK_SET])
            update_card(ref, metrics={"test_top1": metrics["top1"], "test_top5": metrics["top5"],
                                      "test_per_class": metrics["per_class"],
                                      "test_count": metrics["count"],
                                      "check_set": f"{name} test images 0-{CHECK_SET - 1}",
                                      "check_top1": check["top1"], "check_top5": check["top5"]})
    return results


def format_table(results: list[dict]) -> str:
    """Checkpoints as columns: top-1, top-5, then one row per class."""
    names = [r["card"].get("name", r["ref"]) for r in results]
    width = max([12] + [len(n) for n in names])
    classes = results[0]["dataset"].class_names
    rows = [f"{'':<14}" + "".join(f"{n:>{width + 2}}" for n in names),
            f"{'dataset':<14}" + "".join(f"{r['dataset'].name:>{width + 2}}" for r in results),
            f"{'images':<14}" + "".join(f"{r['metrics']['count']:>{width + 2}}" for r in results)]
    for key in ("top1", "top5"):
        rows.append(f"{key:<14}" + "".join(f"{100 * r['metrics'][key]:>{width + 1}.2f}%" for r in results))
    if all(r["dataset"].class_names == classes for r in results):
        for c, cls in enumerate(classes):
            cells = []
            for r in results:
                v = r["metrics"]["per_class"][c]
                cells.append(f"{'-':>{width + 2}}" if v is None else f"{100 * v:>{width + 1}.1f}%")
            rows.append(f"{cls[:14]:<14}" + "".join(cells))
    return "\n".join(rows)


def markdown_table(results: list[dict]) -> str:
    """The README's results table: one row per checkpoint, from its card and these metrics."""
    rows = ["| model | variant | test top-1 | test top-5 | epochs | train time | images/s |",
            "|---|---|---|---|---|---|---|"]
    for r in results:
        card, m = r["card"], r["metrics"]
        training = card.get("training", {})
        rows.append(f"| `{card.get('name')}` | {card.get('variant')} | **{100 * m['top1']:.2f} %** | "
                    f"{100 * m['top5']:.2f} % | {training.get('epochs', '–')} | "
                    f"{training.get('wall_time_s', 0) / 60:.0f} min | {training.get('images_per_second', '–')} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m explorer.evaluate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="checkpoint folders or Hub ids")
    p.add_argument("--dataset", help="dataset to evaluate on (default: each checkpoint's own)")
    p.add_argument("--data-dir")
    p.add_argument("--limit", type=int, help="first N test images only (metrics are then not stored)")
    p.add_argument("--no-store", action="store_true", help="do not write the metrics into the cards")
    p.add_argument("--markdown", action="store_true", help="also print a Markdown results table")
    args = p.parse_args(argv)
    try:
        results = evaluate(args.checkpoints, args.dataset, args.data_dir, args.limit,
                           store=not args.no_store)
    except (CheckpointError, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_table(results))
    if args.markdown:
        print()
        print(markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
