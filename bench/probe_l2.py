"""How the fine-tune's linear probe should choose its L2: rules compared on the bench's draws, no fine-tuning.

For each draw of bench/finetune_quality.py's three kinds of zip (known, new, six) and both shipped models,
the frozen pooled features of the training images and their mirrors are computed once; 5-fold
cross-validation (explorer.training.linear_probe.cross_validated_probe) gives every L2 of L2_GRID its out-of-fold
correctness and log-loss; each rule picks an L2 from those, and the probe at that L2, refitted on every
training image (as the fine-tune's fallback is), is scored on the zip's test images. Printed: every draw, the
mean per kind and model, and the mean over all draws, for each rule and for the best L2 in hindsight (the
oracle, which no rule can see); and each rule against the quality bench's reference probe
(finetune_quality.probe_accuracy: L2 chosen on one 10 % split): the mean difference, the worst draw and the
draws more than 1.5 points under it (the quality bench's goal). `--first-draw 5` judges the rules on draws
the quality bench never reports (new and six only: the known zips run out of images after draw 4).
Accuracy only: timings here would mean nothing beside other work.

    python bench/probe_l2.py [--draws 5] [--first-draw 0]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from _common import ROOT, data_dir
from finetune_quality import draw_zips, probe_on_features

KINDS = ("known", "new", "six")
MODELS = ("cifar10-vanilla", "cifar10-spt_lsa")


def _within(values: dict[float, np.ndarray], best: float, k: float, higher_is_better: bool) -> float:
    """The strongest L2 whose per-image score is within k paired standard errors of `best`'s."""
    for l2 in sorted(values, reverse=True):
        diff = (values[best] - values[l2]) if higher_is_better else (values[l2] - values[best])
        if diff.mean() <= k * diff.std() / np.sqrt(len(diff)):
            return l2
    return best


def rules(choice, repeats) -> dict[str, float]:
    """Each rule's L2 from one cross-validation's out-of-fold correctness and log-loss per L2 (`choice`),
    and from `repeats`, cross-validations with other fold seeds."""
    from explorer.training.linear_probe import choose_l2
    correct = {k: v.astype(float) for k, v in choice.correct_by_l2.items()}
    loss = choice.loss_by_l2
    top = max(correct, key=lambda l2: (correct[l2].mean(), l2))
    low = min(loss, key=lambda l2: (loss[l2].mean(), -l2))
    every = [choice, *repeats]
    pooled_correct = {l2: np.concatenate([c.correct_by_l2[l2] for c in every]) for l2 in correct}
    pooled_loss = {l2: np.concatenate([c.loss_by_l2[l2] for c in every]) for l2 in correct}
    return {"most right, then log-loss (used)": choose_l2(choice.correct_by_l2, loss),
            f"same, {len(every)} fold draws pooled": choose_l2(pooled_correct, pooled_loss),
            f"lowest log-loss, {len(every)} fold draws pooled": min(pooled_loss,
                                                                    key=lambda l2: (pooled_loss[l2].mean(), -l2)),
            "most right, 1 SE stronger": _within(correct, top, 1.0, True),
            "most right, 0.5 SE stronger": _within(correct, top, 0.5, True),
            "lowest log-loss": low,
            "lowest log-loss, 1 SE stronger": _within(loss, low, 1.0, False)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draws", type=int, default=5)
    p.add_argument("--first-draw", type=int, default=0)
    p.add_argument("--repeats", type=int, default=2, help="extra cross-validations (other fold seeds) for the "
                                                          "pooled rules")
    args = p.parse_args()
    from explorer.checkpoints.store import load_checkpoint
    from explorer.data.folders import read_image_zip
    from explorer.training.head import pooled_features
    from explorer.training.linear_probe import L2_GRID, cross_validated_probe, fit_logistic
    models = {ref: load_checkpoint(ROOT / "checkpoints" / ref)[0] for ref in MODELS}
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    versus: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for draw in range(args.first_draw, args.first_draw + args.draws):
            zips = draw_zips(Path(tmp), Path(data_dir()), draw)
            for kind in (k for k in KINDS if k in zips):
                ds = read_image_zip(zips[kind])
                for ref, model in models.items():
                    x = ds.x_train
                    both = pooled_features(model, np.concatenate([x, x[:, :, ::-1]]))
                    plain, mirror = both[:len(x)], both[len(x):]
                    test = pooled_features(model, ds.x_test)
                    choice = cross_validated_probe(plain, ds.y_train, ds.num_classes, extra=mirror)
                    fit_x, fit_y = both, np.concatenate([ds.y_train, ds.y_train])
                    by_l2 = {l2: 100 * fit_logistic(fit_x, fit_y, ds.num_classes, l2).accuracy(test, ds.y_test)
                             for l2 in L2_GRID}
                    repeats = [cross_validated_probe(plain, ds.y_train, ds.num_classes, extra=mirror, seed=s)
                               for s in range(1, 1 + args.repeats)]
                    picked = rules(choice, repeats)
                    row = {name: by_l2[l2] for name, l2 in picked.items()}
                    row["oracle"] = max(by_l2.values())
                    results.setdefault((kind, ref), []).append(row)
                    reference = 100 * probe_on_features(plain, ds.y_train, test, ds.y_test, ds.num_classes)
                    versus.setdefault((kind, ref), []).append({n: v - reference for n, v in row.items()})
                    print(f"{kind:5s} d{draw} {ref:16s} {len(x)} train / {len(ds.x_test)} test: "
                          + "; ".join(f"{name} {by_l2[l2]:.1f} % (L2 {l2:g})" for name, l2 in picked.items())
                          + f"; oracle {row['oracle']:.1f} %; reference probe {reference:.1f} %", flush=True)
    names = list(next(iter(results.values()))[0])
    print("\n| zip | model | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for (kind, ref), rows in results.items():
        print(f"| {kind} | {ref} | " + " | ".join(f"{np.mean([r[n] for r in rows]):.2f}" for n in names) + " |")
    every = [r for rows in results.values() for r in rows]
    print(f"| **all {len(every)}** | | " + " | ".join(f"**{np.mean([r[n] for r in every]):.2f}**" for n in names)
          + " |")
    print("\nAgainst the quality bench's reference probe: mean difference / worst draw / draws under -1.5")
    print("\n| zip | model | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    def cell(rows, n):
        gaps = [r[n] for r in rows]
        return f"{np.mean(gaps):+.2f} / {min(gaps):+.1f} / {sum(g < -1.5 for g in gaps)}"
    for (kind, ref), rows in versus.items():
        print(f"| {kind} | {ref} | " + " | ".join(cell(rows, n) for n in names) + " |")
    every = [r for rows in versus.values() for r in rows]
    print(f"| **all {len(every)}** | | " + " | ".join(f"**{cell(every, n)}**" for n in names) + " |")


if __name__ == "__main__":
    main()
