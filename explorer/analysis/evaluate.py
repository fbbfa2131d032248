"""Evaluates checkpoints side by side and stores the metrics in each checkpoint's card.

    python -m explorer.evaluate checkpoints/cifar10-vanilla checkpoints/cifar10-spt_lsa
    python -m explorer.evaluate checkpoints/cifar10-vanilla checkpoints/cifar10-spt_lsa --locality 256

--flip also scores each image averaged with its mirror image (horizontal-flip test-time augmentation),
stored beside the plain single-view numbers, which stay the headline ones.
--ablation also prints the 2x2 ablation's section of docs/results.md (explorer/model/ablation.py) for one
checkpoint of each
variant: vanilla, lsa, spt, spt_lsa.
--locality N also prints, per layer, what SPT/LSA are meant to change: the mean attention distance (in
input pixels) and the attention entropy over the first N test images, and the learned tau.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from explorer.checkpoints.store import CheckpointError, load_checkpoint, read_card, update_card
from explorer.core.card import Card
from explorer.data.datasets import DATASETS, Dataset, DatasetError, load_test_set
from explorer.data.folders import load_dataset
from explorer.model.ablation import AblationError, ablation_markdown, by_variant
from explorer.model.config import ViTConfig
from explorer.model.predict import Accuracy, accuracy_metrics, predict_logits
from explorer.model.probe import Probe, attention_entropy, mean_attention_distance, softmax

CHECK_SET = 200


@dataclass(frozen=True)
class Locality:
    """Per layer, averaged over heads, queries and `images`: mean attention distance (input pixels), attention
    entropy (nats), and the layer's tau (mean over heads; None for plain attention)."""

    images: int
    distance: list[float]
    entropy: list[float]
    tau: list[float | None]


@dataclass
class Evaluation:
    """One checkpoint evaluated: its reference, card and test set, its accuracy, with each image averaged with
    its mirror (`flip`, when asked) and its attention's locality (when asked)."""

    ref: str
    card: Card
    dataset: Dataset
    metrics: Accuracy
    flip: Accuracy | None = None
    locality: Locality | None = None


def evaluate(refs: list[str], dataset_name: str | None = None, data_dir: str | None = None,
             limit: int | None = None, store: bool = True, locality_images: int = 0,
             flip: bool = False) -> list[dict]:
    """Top-1, top-5 and per-class accuracy of each checkpoint on its dataset's test split; with flip
    also with each image's probabilities averaged with its mirror image's; with locality_images > 0
    also its per-layer attention locality on the first that many test images."""
    results, datasets = [], {}
    for ref in refs:
        model, card = load_checkpoint(ref)
        name = dataset_name or card.dataset.name or "cifar10"
        if name not in datasets:
            # A few test images (the cards' 200-image check set, say) come from the bundled sample
            # when there is no data here; the whole test set from a folder, or downloaded once.
            need = max(limit or 10**9, locality_images)
            datasets[name] = (load_test_set(name, data_dir, need) if name in DATASETS
                              else load_dataset(name, data_dir))
        ds = datasets[name]
        if ds.num_classes != model.output_shape[-1]:
            raise CheckpointError(f"{ref} predicts {model.output_shape[-1]} classes but {name} has "
                                  f"{ds.num_classes}")
        x, y = (ds.x_test[:limit], ds.y_test[:limit]) if limit else (ds.x_test, ds.y_test)
        logits = predict_logits(model, x)
        metrics = accuracy_metrics(logits, y)
        result = Evaluation(str(ref), card, ds, metrics)
        results.append(result)
        stored = {}
        if flip:
            mirrored = predict_logits(model, x[:, :, ::-1])
            result.flip = accuracy_metrics(softmax(logits) + softmax(mirrored), y)
            stored = {"test_top1_flip": result.flip.top1, "test_top5_flip": result.flip.top5}
        if locality_images:
            result.locality = locality(model, card, ds.x_test[:locality_images])
        if store and card.dataset.name == name and not limit:
            # A fixed check set (the first CHECK_SET test images) lets anyone verify the card quickly.
            update_card(ref, metrics={"test_top1": metrics.top1, "test_top5": metrics.top5,
                                      "test_per_class": metrics.per_class, "test_count": metrics.count,
                                      **check_metrics(name, logits, y), **stored})
    return results


def check_metrics(name: str, logits: np.ndarray, y: np.ndarray) -> dict:
    """A card's check set: top-1 and top-5 on the first CHECK_SET test images (the bundled sample holds
    them), which anyone can re-measure in seconds on a machine with no data."""
    check = accuracy_metrics(logits[:CHECK_SET], y[:CHECK_SET])
    return {"check_set": f"{name} test images 0-{CHECK_SET - 1}", "check_top1": check.top1,
            "check_top5": check.top5}


def store_check_set(ref: str | Path, data_dir: str | None = None) -> Card:
    """Writes a checkpoint's check set into its card, its test metrics left as they are, and returns the
    card: for a checkpoint evaluated on its whole test set as it was written (a study's trial)."""
    model, card = load_checkpoint(ref)
    name = card.dataset.name or "cifar10"
    ds = load_test_set(name, data_dir, CHECK_SET)
    return update_card(ref, metrics=check_metrics(name, predict_logits(model, ds.x_test[:CHECK_SET]),
                                                  ds.y_test[:CHECK_SET]))


