"""What LSA does to attention, measured: for every kept model of the small-data study (and the shipped
full-data 2x2), on one fixed set of test images, per layer: the learned temperatures against their start
(sqrt(d_k)), the attention entropy and the mean attention distance (the app's own per-image measures, from
explorer.model.probe), and the share of attention a query gives itself, which is what LSA's diagonal mask removes
(0 by construction where the mask is on). `python -m explorer.study mechanisms` writes study/mechanisms.csv,
study/MECHANISMS.md and study/mechanisms.png.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from explorer.checkpoints.catalog import PAPER, STUDY, study_recipe
from explorer.checkpoints.store import load_checkpoint
from explorer.core.card import Card
from explorer.core.settings import Settings
from explorer.data.samples import TestImages
from explorer.model.config import ViTConfig
from explorer.model.models import tau_values
from explorer.model.probe import Probe, attention_entropy, mean_attention_distance
from explorer.study.report import ALL_NAMES, LIGHT, VARIANT_COLOR, paired_gaps, read_results, study_variant

# distance_min_px: the layer's most local head (its smallest mean attention distance), in input pixels.
COLUMNS = ("model", "variant", "recipe", "train_images", "layer", "tau_mean", "tau_min", "tau_max", "tau_start",
           "entropy", "distance_px", "distance_min_px", "self_attention", "self_attention_max", "patches", "image_size",
           "test_top1")
# Per head (study/mechanisms_heads.csv): the measures of one head of one layer; `distance` is the mean attention
# distance over the image's side (the measure of arXiv 2605.16390, whose smallest head per layer it reports).
HEAD_COLUMNS = ("model", "variant", "recipe", "train_images", "layer", "head", "tau_ratio", "entropy", "distance",
                "self_attention", "test_top1")
TEXT = ("model", "variant", "recipe")
FULL = 45_000  # the shipped models' training-set size
STAGED = "staged"  # the shipped full-data models' recipe: stages, CutMix/mixup in the last
# The paper-scale models (checkpoints/paper: preset and recipe `paper`, 2.7 M parameters, trained in GPU windows):
# a recipe label of their own, so that no statement about the 0.2 M models takes them in.
PAPER_SCALE = "paper scale"
PAPER_SCALE_AA = "paper scale, AutoAugment"  # the same under --recipe paper-autoaugment (the authors' policy)
# The recipes in the order the tables list them; the names the text gives them.
RECIPES = (LIGHT, "cutmix", "paper", STAGED, PAPER_SCALE, PAPER_SCALE_AA)
RECIPE_WORDS = {LIGHT: "light recipe", "cutmix": "light recipe + CutMix", "paper": "paper recipe",
                STAGED: "staged recipe", PAPER_SCALE: "paper recipe at the paper's scale",
                PAPER_SCALE_AA: "paper recipe with AutoAugment at the paper's scale"}
# arXiv 2605.16390 (CIFAR-100): the smallest head's mean attention distance over the image's side, without
# CutMix and with it, for the text that compares.
CITED = (0.316, 0.008)
# The fixed images: CIFAR-10's first test images, which the app ships as its sample (so this runs anywhere).
IMAGES = 200


def measure(model, config, images: np.ndarray, batch: int = 100) -> list[dict]:
    """Per layer of `model` (a ViT of ours with its ViTConfig) over `images`: tau (per head, or one per
    layer; None without LSA), entropy (nats) and mean attention distance (input pixels), each the mean over
    the images, heads and queries exactly as the app's Attention tab computes them for one image
    (explorer.model.probe), and the mean attention a query pays to itself."""
    probe = Probe(model, config)
    entropy, distance, diagonal, counts = 0.0, 0.0, 0.0, 0
    for start in range(0, len(images), batch):
        attention = probe(images[start:start + batch]).attention  # (B, layers, heads, N, N)
        n = len(attention)
        entropy = entropy + attention_entropy(attention) * n
        distance = distance + mean_attention_distance(attention, config.grid_size, config.pixels_per_patch) * n
        diagonal = diagonal + np.diagonal(attention, axis1=-2, axis2=-1).mean(-1).mean(0) * n
        counts += n
    entropy, distance, diagonal = entropy / counts, distance / counts, diagonal / counts
    taus = tau_values(model)
    rows = []
    for layer in range(probe.num_layers):
        tau = taus[layer] if layer < len(taus) else None
        heads = len(entropy[layer])
        per_head = [float(tau[h] if len(tau) == heads else np.mean(tau)) for h in range(heads)] if tau else None
        rows.append({"layer": layer, "tau": tau, "tau_start": config.initial_tau if tau else None,
                     "entropy": float(entropy[layer].mean()), "distance_px": float(distance[layer].mean()),
                     "self_attention": float(diagonal[layer].mean()),
                     "heads": [{"head": h, "tau": per_head[h] if per_head else None,
                                "entropy": float(entropy[layer][h]), "distance_px": float(distance[layer][h]),
                                "self_attention": float(diagonal[layer][h])} for h in range(heads)]})
    return rows


def recipe_of(folder: Path, card: Card) -> str:
    """The recipe label of a kept model: the study's (checkpoints/study) names its own, a paper-scale model
    (checkpoints/paper) is PAPER_SCALE (PAPER_SCALE_AA under --recipe paper-autoaugment), and any other is taken
    for a shipped one, trained in stages."""
    if folder.parent.name == STUDY:
        return study_recipe(card) or LIGHT
    if folder.parent.name == PAPER:
        return PAPER_SCALE_AA if study_recipe(card) == "paper-autoaugment" else PAPER_SCALE
    return STAGED


def kept_models(checkpoints: Path, dataset: str = "cifar10") -> list[Path]:
    """The study's kept checkpoints, the shipped full-data 2x2 and the paper-scale models, smallest training
    set first."""
    folders = [p for p in sorted((checkpoints / "study").glob(f"{dataset}-*")) if (p / "explorer.json").is_file()]
    folders += [checkpoints / f"{dataset}-{v}" for v in ("vanilla", "lsa", "spt", "spt_lsa")
                if (checkpoints / f"{dataset}-{v}" / "explorer.json").is_file()]
    folders += [p for p in sorted((checkpoints / "paper").glob(f"{dataset}-*")) if (p / "explorer.json").is_file()]

    def key(p: Path):
        card = Card.from_json(json.loads((p / "explorer.json").read_text()))
        return (card.dataset.train_images, RECIPES.index(recipe_of(p, card)),
                list(ALL_NAMES).index(study_variant(card)))
    return sorted(folders, key=key)


def run(folders: list[Path], images: np.ndarray) -> tuple[list[dict], list[dict]]:
    """The tables' rows: every layer of every model in `folders`, and every head of every layer."""
    rows, heads = [], []
    for folder in folders:
        model, card = load_checkpoint(folder)
        config = ViTConfig.from_dict(card.config)
        recipe = recipe_of(folder, card)
        # its reference in the slots' lists where a name alone could be a shipped model's (paper/cifar10-vanilla)
        name = f"{folder.parent.name}/{folder.name}" if recipe in (PAPER_SCALE, PAPER_SCALE_AA) else folder.name
        for r in measure(model, config, images):
            tau = r["tau"]
            heads += [{"model": name, "variant": study_variant(card), "recipe": recipe,
                       "train_images": card.dataset.train_images, "layer": r["layer"], "head": h["head"],
                       "tau_ratio": h["tau"] / r["tau_start"] if h["tau"] else None, "entropy": h["entropy"],
                       "distance": h["distance_px"] / config.image_size, "self_attention": h["self_attention"],
                       "test_top1": card.metrics.test_top1} for h in r["heads"]]
            rows.append({"model": name, "variant": study_variant(card), "recipe": recipe,
                         "train_images": card.dataset.train_images, "layer": r["layer"],
                         "tau_mean": float(np.mean(tau)) if tau else None, "tau_min": min(tau) if tau else None,
                         "tau_max": max(tau) if tau else None, "tau_start": r["tau_start"],
                         "entropy": r["entropy"], "distance_px": r["distance_px"],
                         "distance_min_px": min(h["distance_px"] for h in r["heads"]),
                         "self_attention": r["self_attention"],
                         "self_attention_max": max(h["self_attention"] for h in r["heads"]),
                         "patches": config.num_patches,
                         "image_size": config.image_size,
                         "test_top1": card.metrics.test_top1})
    return rows, heads


