"""Validation metrics of finished checkpoints measured again, exactly, on their own validation split.

Cards written before validation used compile's weighted_metrics counted the padding of the last validation
batch (5,000 images in batches of 512: 120 repeats) in val_top1 / val_top5, and averaged the loss over the
padded rows. This measures top-1, top-5 and the label-smoothed loss of each checkpoint's final weights on
the exact validation images its recipe held out, prints old against new, and with --write puts the new
numbers in the card (the per-epoch history stays as it was measured during training).

    python tools/revalidate.py checkpoints/cifar10-spt checkpoints/cifar10-lsa --data-dir ../shared/data [--write]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def smoothed_loss(logits: np.ndarray, y: np.ndarray, smoothing: float) -> float:
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    target = np.full(logits.shape, smoothing / logits.shape[-1])
    target[np.arange(len(y)), y] += 1 - smoothing
    return float(-(target * log_p).sum(-1).mean())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--data-dir")
    p.add_argument("--write", action="store_true", help="put the exact numbers in each card")
    args = p.parse_args(argv)
    from explorer.checkpoints.store import load_checkpoint, update_card
    from explorer.data.batches import training_split
    from explorer.data.folders import load_dataset
    from explorer.model.predict import accuracy_metrics, predict_logits
    from explorer.training.recipe import TrainConfig
    names = {f.name for f in fields(TrainConfig)}
    datasets = {}
    for ref in args.checkpoints:
        model, card = load_checkpoint(ref)
        recipe = card.training.recipe
        tc = TrainConfig(**{k: v for k, v in recipe.items() if k in names})
        name = card.dataset.name
        if name not in datasets:
            datasets[name] = load_dataset(name, args.data_dir)
        _, val = training_split(datasets[name], tc)
        if val is None:
            print(f"{ref}: no validation split")
            continue
        logits = predict_logits(model, val[0])
        exact = accuracy_metrics(logits, val[1])
        new = {"val_top1": exact.top1, "val_top5": exact.top5,
               "val_loss": smoothed_loss(logits, val[1], tc.label_smoothing)}
        old = {k: getattr(card.metrics, k) for k in new}
        print(f"{ref}: {len(val[1])} validation images; "
              + ", ".join(f"{k} {float('nan') if old[k] is None else old[k]:.4f} -> {v:.4f}" for k, v in new.items()),
              flush=True)
        if args.write:
            update_card(ref, metrics=new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