def locality(model, card: Card, images: np.ndarray, batch_size: int = 64) -> Locality:
    """The model's attention locality per layer over `images` (Locality)."""
    config = ViTConfig.from_dict(card.config)
    probe = Probe(model, config)
    distance = entropy = 0.0
    for start in range(0, len(images), batch_size):
        attention = probe(images[start:start + batch_size]).attention
        share = len(attention) / len(images)
        distance = distance + share * mean_attention_distance(attention, config.grid_size, config.pixels_per_patch)
        entropy = entropy + share * attention_entropy(attention)
    taus = probe.tau()
    return Locality(len(images), distance.mean(-1).tolist(), entropy.mean(-1).tolist(),
                    [float(np.mean(t)) for t in taus] if taus else [None] * len(distance))


def _locality_rows(results: list[Evaluation], width: int) -> list[str]:
    layers = max(len(r.locality.distance) for r in results)
    n = results[0].locality.images
    # Layers are numbered from 0, as in the app's Attention and Tau tabs.
    rows = [f"locality over the first {n} test images (per layer L0..., mean of heads)"]
    for key, label, fmt in (("distance", "distance px", ".1f"), ("entropy", "entropy", ".2f"), ("tau", "tau", ".2f")):
        for layer in range(layers):
            cells = []
            for r in results:
                values = getattr(r.locality, key)
                v = values[layer] if layer < len(values) else None
                cells.append(f"{'-':>{width + 2}}" if v is None else f"{v:>{width + 2}{fmt}}")
            rows.append(f"{f'{label} L{layer}':<14}" + "".join(cells))
    rows.append(f"{'distance mean':<14}" + "".join(
        f"{float(np.mean(r.locality.distance)):>{width + 2}.1f}" for r in results))
    return rows


def format_table(results: list[Evaluation]) -> str:
    """Checkpoints as columns: top-1, top-5, then one row per class."""
    names = [r.card.name or r.ref for r in results]
    width = max([12] + [len(n) for n in names])
    classes = results[0].dataset.class_names
    rows = [f"{'':<14}" + "".join(f"{n:>{width + 2}}" for n in names),
            f"{'dataset':<14}" + "".join(f"{r.dataset.name:>{width + 2}}" for r in results),
            f"{'images':<14}" + "".join(f"{r.metrics.count:>{width + 2}}" for r in results)]
    for key in ("top1", "top5"):
        rows.append(f"{key:<14}" + "".join(f"{100 * getattr(r.metrics, key):>{width + 1}.2f}%" for r in results))
    if all(r.flip is not None for r in results):
        for key in ("top1", "top5"):
            rows.append(f"{key + ' +mirror':<14}" + "".join(f"{100 * getattr(r.flip, key):>{width + 1}.2f}%"
                                                            for r in results))
    if all(r.dataset.class_names == classes for r in results):
        for c, cls in enumerate(classes):
            cells = []
            for r in results:
                v = r.metrics.per_class[c]
                cells.append(f"{'-':>{width + 2}}" if v is None else f"{100 * v:>{width + 1}.1f}%")
            rows.append(f"{cls[:14]:<14}" + "".join(cells))
    if all(r.locality is not None for r in results):
        rows += _locality_rows(results, width)
    return "\n".join(rows)


def markdown_table(results: list[Evaluation]) -> str:
    """The results table of docs/results.md: one row per checkpoint, from its card and these metrics."""
    rows = ["| model | variant | test top-1 | test top-5 | epochs | train time | images/s |",
            "|---|---|---|---|---|---|---|"]
    for r in results:
        card, m = r.card, r.metrics
        training = card.training
        epochs, wall, speed = training.epochs, training.wall_time_s, training.images_per_second
        rows.append(f"| `{card.name}` | {card.variant} | **{100 * m.top1:.2f} %** | "
                    f"{100 * m.top5:.2f} % | {'–' if epochs is None else epochs} | "
                    f"{(wall or 0) / 60:.0f} min | {'–' if speed is None else speed} |")
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
    p.add_argument("--ablation", action="store_true",
                   help="also print the 2x2 ablation's Markdown (one checkpoint of each variant: vanilla, lsa, "
                        "spt, spt_lsa) beside the paper's")
    p.add_argument("--flip", action="store_true",
                   help="also score each image averaged with its mirror image (test-time augmentation)")
    p.add_argument("--locality", type=int, default=0, metavar="N",
                   help="also print per-layer attention distance, entropy and tau over the first N test images")
    args = p.parse_args(argv)
    if args.locality < 0 or (args.limit is not None and args.limit < 1):
        p.error("--locality and --limit take a positive number of images")
    try:
        if args.ablation and all(Path(ref).is_dir() for ref in args.checkpoints):
            # Refused before anything is evaluated (the variants are in the local cards); Hub ids are checked after.
            by_variant([Evaluation(ref, read_card(ref), None, None) for ref in args.checkpoints], check_sets=False)
        results = evaluate(args.checkpoints, args.dataset, args.data_dir, args.limit,
                           store=not args.no_store, locality_images=args.locality, flip=args.flip)
        ablation = ablation_markdown(results) if args.ablation else None
    except (CheckpointError, DatasetError, AblationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_table(results))
    if args.markdown:
        print()
        print(markdown_table(results))
    if ablation:
        print()
        print(ablation)
    return 0


if __name__ == "__main__":
    sys.exit(main())