def write_csv(rows: list[dict], path: Path, columns: tuple[str, ...] = COLUMNS) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if r.get(k) is None else (round(r[k], 6) if isinstance(r[k], float) else r[k]))
                             for k in columns})


def read_csv(path: Path) -> list[dict]:
    """mechanisms.csv or mechanisms_heads.csv as rows with numbers; a row without a recipe is the light one's."""
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            parsed = {k: (v if k in TEXT else None if v == "" else
                          int(v) if k in ("train_images", "layer", "head", "patches", "image_size") else float(v))
                      for k, v in row.items()}
            parsed["recipe"] = parsed.get("recipe") or LIGHT
            out.append(parsed)
    return out


def head_table(heads: list[dict]) -> str:
    """Per model and layer, the smallest head's normalised attention distance (how local the most local head
    is) and the mean over heads, with the heads' self-attention: both recipes side by side."""
    layers = sorted({h["layer"] for h in heads})
    lines = ["| recipe | train images | model | " + " | ".join(f"layer {k}: smallest / mean distance" for k in layers)
             + " | self-attention, most / mean | τ / √d_k, per head |",
             "|---|---:|---|" + "---:|" * len(layers) + "---:|---|"]
    for name in dict.fromkeys(h["model"] for h in heads):
        mine = [h for h in heads if h["model"] == name]
        cells = []
        for k in layers:
            d = [h["distance"] for h in mine if h["layer"] == k]
            cells.append(f"{min(d):.3f} / {np.mean(d):.3f}" if d else "–")
        share = [h["self_attention"] for h in mine]
        taus = [h["tau_ratio"] for h in mine if h["tau_ratio"] is not None]
        tau = "–" if not taus else f"{min(taus):.3f} to {max(taus):.3f}"
        first = mine[0]
        lines.append(f"| {first['recipe']} | {first['train_images']:,} | {ALL_NAMES[first['variant']]} | "
                     + " | ".join(cells) + f" | {100 * max(share):.1f} / {100 * np.mean(share):.1f} % | {tau} |")
    return "\n".join(lines)


