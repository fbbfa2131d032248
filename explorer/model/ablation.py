"""The 2x2 ablation's section of docs/results.md: which of SPT and LSA carries the gain, beside the paper's ablation.

Built from `explorer.evaluate` results (explorer.analysis.evaluate.Evaluation, read by their fields), one
checkpoint of each variant evaluated together:

    python -m explorer.evaluate checkpoints/cifar10-vanilla checkpoints/cifar10-lsa checkpoints/cifar10-spt \\
        checkpoints/cifar10-spt_lsa --flip --locality 256 --ablation
"""

from __future__ import annotations

import numpy as np

from explorer.core.formatting import pct
from explorer.model.config import ViTConfig

ORDER = ("vanilla", "lsa", "spt", "spt_lsa")
NAMES = {"vanilla": "ViT", "lsa": "LSA alone", "spt": "SPT alone", "spt_lsa": "SPT + LSA"}
# Lee, Lee & Song 2021 (arXiv 2112.13492), the ViT ablation: top-1 on CIFAR-100 and Tiny-ImageNet.
PAPER = {"vanilla": (73.81, 57.07), "lsa": (74.87, 58.50), "spt": (76.29, 60.67), "spt_lsa": (76.92, 61.07)}


class AblationError(ValueError):
    """The results are not one checkpoint of each variant on one dataset."""


def by_variant(results: list, check_sets: bool = True) -> dict:
    """The results keyed by variant; refused unless there is exactly one of each, on one test set."""
    found: dict[str, list[str]] = {}
    for r in results:
        found.setdefault(r.card.variant, []).append(r.ref)
    missing = [v for v in ORDER if v not in found]
    twice = {v: refs for v, refs in found.items() if len(refs) > 1}
    extra = [v for v in found if v not in ORDER]
    if missing or twice or extra:
        why = ([f"missing {', '.join(missing)}"] if missing else []) + \
              [f"{v} twice ({', '.join(refs)})" for v, refs in twice.items()] + \
              ([f"unknown variant {', '.join(map(str, extra))}"] if extra else [])
        raise AblationError(f"the ablation needs one checkpoint of each variant ({', '.join(ORDER)}): {'; '.join(why)}")
    out = {v: next(r for r in results if r.card.variant == v) for v in ORDER}
    if not check_sets:
        return out
    classes = {tuple(r.dataset.class_names) for r in out.values()}
    counts = {r.metrics.count for r in out.values()}
    if len(classes) > 1 or len(counts) > 1:
        raise AblationError("the four checkpoints were evaluated on different test sets")
    return out


def _gain(v, base, digits: int = 2) -> str:
    return "–" if v is None or base is None else f"{100 * (v - base):+.{digits}f}"


def _paper(variant: str, top1: float, vanilla: float) -> str:
    """A top-1 from the paper (in %), with its gain over the paper's plain ViT but for the plain ViT itself."""
    return f"{top1:.2f} %" + ("" if variant == "vanilla" else f" ({top1 - vanilla:+.2f})")


def grid(res: dict) -> list[str]:
    """The 2x2 itself: tokenizer by attention, test top-1 and the gain over the plain ViT."""
    top1 = {v: res[v].metrics.top1 for v in ORDER}

    def cell(v):
        gain = "" if v == "vanilla" else f" ({_gain(top1[v], top1['vanilla'])})"
        return f"{NAMES[v]}: **{pct(top1[v], 2)}**{gain}"

    return ["| tokens \\ attention | standard (√d_k, self included) | LSA (learned τ, diagonal masked) |",
            "|---|---|---|",
            f"| plain patches | {cell('vanilla')} | {cell('lsa')} |",
            f"| shifted patches (SPT) | {cell('spt')} | {cell('spt_lsa')} |"]


