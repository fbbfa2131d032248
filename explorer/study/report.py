"""What the small-data study says, from its results.csv rows: test top-1 per size and variant (mean and
spread over seeds), the paired gap SPT+LSA - ViT seed by seed, the 2x2 corners where all four ran, and the
markdown tables of study/RESULTS.md and the README. Numbers only: no Ray, no Keras (the app reads it too).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

from explorer.core.card import Card
from explorer.core.formatting import pct
from explorer.model.ablation import NAMES, ORDER

# results.csv: a row's recipe when it names none (the rows written before the paper's recipe ran), and the
# columns that hold words rather than numbers.
DEFAULT_RECIPE = "light"
TEXT_COLUMNS = ("variant", "recipe", "trial")

# The app's colours: the ViT as slot A (blue), SPT + LSA as slot B (orange), the two halves after them.
VARIANT_COLOR = {"vanilla": 0, "spt_lsa": 1, "spt": 2, "lsa": 3, "lsa_head": 4, "spt_lsa_head": 5}
# The paper's own LSA (aanna0701/SPT_LSA_ViT): one learned temperature per head, where the keras.io example
# (every other variant here) learns one per layer.
HEAD_NAMES = {"lsa_head": "LSA alone, per-head τ", "spt_lsa_head": "SPT + LSA, per-head τ"}
ALL_NAMES = {**NAMES, **HEAD_NAMES}
ALL_ORDER = (*ORDER, *HEAD_NAMES)



def read_results(path: str | os.PathLike) -> list[dict]:
    """results.csv as rows with numbers (the app reads this; it needs neither Ray nor the records)."""
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            parsed = {}
            for k, v in row.items():
                if k in TEXT_COLUMNS:
                    parsed[k] = v
                elif v == "":
                    parsed[k] = None
                else:
                    parsed[k] = float(v) if any(c in v for c in ".eE") else int(v)
            parsed.setdefault("recipe", DEFAULT_RECIPE)
            out.append(parsed)
    return out


def study_variant(card: Card) -> str:
    """The study's name for a card's model: its variant, with "_head" for per-head LSA temperatures."""
    variant = card.variant
    per_head = variant in ("lsa", "spt_lsa") and (card.config or {}).get("tau_mode") == "head"
    return f"{variant}_head" if per_head else variant


# results.csv's recipe of the light study (crop + flip, weight decay 1e-4); a row without the column is one.
LIGHT = "light"


def of_recipe(rows: list[dict], recipe: str = LIGHT) -> list[dict]:
    """The rows trained under `recipe` (a grid recipe's name: "light", "paper", "cutmix")."""
    return [r for r in rows if (r.get("recipe") or LIGHT) == recipe]


def _by(rows: list[dict], key) -> dict:
    out: dict = {}
    for r in rows:
        if r.get("test_top1") is not None:
            out.setdefault(key(r), []).append(r)
    return out


def summary(rows: list[dict], recipe: str = LIGHT) -> dict[tuple[int, str], dict]:
    """(train_images, variant) -> n, mean, std (sample, ddof=1; 0 for one seed), min, max of test top-1, over
    the rows of `recipe`."""
    out = {}
    groups = _by(of_recipe(rows, recipe), lambda r: (int(r["train_images"]), r["variant"]))
    for (n, variant), group in sorted(groups.items()):
        values = np.array([g["test_top1"] for g in sorted(group, key=lambda g: g["seed"])], float)
        out[(n, variant)] = {"n": len(values), "mean": float(values.mean()),
                             "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                             "min": float(values.min()), "max": float(values.max()),
                             "seeds": sorted(int(g["seed"]) for g in group)}
    return out


def paired_gaps(rows: list[dict], a: str = "vanilla", b: str = "spt_lsa", recipe: str = LIGHT,
                recipe_a: str | None = None) -> dict[int, dict]:
    """train_images -> the gap b - a in test top-1 for each seed both ran (same seed: same initialisation
    stream, augmentation and order), its mean and sample std, and the seeds; b under `recipe`, a under
    `recipe_a` (default: the same)."""
    def table(name, variant):
        return {(int(r["train_images"]), int(r["seed"])): r["test_top1"] for r in of_recipe(rows, name)
                if r.get("test_top1") is not None and r["variant"] == variant}
    by_a, by_b = table(recipe_a or recipe, a), table(recipe, b)
    out = {}
    for n in sorted({k[0] for k in by_a}):
        seeds = sorted(s for (m, s) in by_a if m == n and (n, s) in by_b)
        if not seeds:
            continue
        gaps = np.array([by_b[(n, s)] - by_a[(n, s)] for s in seeds])
        out[n] = {"seeds": seeds, "gaps": gaps.tolist(), "mean": float(gaps.mean()),
                  "std": float(gaps.std(ddof=1)) if len(gaps) > 1 else None}
    return out


# Student's t, two-sided 95 %, by degrees of freedom (seeds - 1): the interval of a mean gap over few seeds.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    """The two-sided 95 % quantile of Student's t with `df` degrees of freedom (from the table; above 30,
    1.96; between entries, the next smaller df's, which is wider)."""
    if df >= 31:
        return 1.96
    return T95[max(k for k in T95 if k <= df)]


def interval(gaps) -> tuple[float, float] | None:
    """The 95 % confidence interval of the mean paired gap (t over seeds - 1 degrees of freedom)."""
    gaps = np.asarray(gaps, float)
    if len(gaps) < 2:
        return None
    half = t95(len(gaps) - 1) * gaps.std(ddof=1) / np.sqrt(len(gaps))
    return float(gaps.mean() - half), float(gaps.mean() + half)


def points(v: float | None) -> str:
    """A fraction in percentage points, two decimals, without the unit (the tables' headers say it)."""
    return pct(v, 2, unit="")


def curve_table(rows: list[dict]) -> str:
    s = summary(rows)
    sizes = sorted({n for n, _ in s})
    variants = [v for v in ALL_ORDER if any((n, v) in s for n in sizes)]
    head = "| train images | " + " | ".join(f"{ALL_NAMES[v]} (seeds)" for v in variants) + " |"
    lines = [head, "|---:|" + "---:|" * len(variants)]
    for n in sizes:
        cells = []
        for v in variants:
            e = s.get((n, v))
            if e is None:
                cells.append("")
            elif e["n"] > 1:
                cells.append(f"{points(e['mean'])} ± {points(e['std'])} ({e['n']})")
            else:
                cells.append(f"{points(e['mean'])} (1)")
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gap_table(rows: list[dict]) -> str:
    lines = ["| train images | seeds | SPT+LSA − ViT (points) | per seed | seed std: ViT, SPT+LSA | 95 % interval |",
             "|---:|---:|---:|---|---|---|"]
    s = summary(rows)
    for n, g in paired_gaps(rows).items():
        per_seed = ", ".join(f"{100 * x:+.2f}" for x in g["gaps"])
        noise = ", ".join(points(s[(n, v)]["std"]) if (n, v) in s and s[(n, v)]["n"] > 1 else "–"
                          for v in ("vanilla", "spt_lsa"))
        spread = f"{100 * g['mean']:+.2f}" + (f" ± {100 * g['std']:.2f}" if g["std"] is not None else "")
        ci = interval(g["gaps"])
        shown = "–" if ci is None else f"{100 * ci[0]:+.2f} to {100 * ci[1]:+.2f}"
        lines.append(f"| {n:,} | {len(g['seeds'])} | {spread} | {per_seed} | {noise} | {shown} |")
    return "\n".join(lines)


def corners_table(rows: list[dict]) -> str:
    """The 2x2 at each size where all four variants ran, over the seeds all four ran (a ViT's extra seeds
    would move its mean and every change with it): mean test top-1 and the change over the ViT."""
    every = summary(rows)
    sizes = [n for n in sorted({n for n, _ in every}) if all((n, v) in every for v in ORDER)]
    if not sizes:
        return "None yet: no size has all four variants."
    common = {n: set.intersection(*(set(every[(n, v)]["seeds"]) for v in ORDER)) for n in sizes}
    sizes = [n for n in sizes if common[n]]
    if not sizes:
        return "None yet: no size has all four variants on a seed they share."
    s = summary([r for r in rows if int(r["train_images"]) in common
                 and int(r["seed"]) in common[int(r["train_images"])]])
    lines = ["| train images | " + " | ".join(NAMES[v] for v in ORDER) + " |", "|---:|" + "---:|" * len(ORDER)]
    for n in sizes:
        base = s[(n, "vanilla")]["mean"]
        cells = [f"{points(s[(n, v)]['mean'])} ({s[(n, v)]['n']})" + ("" if v == "vanilla" else
                 f", {100 * (s[(n, v)]['mean'] - base):+.2f}") for v in ORDER]
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The 2x2's paired effects: what each half adds to the ViT, and what it adds on top of the other half.
EFFECTS = [("vanilla", "spt"), ("vanilla", "lsa"), ("spt", "spt_lsa"), ("lsa", "spt_lsa")]


def _effect(g: dict | None) -> str:
    if g is None:
        return "–"
    ci = interval(g["gaps"])
    return f"{100 * g['mean']:+.2f}" + ("" if ci is None else f" ({100 * ci[0]:+.2f} to {100 * ci[1]:+.2f})")


def _effects(rows: list[dict], effects: list[tuple[str, str]], sizes: list[int], none: str) -> str:
    """Paired effects b − a at `sizes`: each seed by seed (the same seed in both), its mean and the 95 %
    interval of the mean, in points."""
    if not sizes:
        return none
    gaps = {(a, b): paired_gaps(rows, a, b) for a, b in effects}
    lines = ["| train images | " + " | ".join(f"{ALL_NAMES[b]} − {ALL_NAMES[a]}" for a, b in effects) + " |",
             "|---:|" + "---:|" * len(effects)]
    for n in sizes:
        lines.append(f"| {n:,} | " + " | ".join(_effect(gaps[e].get(n)) for e in effects) + " |")
    return "\n".join(lines)


def effects_table(rows: list[dict]) -> str:
    """The 2x2 as paired effects where all four variants ran."""
    s = summary(rows)
    sizes = [n for n in sorted({n for n, _ in s}) if all((n, v) in s for v in ORDER)]
    return _effects(rows, EFFECTS, sizes, "None yet: no size has all four variants.")


# The paper's LSA against the others, seed by seed: what it adds to the ViT and to SPT, and what one temperature
# per head changes against one per layer, alone and on top of SPT.
HEAD_EFFECTS = [("vanilla", "lsa_head"), ("spt", "spt_lsa_head"), ("lsa", "lsa_head"), ("spt_lsa", "spt_lsa_head")]


def head_effects_table(rows: list[dict]) -> str:
    """The per-head-temperature variants as paired effects where they ran."""
    s = summary(rows)
    sizes = [n for n in sorted({n for n, _ in s}) if any((n, v) in s for v in HEAD_NAMES)]
    return _effects(rows, HEAD_EFFECTS, sizes, "None yet: no per-head-temperature trial has finished.")


# Issue 54's mechanisms, each as a paired gap (b − a, seed by seed) with the paper's per-head LSA, measured
# under the light recipe and under the paper's: (label, a, b).
RECIPE_EFFECTS = [("LSA alone − ViT", "vanilla", "lsa_head"), ("SPT + LSA − SPT alone", "spt", "spt_lsa_head"),
                  ("SPT alone − ViT", "vanilla", "spt"), ("SPT + LSA − ViT", "vanilla", "spt_lsa_head")]
RECIPE_NAMES = {LIGHT: "light recipe", "paper": "paper recipe", "cutmix": "light recipe + CutMix"}


RECIPE_ON_VIT = "the recipe − the light one, on the ViT"


def recipe_gaps(rows: list[dict], recipes: tuple[str, ...] = (LIGHT, "paper")) -> dict:
    """(label, recipe) -> train_images -> paired gap (paired_gaps' dict) for each RECIPE_EFFECTS row under each
    of `recipes`, and (RECIPE_ON_VIT, recipe) for what the paper's recipe and the CutMix-only arm do to the ViT
    against the light recipe's ViT of the same seed."""
    out = {}
    for label, a, b in RECIPE_EFFECTS:
        for recipe in recipes:
            out[(label, recipe)] = paired_gaps(rows, a, b, recipe=recipe)
    for recipe in ("paper", "cutmix"):
        out[(RECIPE_ON_VIT, recipe)] = paired_gaps(rows, "vanilla", "vanilla", recipe=recipe, recipe_a=LIGHT)
    return out


def recipe_gap_table(rows: list[dict]) -> str:
    """The mechanisms' paired gaps, a row each at every size where any ran, under the light recipe, the paper's
    and the light one with CutMix (the ViT only), in points with the 95 % interval of the mean (how many
    seeds); the last row of each size is what each recipe does to the ViT."""
    gaps = recipe_gaps(rows)
    sizes = sorted({n for g in gaps.values() for n in g})
    if not sizes:
        return "None yet: no mechanism has a paired gap under either recipe."
    recipes = (LIGHT, "paper", "cutmix")
    lines = ["| train images | paired gap (points) | " + " | ".join(RECIPE_NAMES[r] for r in recipes) + " |",
             "|---:|---|" + "---:|" * len(recipes)]
    for n in sizes:
        for label in [label for label, _, _ in RECIPE_EFFECTS] + [RECIPE_ON_VIT]:
            cells = []
            for recipe in recipes:
                g = gaps.get((label, recipe), {}).get(n)
                cells.append("–" if g is None else f"{_effect(g)} ({len(g['seeds'])})")
            if any(c != "–" for c in cells):
                lines.append(f"| {n:,} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(rows: list[dict]) -> str:
    if not rows:
        return "No trial has finished yet."
    return "\n\n".join([
        "Test top-1 (%) on all 10,000 test images, mean ± sample std over seeds (how many):", curve_table(rows),
        "The paired gap, seed by seed (the same seed gives both models the same augmentation and order), "
        "with the 95 % interval of its mean (Student's t over the seeds): where it excludes 0, the gap is "
        "larger than the seed-to-seed noise:",
        gap_table(rows),
        "The 2x2 where all four variants ran, over the seeds all four ran (mean test top-1, change over the ViT "
        "in points):",
        corners_table(rows),
        "The same 2x2 as paired effects (seed by seed, in points; the 95 % interval of the mean in parentheses "
        "where there are two seeds or more): what SPT and LSA each add to the ViT, and what each adds on top "
        "of the other:",
        effects_table(rows),
        "The paper's own LSA, one learned temperature per head (every other LSA here learns one per layer, as "
        "the keras.io example does), as paired effects in points: what it adds to the ViT and to SPT, and what "
        "per-head temperatures change against per-layer ones:",
        head_effects_table(rows), *recipe_section(rows)])


def recipe_section(rows: list[dict]) -> list[str]:
    """The mechanisms under both recipes, as markdown paragraphs; none before a trial of another recipe than the
    light one has finished."""
    if not any((r.get("recipe") or LIGHT) != LIGHT for r in rows):
        return []
    return ["Under the paper's own recipe (`--recipe paper`: CutMix and mixup, RandAugment, random erasing 0.25, "
            "repeated augmentation ×3, label smoothing, weight decay 0.05, stochastic depth 0.1, 100 epochs), "
            "beside the light one (crop and flip), with the paper's LSA (one τ per head): each mechanism as a "
            "paired gap in points, the 95 % interval of its mean, and how many seeds; the last row of a size is "
            "what each recipe does to the ViT against the light one, the CutMix column the ViT with CutMix "
            "alone added to the light recipe, which tells what CutMix does from what LSA does:",
            recipe_gap_table(rows)]


def lsa_verdict(rows: list[dict], recipe: str = LIGHT) -> str | None:
    """What LSA alone did to the ViT's test top-1 under `recipe`, over the sizes where its paired gap has an
    interval (two seeds or more): "gain" or "loss" where an interval excludes 0, "none" where every one holds
    it, None without an interval."""
    gaps = recipe_gaps(rows)[("LSA alone − ViT", recipe)]
    intervals = [interval(g["gaps"]) for g in gaps.values()]
    intervals = [i for i in intervals if i is not None]
    if not intervals:
        return None
    if any(low > 0 for low, _ in intervals):
        return "gain"
    if any(high < 0 for _, high in intervals):
        return "loss"
    return "none"


def lsa_question(rows: list[dict]) -> str:
    """The Small data tab's heading over what LSA does to attention, from what the study measured."""
    light, paper = lsa_verdict(rows), lsa_verdict(rows, "paper")
    tail = "what its temperature and mask do to attention"
    if light in ("none", None) and paper == "none":
        return ("Why does LSA alone add nothing measurable here, under the light recipe or the paper's? "
                f"{tail.capitalize()}")
    if light in ("none", None) and paper == "gain":
        return f"LSA alone gains only under the paper's recipe: why, and {tail}"
    if light in ("none", None) and paper is None:
        return f"Why does LSA add nothing here? {tail.capitalize()}"
    return f"What LSA does here, recipe by recipe: {tail}"


BEGIN, END = "<!-- study tables: written by `python -m explorer.study report` -->", "<!-- /study tables -->"


def tables_block(text: str) -> str | None:
    """The study's tables in a page (README.md) between the markers, or None when it has none."""
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def with_tables(text: str, rows: list[dict]) -> str:
    """The page with its study tables (between the markers) written from `rows`."""
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{markdown(rows)}\n{END}{rest.split(END, 1)[1]}"


def shipped_points(checkpoints: str | os.PathLike, dataset: str = "cifar10",
                   variants=("vanilla", "spt_lsa")) -> dict[str, dict]:
    """The shipped full-data models' cards, variant -> {train_images, test_top1, epochs}: the curve's
    markers (trained longer, in stages, so drawn apart from the study's one recipe)."""
    out = {}
    for v in variants:
        path = Path(checkpoints) / f"{dataset}-{v}" / "explorer.json"
        try:
            card = Card.from_json(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
        if card.metrics.test_top1 is not None:
            out[v] = {"train_images": card.dataset.train_images, "test_top1": card.metrics.test_top1,
                      "epochs": card.training.epochs}
    return out


def _curves(rows: list[dict], shipped: dict[str, dict] | None):
    from explorer.analysis.plots import model_color
    s = summary(rows)
    curves, markers, colors = {}, {}, {}
    for v in ORDER:
        sizes = sorted(n for n, w in s if w == v)
        if sizes:
            curves[NAMES[v]] = (sizes, [s[(n, v)]["mean"] for n in sizes], [s[(n, v)]["std"] for n in sizes])
            colors[NAMES[v]] = model_color(VARIANT_COLOR[v])
    for v, point in (shipped or {}).items():
        epochs = f"{point['epochs']} epochs, " if point.get("epochs") else ""
        label = f"{NAMES[v]}, shipped ({epochs}staged recipe)"
        markers[label] = (point["train_images"], point["test_top1"])
        colors[label] = model_color(VARIANT_COLOR[v])
    return curves, markers, colors


# The study's arm under the paper's recipe: its ViT and its SPT + LSA (the paper's own LSA, τ per head).
PAPER_ARM = ("vanilla", "spt_lsa_head")
PAPER_ARM_GAP = "paper recipe: SPT + LSA (τ per head) − ViT"
PAPER_SCALE_WORDS = "paper scale, 2.7 M, paper recipe"


def _paper_arm(rows: list[dict]):
    """The paper recipe's curves (label -> sizes, means, stds) of PAPER_ARM, their colours and styles."""
    from explorer.analysis.plots import model_color
    s = summary(rows, "paper")
    curves, colors, styles = {}, {}, {}
    for v, slot in zip(PAPER_ARM, ("vanilla", "spt_lsa"), strict=True):
        sizes = sorted(n for n, w in s if w == v)
        if sizes:
            label = f"{ALL_NAMES[v]}, paper recipe"
            curves[label] = (sizes, [s[(n, v)]["mean"] for n in sizes], [s[(n, v)]["std"] for n in sizes])
            colors[label], styles[label] = model_color(VARIANT_COLOR[slot]), (":", "s")
    return curves, colors, styles


def _pair_gap(pair: dict[str, dict] | None, words: str, shape: str):
    if pair and {"vanilla", "spt_lsa"} <= set(pair) and \
            pair["vanilla"]["train_images"] == pair["spt_lsa"]["train_images"]:
        return (pair["spt_lsa"]["train_images"], pair["spt_lsa"]["test_top1"] - pair["vanilla"]["test_top1"], words,
                shape)
    return None


def _gaps(rows: list[dict], shipped: dict[str, dict] | None, paper_scale: dict[str, dict] | None = None):
    """The light recipe's paired gaps, the paper recipe's (PAPER_ARM), and the shipped and paper-scale pairs'
    gaps as a star and a diamond."""
    gaps = {n: {**g, "interval": interval(g["gaps"])} for n, g in paired_gaps(rows).items()}
    arm = {n: {**g, "interval": interval(g["gaps"])} for n, g in paired_gaps(rows, *PAPER_ARM, recipe="paper").items()}
    markers = [m for m in (_pair_gap(shipped, "shipped pair (0.2 M, staged recipe)", "*"),
                           _pair_gap(paper_scale, f"{PAPER_SCALE_WORDS}", "D")) if m is not None]
    return gaps, markers, ({PAPER_ARM_GAP: arm} if arm else {})


GAP_LABEL = f"{NAMES['spt_lsa']} − {NAMES['vanilla']} (points)"
NOTE = "lines: the study's recipes; band: ± one std over seeds"


def curve_figure(rows: list[dict], shipped: dict[str, dict] | None = None, gap_panel: bool = True,
                 paper_scale: dict[str, dict] | None = None):
    """The study's figure: test top-1 against training-set size, a line and mean ± std band per variant
    under the light recipe, and (dotted, hollow squares) the paper recipe's ViT and SPT + LSA; the shipped
    pair as stars, the paper-scale pair (`paper_scale`, shipped_points of checkpoints/paper) as diamonds;
    beside it (`gap_panel`) the paired gap per size (each seed, the mean and its 95 % interval; the paper
    recipe's; the two pairs' gaps)."""
    from explorer.analysis.plots import model_color, plot_data_curve
    curves, markers, colors = _curves(rows, shipped)
    arm, arm_colors, styles = _paper_arm(rows)
    curves, colors = {**curves, **arm}, {**colors, **arm_colors}
    shapes = {}
    for v, point in (paper_scale or {}).items():
        label = f"{NAMES[v]}, {PAPER_SCALE_WORDS}"
        markers[label], colors[label], shapes[label] = (point["train_images"], point["test_top1"]), \
            model_color(VARIANT_COLOR[v]), "D"
    gaps, marker, arms = _gaps(rows, shipped, paper_scale) if gap_panel else ({}, None, None)
    return plot_data_curve(curves, markers, note=NOTE, colors=colors, gaps=gaps or None, gap_marker=marker,
                           gap_label=GAP_LABEL, dashed=frozenset({NAMES["spt"], NAMES["lsa"]}), styles=styles,
                           shapes=shapes, gap_arms=arms)


def gap_figure(rows: list[dict], shipped: dict[str, dict] | None = None, paper_scale: dict[str, dict] | None = None):
    """The paired gap per size on its own (the app lays the two figures out side by side, or one above the
    other in a narrow window)."""
    from explorer.analysis.plots import plot_gaps
    gaps, markers, arms = _gaps(rows, shipped, paper_scale)
    return plot_gaps(gaps, markers, GAP_LABEL, arms)