def layer_table(rows: list[dict], sizes: list[int] | None = None) -> str:
    """Per model and layer (from mechanisms.csv's rows): the most local head's and the mean attention distance,
    over the image's side, at `sizes` (default: those where another recipe than the light one ran); "" when
    no row there has the most local head (a CSV written before that column)."""
    if sizes is None:
        sizes = sorted({r["train_images"] for r in rows if r.get("recipe") in ("paper", "cutmix")})
    chosen = [r for r in rows if r["train_images"] in sizes and r.get("distance_min_px") is not None
              and r.get("image_size")]
    if not chosen:
        return ""
    layers = sorted({r["layer"] for r in chosen})
    lines = ["| recipe | train images | model | " + " | ".join(f"layer {k}" for k in layers) + " |",
             "|---|---:|---|" + "---:|" * len(layers)]
    for name in dict.fromkeys(r["model"] for r in chosen):
        mine = {r["layer"]: r for r in chosen if r["model"] == name}
        first = next(iter(mine.values()))
        cells = [f"{mine[k]['distance_min_px'] / mine[k]['image_size']:.3f} / "
                 f"{mine[k]['distance_px'] / mine[k]['image_size']:.3f}" if k in mine else "–" for k in layers]
        lines.append(f"| {first.get('recipe') or LIGHT} | {first['train_images']:,} | {ALL_NAMES[first['variant']]} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_model(rows: list[dict]) -> list[dict]:
    """One summary per model: means over its layers, the temperatures' largest move from their start, and its
    most local head (the smallest head distance of any layer, over the image's side; None from a CSV written
    before that column)."""
    out = []
    for name in dict.fromkeys(r["model"] for r in rows):
        layers = [r for r in rows if r["model"] == name]
        taus = [r for r in layers if r["tau_mean"] is not None]
        move = (max(max(abs(r["tau_min"] / r["tau_start"] - 1), abs(r["tau_max"] / r["tau_start"] - 1))
                    for r in taus) if taus else None)
        local = [r["distance_min_px"] / r["image_size"] for r in layers
                 if r.get("distance_min_px") is not None and r.get("image_size")]
        selfish = [r["self_attention_max"] for r in layers if r.get("self_attention_max") is not None]
        out.append({"model": name, "variant": layers[0]["variant"], "recipe": layers[0].get("recipe") or LIGHT,
                    "train_images": layers[0]["train_images"],
                    "tau_ratio": float(np.mean([r["tau_mean"] / r["tau_start"] for r in taus])) if taus else None,
                    "tau_move": move,
                    "entropy": float(np.mean([r["entropy"] for r in layers])),
                    "distance_px": float(np.mean([r["distance_px"] for r in layers])),
                    "distance_min": min(local) if local else None,
                    "self_attention": float(np.mean([r["self_attention"] for r in layers])),
                    "self_attention_max": max(selfish) if selfish else None,
                    "tau_low": min(r["tau_min"] / r["tau_start"] for r in taus) if taus else None,
                    "tau_high": max(r["tau_max"] / r["tau_start"] for r in taus) if taus else None,
                    "test_top1": layers[0]["test_top1"]})
    return out


def markdown(rows: list[dict], images: int = IMAGES) -> str:
    lines = [f"Per model, means over its layers, on CIFAR-10's first {images} test images (the same for every "
             "model). τ / √d_k: the learned temperature against its start (1 = never moved); largest move: the "
             "farthest any layer's (or head's) τ went from √d_k; most local head: the smallest mean attention "
             "distance of any head in any layer, over the image's side (about 0.5 = spread over the image); "
             "self-attention: the attention a query pays to its own patch (what LSA's diagonal mask removes; 0 "
             "with the mask).", "",
             "| recipe | train images | model | τ / √d_k | largest τ move | entropy (nats) | mean distance (px) | "
             "most local head | self-attention | test top-1 |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m in per_model(rows):
        tau = "–" if m["tau_ratio"] is None else f"{m['tau_ratio']:.3f}"
        move = "–" if m["tau_move"] is None else f"{100 * m['tau_move']:.1f} %"
        local = "–" if m["distance_min"] is None else f"{m['distance_min']:.3f}"
        top1 = "–" if m["test_top1"] is None else f"{100 * m['test_top1']:.2f} %"
        lines.append(f"| {m['recipe']} | {m['train_images']:,} | {ALL_NAMES[m['variant']]} | {tau} | {move} | "
                     f"{m['entropy']:.3f} | {m['distance_px']:.2f} | {local} | {100 * m['self_attention']:.1f} % | "
                     f"{top1} |")
    return "\n".join(lines)


def _span(values, unit: str, digits: int = 2) -> str:
    low, high = f"{min(values):+.{digits}f}", f"{max(values):+.{digits}f}"
    return f"{low} {unit}" if low == high else f"{low} to {high} {unit}"


def _lsa_against_vit(models: list[dict], patches: int, bound: bool = True) -> str | None:
    """What LSA alone changes in entropy and distance against the ViT of the same size and recipe."""
    vit = {m["train_images"]: m for m in models if m["variant"] == "vanilla"}
    lsa = {m["train_images"]: m for m in models if m["variant"] in ("lsa", "lsa_head")}
    both = sorted(set(vit) & set(lsa))
    if not both:
        return None
    d_entropy = [lsa[n]["entropy"] - vit[n]["entropy"] for n in both]
    d_distance = [lsa[n]["distance_px"] - vit[n]["distance_px"] for n in both]
    most = f" (of at most ln {patches} = {np.log(patches):.2f})" if bound else ""
    return (f"LSA alone changes the attention entropy by {_span(d_entropy, 'nats')} against the ViT{most} and the "
            f"mean attention distance by {_span(d_distance, 'px')}, at {' and '.join(f'{n:,}' for n in both)} images")


def _recipe_paragraph(models: list[dict], light: list[dict], patches: int) -> str | None:
    """What the paper's recipe (and CutMix alone, on the ViT) did to attention against the light recipe, at
    the sizes where a paper-recipe model was kept: entropy, the most local head, self-attention, τ."""
    paper = [m for m in models if m["recipe"] == "paper"]
    if not paper:
        return None
    sizes = sorted({m["train_images"] for m in paper})
    at = [m for m in light if m["train_images"] in sizes]

    def pick(pool, variant):
        return next((m for m in pool if m["variant"] == variant), None)
    parts = []
    vit_light, vit_paper = pick(at, "vanilla"), pick(paper, "vanilla")
    vit_cutmix = pick([m for m in models if m["recipe"] == "cutmix" and m["train_images"] in sizes], "vanilla")
    where = " and ".join(f"{n:,}" for n in sizes)
    if vit_light and vit_paper:
        sharper = "sharper" if vit_paper["entropy"] < vit_light["entropy"] else "no sharper"
        text = (f"**Under the paper's recipe** (CutMix and mixup, RandAugment, random erasing, repeated "
                f"augmentation, stochastic depth; {where} images), the ViT's attention is {sharper} (entropy "
                f"{vit_light['entropy']:.2f} → {vit_paper['entropy']:.2f} nats)")
        local = [m["distance_min"] for m in (vit_light, vit_paper, vit_cutmix) if m is not None]
        if None not in local:
            # "local" as the cited study saw it: the most local head's distance at least a fifth shorter
            more = vit_paper["distance_min"] < 0.8 * vit_light["distance_min"]
            text += (f" {'and more' if more else 'but hardly more'} local: its most local head's mean distance is "
                     f"{vit_light['distance_min']:.3f} of the image's "
                     f"side under the light recipe and {vit_paper['distance_min']:.3f} under the paper's")
            if vit_cutmix is not None:
                text += f", {vit_cutmix['distance_min']:.3f} with CutMix alone"
            text += (f" (arXiv 2605.16390 measured {CITED[0]} → {CITED[1]} with CutMix, on CIFAR-100 with a larger "
                     f"ViT)")
        shares = [f"{100 * m['self_attention']:.1f} %" for m in (vit_light, vit_paper)]
        parts.append(text + f"; a query gives its own patch {shares[0]} and {shares[1]} of its attention.")
    taus = [m["tau_ratio"] for m in paper if m["tau_ratio"] is not None]
    if taus:
        parts.append(f"τ ends at {min(taus):.3f} to {max(taus):.3f} of √d_k there too.")
    lsa = _lsa_against_vit(paper, patches, bound=False)
    if lsa:
        parts.append(lsa[0].upper() + lsa[1:] + " under the paper's recipe.")
    return " ".join(parts) if parts else None


def _paper_scale_paragraph(models: list[dict], patches: int) -> str | None:
    """What attention looks like in the paper-scale models (PAPER_SCALE), where the paper asked its question:
    how much a ViT's query gives its own patch (what LSA's mask would remove), how sharp and how local its
    attention is, and how far LSA's temperatures moved."""
    scale = [m for m in models if m["recipe"] in (PAPER_SCALE, PAPER_SCALE_AA)]
    if not scale:
        return None
    both = len({m["recipe"] for m in scale}) > 1  # then each model says its augmentation

    def top1(m):
        return "" if m["test_top1"] is None else f", {100 * m['test_top1']:.2f} % on the test set"
    parts = []
    for m in scale:
        name = ALL_NAMES[m["variant"]] + ((" with AutoAugment" if m["recipe"] == PAPER_SCALE_AA else
                                            " with RandAugment") if both else "")
        local = "" if m["distance_min"] is None else (f", its most local head's mean distance {m['distance_min']:.3f} "
                                                       "of the image's side")
        text = (f"the {name}{top1(m)}: entropy {m['entropy']:.2f} nats (of at most ln {patches} = "
                f"{np.log(patches):.2f}), mean distance {m['distance_px']:.1f} px{local}")
        if m["tau_ratio"] is None:
            text += (f"; a query gives its own patch {100 * m['self_attention']:.1f} % of its attention (even "
                     f"attention: {100 / patches:.2f} %)")
        else:
            text += (f"; τ ends at {m['tau_ratio']:.3f} of √d_k on average (the largest move "
                     f"{100 * m['tau_move']:.1f} %)")
        parts.append(text)
    lsa = _lsa_against_vit([m for m in scale if m["recipe"] == PAPER_SCALE], patches, bound=False)
    tail = f" {lsa[0].upper() + lsa[1:]}." if lsa else ""
    return (f"**At the paper's scale** (width 192, 9 blocks, 12 heads: 2.7 M parameters; the paper's recipe for "
            f"100 epochs on {scale[0]['train_images']:,} images, trained on a GPU; `checkpoints/paper`): "
            + "; ".join(parts) + "." + tail)


# The three settings the answer sets side by side: (recipe label, words, parameters).
SETTINGS = ((LIGHT, "the light recipe (crop and flip)", "0.2 M"), ("paper", "the paper's recipe", "0.2 M"),
            (PAPER_SCALE, "the paper's recipe at the paper's scale", "2.7 M"))


# The README's copy of settings_table, kept by `write` between these markers.
BEGIN, END = "<!-- three settings: written by `python -m explorer.study mechanisms` -->", "<!-- /three settings -->"


def with_settings(text: str, table: str) -> str:
    """`text` (a page holding the markers) with settings_table's `table` between them; unchanged without them."""
    if BEGIN not in text or END not in text:
        return text
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{rest.split(END, 1)[1]}"


def _gap_words(gaps: dict[int, dict]) -> str:
    """A paired gap per size, in points with the seeds it is over: "+6.62 at 1,000 to +1.03 at 20,000 (3-5 seeds)"."""
    if not gaps:
        return "not trained"
    sizes = sorted(gaps)
    seeds = sorted({len(gaps[n]["gaps"]) for n in sizes})
    over = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    cells = [f"{100 * gaps[n]['mean']:+.2f} at {n:,}" for n in (sizes if len(sizes) <= 2 else (sizes[0], sizes[-1]))]
    return f"{' and '.join(cells) if len(sizes) <= 2 else ' to '.join(cells)} ({over} seed{'s' if over != '1' else ''})"


def _over_vit(vit: list[dict], group: list[dict]) -> str:
    """One model's test top-1 over the ViT's at the paper's scale (one seed each), or "to train"."""
    found = [m for m in group if m["test_top1"] is not None]
    if not vit or vit[0]["test_top1"] is None or not found:
        return "to train"
    return f"{100 * (found[0]['test_top1'] - vit[0]['test_top1']):+.2f} (one seed)"


def settings_table(rows: list[dict], results: list[dict]) -> str:
    """The answer at SETTINGS, a row each: the models, what SPT + LSA and LSA alone add to the ViT's test
    top-1 (the study's paired gaps from `results`, results.csv's rows; the paper-scale pair's cards), how far
    τ moved, the ViT's most self-attending head (what LSA's mask forbids) and the most local heads."""
    models = per_model(rows)
    patches = rows[0].get("patches") or 64 if rows else 64
    lines = ["| setting | SPT + LSA − ViT (points) | LSA alone − ViT (points) | τ / √d_k, every layer and head | "
             "the ViT's most self-attending head | most local head, ViT / SPT + LSA |",
             "|---|---|---|---|---|---|"]
    for recipe, words, params in SETTINGS:
        mine = [m for m in models if m["recipe"] == recipe and (recipe == PAPER_SCALE or m["train_images"] < FULL)]
        if not mine:
            continue
        vit = [m for m in mine if m["variant"] == "vanilla"]
        pair = [m for m in mine if m["variant"] in ("spt_lsa", "spt_lsa_head")]
        sizes = sorted({m["train_images"] for m in mine})
        if recipe == PAPER_SCALE:
            gain = _over_vit(vit, pair)
            lsa = _over_vit(vit, [m for m in mine if m["variant"] in ("lsa", "lsa_head")])
        else:
            b, alone = ("spt_lsa", "lsa") if recipe == LIGHT else ("spt_lsa_head", "lsa_head")
            gain = _gap_words(paired_gaps(results, "vanilla", b, recipe=recipe))
            lsa = _gap_words(paired_gaps(results, "vanilla", alone, recipe=recipe))
        lows = [m["tau_low"] for m in mine if m.get("tau_low") is not None]
        highs = [m["tau_high"] for m in mine if m.get("tau_high") is not None]
        tau = f"{min(lows):.2f} to {max(highs):.2f}" if lows else "–"
        shares = [m["self_attention_max"] for m in vit if m.get("self_attention_max") is not None]
        # No-break spaces: a narrow column never leaves "%)" alone on a line.
        share = f"{100 * max(shares):.1f}\u00a0% (even:\u00a0{100 / patches:.2f}\u00a0%)" if shares else "–"
        local = [min((m["distance_min"] for m in group if m["distance_min"] is not None), default=None)
                 for group in (vit, pair)]
        local_words = " / ".join("–" if v is None else f"{v:.3f}" for v in local)
        images = f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,} to {sizes[-1]:,}"
        lines.append(f"| {params}, {words}, {images} images | {gain} | {lsa} | {tau} | {share} | {local_words} |")
    return "\n".join(lines)


def three_settings(rows: list[dict], results: list[dict]) -> str:
    """The answer first, at SETTINGS side by side, with its caveats in words (the Small data tab's top, the
    README's headline, MECHANISMS.md)."""
    table = settings_table(rows, results)
    if table.count("\n") < 2:
        return ""
    scale = [m for m in per_model(rows) if m["recipe"] == PAPER_SCALE]
    caveat = ""
    if scale:
        caveat = (" At the paper's scale the gain is larger than the paper's (+0.95 on CIFAR-10, 93.58 → 94.53 %) "
                  "because our ViT under-fits under Keras' RandAugment (docs/paper-scale.md), and SPT alone and LSA "
                  "alone at that scale are still to be trained, so this pair does not yet say which part carries "
                  "the gain; it is one seed.")
    return ("**What SPT + LSA does, at three settings** (test top-1 on all 10,000 CIFAR-10 test images; attention "
            f"on the first {IMAGES} test images; the most local head: its mean attention distance over the image's "
            "side, 0 = a query attends to its own patch; the mask makes a query's share of its own patch 0):\n\n"
            f"{table}\n\nAt 0.2 M parameters the gain is SPT's and LSA barely acts: its temperatures stay near √d_k "
            "and the ViT's heads give their own patch little, so the mask has little to remove. At the paper's "
            "scale LSA visibly acts: τ moves per head (the first layers soften, the last sharpen), and the ViT grows "
            "a first-layer head that attends to its own patch, exactly what the mask forbids." + caveat)


def answer(rows: list[dict]) -> str:
    """What LSA does in the study, in words, with the numbers of `rows` (what the Small data tab and the README
    say): under the light recipe, how far τ moved, how much self-attention the mask had to remove, what LSA alone
    changes in entropy and distance; under the paper's recipe, where its models were kept, what the recipe did
    to attention; and where the setting differs from the paper's."""
    models = per_model(rows)
    light = [m for m in models if m["train_images"] < FULL and m["recipe"] == LIGHT]
    taus = [m["tau_ratio"] for m in light if m["tau_ratio"] is not None]
    moves = [m["tau_move"] for m in light if m["tau_move"] is not None]
    vit = [m for m in light if m["variant"] == "vanilla"]
    patches = rows[0].get("patches") or 64 if rows else 64
    parts = []
    if taus:
        parts.append(f"**The learned temperature hardly moves**: under the light recipe (crop and flip), averaged "
                     f"over layers, τ ends at {min(taus):.3f} to {max(taus):.3f} of its start √d_k (no layer or "
                     f"head moves by more than {100 * max(moves):.0f} %), so softmax is at most a few percent "
                     f"sharper than a ViT's.")
    if vit:
        shares = [100 * m["self_attention"] for m in vit]
        parts.append(f"**The diagonal mask removes almost nothing**: a ViT's query gives its own patch "
                     f"{min(shares):.1f} to {max(shares):.1f} % of its attention, where attention spread evenly over "
                     f"the {patches} patches gives {100 / patches:.2f} %.")
    lsa = _lsa_against_vit(light, patches)
    if lsa:
        parts.append(f"**So attention is no sharper and no more local**: {lsa}.")
    recipe = _recipe_paragraph(models, light, patches)
    if recipe:
        parts.append(recipe)
    scale = _paper_scale_paragraph(models, patches)
    if scale:
        parts.append(scale)
    paper_sizes = sorted({m["train_images"] for m in models if m["recipe"] == "paper"})
    but = ", but for the paper-scale models above" if scale else ""
    parts.append(f"Where the setting differs from the paper's{but}: a ViT of width 64, 6 blocks and 4 heads (0.2 M "
                 "parameters) against width 192, 9 blocks and 12 heads (2.7 M); CIFAR-10 subsets against all of "
                 "CIFAR-100 and Tiny-ImageNet; "
                 + (f"the paper's recipe at {' and '.join(f'{n:,}' for n in paper_sizes)} images only, beside "
                    "50-100 epochs of crop and flip at every size." if paper_sizes else
                    "50-100 epochs of crop and flip against 100 epochs with AutoAugment, CutMix, Mixup, random "
                    "erasing, repeated augmentation and stochastic depth."))
    return "\n\n".join(parts)


def figure(rows: list[dict]):
    """Four panels against training-set size, a line per variant: τ / √d_k, entropy, mean distance and
    self-attention, each the mean over the model's layers."""
    from matplotlib.figure import Figure

    from explorer.analysis.plots import model_color
    # one recipe per line: the light study's models and the shipped (staged) ones; the other recipes are
    # layer_figure's
    models = [m for m in per_model(rows) if m["recipe"] in (LIGHT, STAGED)]
    fig = Figure(figsize=(11.0, 7.0), layout="constrained")
    axes = fig.subplots(2, 2)
    panels = (("tau_ratio", "τ / √d_k (1 = never moved)", 1.0), ("entropy", "attention entropy (nats)", 1.0),
              ("distance_px", "mean attention distance (px)", 1.0), ("self_attention", "self-attention (%)", 100.0))
    for ax, (key, label, scale) in zip(axes.flat, panels, strict=True):
        for variant in ALL_NAMES:
            points = sorted((m["train_images"], m[key] * scale) for m in models
                            if m["variant"] == variant and m[key] is not None)
            if not points:
                continue
            color = model_color(VARIANT_COLOR[variant])
            study = [(x, y) for x, y in points if x < FULL]
            if study:
                xs, ys = zip(*study, strict=True)
                ax.plot(xs, ys, marker="o", color=color, label=ALL_NAMES[variant],
                        linestyle="--" if variant.endswith("_head") else "-")
            for x, y in points:
                if x >= FULL:  # the shipped models: another, staged recipe, so drawn apart
                    ax.plot([x], [y], marker="*", markersize=11, color=color, linestyle="none",
                            label=None if study else ALL_NAMES[variant])
        if key == "tau_ratio":
            ax.axhline(1.0, color="0.5", linewidth=0.8)
        if key == "self_attention":  # what a query would give itself attending evenly to every patch
            grid = rows[0].get("patches") or 64
            ax.axhline(100.0 / grid, color="0.5", linewidth=0.8, linestyle=":")
            ax.annotate("even attention over all N patches (1/N)", (0.35, 100.0 / grid),
                        xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(0, -12),
                        fontsize=9, color="0.35")
        ax.set_xscale("log")
        ax.set_xlabel("training images")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    handles, labels = [], []
    for ax in axes.flat:  # every variant once, wherever it is drawn
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=10)
    fig.suptitle("What LSA does to attention (means over layers)\nthe small-data study's kept models: lines, one "
                 "recipe; the shipped 2x2 at 45,000 images: stars, a staged recipe", fontsize=11)
    return fig