def main_table(res: dict) -> list[str]:
    """Per model: our test, mirror, validation and training top-1, beside the paper's two datasets."""
    base = res["vanilla"].metrics.top1
    rows = ["| model | variant | test top-1 | gain | test top-5 | top-1 + mirror | val top-1 | train top-1 | "
            "paper CIFAR-100 (gain) | paper Tiny-ImageNet (gain) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for v in ORDER:
        r = res[v]
        m, card = r.metrics, r.card.metrics
        flip = r.flip.top1 if r.flip is not None else card.test_top1_flip
        c100, tin = (_paper(v, top1, vanilla) for top1, vanilla in zip(PAPER[v], PAPER["vanilla"], strict=True))
        rows.append(f"| `{r.card.name or r.ref}` | {NAMES[v]} | **{pct(m.top1, 2)}** | "
                    f"{'–' if v == 'vanilla' else _gain(m.top1, base)} | {pct(m.top5, 2)} | {pct(flip, 2)} | "
                    f"{pct(card.val_top1, 2)} | {pct(card.top1, 2)} | {c100} | {tin} |")
    return rows


def additivity(res: dict) -> str:
    """How the two parts' gains add up, in one sentence of numbers."""
    top1 = {v: 100 * res[v].metrics.top1 for v in ORDER}
    lsa, spt, both = (top1[v] - top1["vanilla"] for v in ("lsa", "spt", "spt_lsa"))
    p = {v: PAPER[v][0] - PAPER["vanilla"][0] for v in ("lsa", "spt", "spt_lsa")}
    shares = (f" SPT alone reaches {100 * spt / both:.0f} % of the joint gain and LSA alone {100 * lsa / both:.0f} %."
              if both > 0 else " The two together do not beat the plain ViT.")
    return (f"Gains over the plain ViT (test top-1, points): LSA alone {lsa:+.2f}, SPT alone {spt:+.2f}, both "
            f"{both:+.2f}; the sum of the parts is {lsa + spt:+.2f}, so together they add "
            f"{both - lsa - spt:+.2f} beyond it.{shares} In the paper (CIFAR-100): LSA {p['lsa']:+.2f}, "
            f"SPT {p['spt']:+.2f}, both {p['spt_lsa']:+.2f} (SPT alone {100 * p['spt'] / p['spt_lsa']:.0f} % of the "
            f"joint gain, LSA alone {100 * p['lsa'] / p['spt_lsa']:.0f} %).")


def per_class(res: dict) -> list[str]:
    """Each class's vanilla test accuracy and each other model's gain over it, in points."""
    classes = res["vanilla"].dataset.class_names
    rows = ["| class | ViT | LSA alone | SPT alone | SPT + LSA |", "|---|---:|---:|---:|---:|"]
    base = res["vanilla"].metrics.per_class
    for c, name in enumerate(classes):
        cells = [_gain(res[v].metrics.per_class[c], base[c], 1) for v in ORDER[1:]]
        shown = "–" if base[c] is None else f"{100 * base[c]:.1f} %"
        rows.append(f"| {name} | {shown} | " + " | ".join(cells) + " |")
    return rows


def tau_rows(res: dict) -> list[str]:
    """The learned tau per layer (mean over heads) of the two LSA models."""
    layers = max(len(res[v].locality.tau) for v in ("lsa", "spt_lsa"))
    rows = ["| learned τ, mean of heads | " + " | ".join(f"L{k}" for k in range(layers)) + " |",
            "|---|" + "---:|" * layers]
    for v in ("lsa", "spt_lsa"):
        label = f"{NAMES[v]} (starts at √d_k = {ViTConfig.from_dict(res[v].card.config).initial_tau:.3g})"
        taus = " | ".join("–" if t is None else f"{t:.2f}" for t in res[v].locality.tau)
        rows.append(f"| {label} | {taus} |")
    return rows


def locality_rows(res: dict) -> list[str]:
    """Attention entropy and mean attention distance per layer for the four models."""
    layers = max(len(res[v].locality.distance) for v in ORDER)
    rows = ["| per layer | " + " | ".join(f"L{k}" for k in range(layers)) + " | mean |",
            "|---|" + "---:|" * (layers + 1)]
    for key, what, fmt in (("entropy", "entropy (nats)", ".2f"), ("distance", "distance (px)", ".1f")):
        for v in ORDER:
            values = getattr(res[v].locality, key)
            rows.append(f"| {what}, {NAMES[v]} | " + " | ".join(f"{x:{fmt}}" for x in values) +
                        f" | {float(np.mean(values)):{fmt}} |")
    return rows


def ablation_markdown(results: list) -> str:
    """The 2x2 section of docs/results.md: the grid, the main table beside the paper's, how the gains add up, learned
    tau, per-class gains and (with locality) entropy and distance per layer."""
    res = by_variant(results)
    ds = res["vanilla"].dataset
    count, total = res["vanilla"].metrics.count, len(getattr(ds, "x_test", ()))
    which = f"the first {count:,} of {total:,}" if count < total else f"all {count:,}"
    parts = [f"On {which} {ds.name} test images:", "", *grid(res), "",
             *main_table(res), "", additivity(res), "", *per_class(res)]
    if all(res[v].locality is not None for v in ORDER):
        n = res["vanilla"].locality.images
        # Tau is a weight, the same whatever the images; entropy and distance are measured over n of them.
        parts += ["", "Learned τ per layer (layers numbered as in the app):", "", *tau_rows(res), "",
                  f"Attention over the first {n} test images:", "", *locality_rows(res)]
    return "\n".join(parts)