RECIPE_STYLE = {LIGHT: ("-", "o"), "cutmix": (":", "^"), "paper": ("--", "s")}


def layer_figure(rows: list[dict]):
    """Per layer, at each size where a model of another recipe than the light one was kept: the most local
    head's and the mean attention distance (over the image's side), the entropy and τ / √d_k, a line per model
    (colour: the variant; line: the recipe). None when no such size has models."""
    from matplotlib.figure import Figure

    from explorer.analysis.plots import model_color
    sizes = sorted({r["train_images"] for r in rows if r.get("recipe") in ("paper", "cutmix")})
    chosen = [r for r in rows if r["train_images"] in sizes and (r.get("recipe") or LIGHT) in RECIPE_STYLE]
    if not chosen:
        return None
    fig = Figure(figsize=(11.0, 7.5), layout="constrained")
    axes = fig.subplots(2, 2)
    panels = (("distance_min_px", "most local head: mean distance / side", True),
              ("distance_px", "mean attention distance / side", True), ("entropy", "attention entropy (nats)", False),
              ("tau_ratio", "τ / √d_k, mean over heads (1 = never moved)", False))
    for ax, (key, label, per_side) in zip(axes.flat, panels, strict=True):
        for name in dict.fromkeys(r["model"] for r in chosen):
            mine = sorted((r for r in chosen if r["model"] == name), key=lambda r: r["layer"])
            first = mine[0]
            if key == "tau_ratio":
                ys = [None if r["tau_mean"] is None else r["tau_mean"] / r["tau_start"] for r in mine]
            elif per_side:
                ys = [None if r.get(key) is None or not r.get("image_size") else r[key] / r["image_size"]
                      for r in mine]
            else:
                ys = [r[key] for r in mine]
            if all(y is None for y in ys):
                continue
            recipe = first.get("recipe") or LIGHT
            line, marker = RECIPE_STYLE[recipe]
            sized = f"{first['train_images']:,}, " if len(sizes) > 1 else ""
            ax.plot([r["layer"] for r in mine], ys, linestyle=line, marker=marker,
                    color=model_color(VARIANT_COLOR[first["variant"]]),
                    label=f"{ALL_NAMES[first['variant']]} ({sized}{RECIPE_WORDS[recipe]})")
        if key == "tau_ratio":
            ax.axhline(1.0, color="0.5", linewidth=0.8)
        if per_side:  # from 0 (a query attending to its own position): how local, on the cited study's scale
            ax.set_ylim(0.0, 0.6)
        if key == "distance_min_px":
            for value, words in zip(CITED, ("without CutMix", "with CutMix"), strict=True):
                ax.axhline(value, color="0.5", linewidth=0.8, linestyle=":")
                ax.annotate(f"arXiv 2605.16390, CIFAR-100, {words}: {value}", (0.02, value),
                            xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(0, 3),
                            fontsize=8, color="0.35")
        ax.set_xlabel("layer")
        ax.set_ylabel(label)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    handles, labels = [], []
    for ax in axes.flat:
        for h, text in zip(*ax.get_legend_handles_labels(), strict=True):
            if text not in labels:
                handles.append(h)
                labels.append(text)
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=9)
    fig.suptitle(f"What the recipe does to attention, layer by layer ({' and '.join(f'{n:,}' for n in sizes)} "
                 f"training images; on CIFAR-10's first {IMAGES} test images)\nsolid: light recipe; dashed: the "
                 "paper's recipe; dotted: light recipe + CutMix (the ViT only)", fontsize=11)
    return fig


def write(checkpoints: Path, out: Path, data_dir: str | None = None, images: int = IMAGES,
          settings: Settings | None = None) -> list[Path]:
    """study/mechanisms.csv, MECHANISMS.md and mechanisms.png from every kept model; the CSV also beside the
    kept checkpoints, where the app (and a Space, which is not sent the study folder) reads it."""
    from PIL import Image

    from explorer.analysis.plots import figure_to_array
    x = TestImages(data_dir, settings=settings).dataset("cifar10", need=images).x_test[:images]
    rows, heads = run(kept_models(checkpoints), x)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "mechanisms.csv")
    write_csv(rows, checkpoints / "study" / "mechanisms.csv")
    write_csv(heads, out / "mechanisms_heads.csv", HEAD_COLUMNS)
    layers = layer_figure(rows)
    per_layer = ("" if layers is None else
                 "## Per layer: what the recipe does to attention\n\nAt the sizes where models of the paper's recipe "
                 "(and the ViT with CutMix alone) were kept, every layer of every model there, beside the light "
                 "recipe's:\n\n![per layer, both recipes](mechanisms_layers.png)\n\n")
    results_csv = checkpoints / "study" / "results.csv"
    results = read_results(results_csv) if results_csv.is_file() else []
    settings_text = three_settings(rows, results)
    for page in (out.parent / "README.md", out.parent / "docs" / "results.md"):  # the project's, beside study/
        if page.is_file() and BEGIN in page.read_text():
            page.write_text(with_settings(page.read_text(), settings_table(rows, results)))
    (out / "MECHANISMS.md").write_text(
        "# What LSA does to attention\n\nWritten by `python -m explorer.study "
        f"mechanisms` (explorer/study/mechanisms.py) from the models it measures; the Small data tab says the "
        f"same.\n\n{settings_text}\n\n{answer(rows)}\n\n{markdown(rows, images)}\n\n"
        f"![mechanisms](mechanisms.png)\n\n{per_layer}"
        "## Per layer and head: how local the most local head is\n\nMean attention distance over the image's side "
        "(0 = a query attends to its own position, about 0.5 = spread over the image), for each layer the smallest "
        "head's and the mean over heads (the smallest head's is the measure of arXiv 2605.16390, which found CutMix "
        f"alone makes early heads local); self-attention per head; on the same {images} images "
        f"(study/mechanisms_heads.csv):\n\n{head_table(heads)}\n")
    written = [out / "mechanisms.csv", checkpoints / "study" / "mechanisms.csv", out / "mechanisms_heads.csv",
               out / "MECHANISMS.md", out / "mechanisms.png"]
    Image.fromarray(figure_to_array(figure(rows))).save(out / "mechanisms.png")
    if layers is not None:
        Image.fromarray(figure_to_array(layers)).save(out / "mechanisms_layers.png")
        written.append(out / "mechanisms_layers.png")
    return written
