"""The Trust tab's pictures and files: confusion matrices side by side, reliability diagrams, the corruption
curves, the deletion/insertion curves (matplotlib, off-screen), and what a download holds (PNG, CSV, JSON).
Takes plain numbers and the report dataclasses; imports nothing from keras."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from explorer.analysis.plots import figure_to_array, fitted_title, model_color

# Inches (100 dpi): a figure of two panels is 880 px wide, shown at 0.8 of its size or more in the 704 px
# that the tabs have in an 800 px window.
PAIR_WIDTH = 8.8


def confusion_figure(matrices, class_names, titles) -> Figure:
    """Each model's confusion matrix (rows: true class; columns: its answer), as row shares, counts written in."""
    fig = Figure(figsize=(PAIR_WIDTH / 2 * len(matrices), 4.4), layout="constrained")
    for k, matrix in enumerate(matrices):
        ax = fig.add_subplot(1, len(matrices), k + 1)
        m = np.asarray(matrix, np.float64)
        shares = m / np.maximum(m.sum(1, keepdims=True), 1)
        ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                if m[i, j]:
                    ax.text(j, i, f"{int(m[i, j])}", ha="center", va="center", fontsize=7,
                            color="white" if shares[i, j] > 0.5 else "black")
        ax.set_xticks(range(len(class_names)), class_names, rotation=60, ha="right", fontsize=8)
        ax.set_yticks(range(len(class_names)), class_names, fontsize=8)
        ax.set_xlabel("answer")
        ax.set_ylabel("true class")
    _titles_in_their_panels(fig, titles)
    return fig


def _titles_in_their_panels(fig: Figure, titles: list[str], after: list[str] | None = None) -> None:
    """Each axes' title (a model's name: long for a fine-tuned one) wrapped to stay over its own share of the
    figure's width: centred over axes that long class names push right, it would otherwise leave the figure."""
    fig.draw_without_rendering()  # constrained layout places the axes first
    axes, width = fig.axes[:len(titles)], fig.bbox.width
    share = width / len(axes)
    for k, (ax, title) in enumerate(zip(axes, titles, strict=True)):
        box = ax.get_window_extent()
        centre = (box.x0 + box.x1) / 2
        room = 0.95 * 2 * max(1.0, min(centre - k * share, (k + 1) * share - centre))
        fitted_title(ax, title, after=after[k] if after else "", limit=room, fontsize=9)


def reliability_figure(reliabilities, titles, bins: int) -> Figure:
    """Each model's reliability diagram: accuracy per confidence bin against the diagonal, ECE in the title."""
    fig = Figure(figsize=(PAIR_WIDTH / 2 * len(reliabilities), 3.6), layout="constrained")
    for k, r in enumerate(reliabilities):
        ax = fig.add_subplot(1, len(reliabilities), k + 1)
        centres = (r.edges[:-1] + r.edges[1:]) / 2
        width = r.edges[1] - r.edges[0]
        filled = r.counts > 0
        ax.bar(centres[filled], np.nan_to_num(r.accuracy[filled]), width=width * 0.95, color=model_color(k),
               alpha=0.8, label="accuracy")
        ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfectly calibrated")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel(f"confidence (top-1 probability, {bins} equal bins)")
        ax.set_ylabel("accuracy")
        ax.legend(loc="upper left", fontsize=8)
    _titles_in_their_panels(fig, titles, [f"ECE {100 * r.ece:.1f} %" for r in reliabilities])
    return fig


def corruption_figure(table) -> Figure:
    """Accuracy against severity, averaged over the 15 corruptions, clean accuracy at severity 0."""
    fig = Figure(figsize=(5.2, 3.6), layout="constrained")
    ax = fig.add_subplot()
    x = [0, *table.severities]
    for i, name in enumerate(table.models):
        ax.plot(x, [table.clean[i], *table.accuracy[i].mean(0)], "o-", color=model_color(i), label=name)
    ax.set_xlabel("severity (0 = clean)")
    ax.set_ylabel("top-1 accuracy, mean of 15 corruptions")
    ax.legend(fontsize=8)
    return fig


def faithfulness_figure(report, kinds) -> Figure:
    """Deletion (left) and insertion (right) curves per model (colour) and map kind (line style)."""
    styles = ("-", "--", "-.", ":")
    fig = Figure(figsize=(PAIR_WIDTH, 4.6), layout="constrained")
    for p, mode in enumerate(("deletion", "insertion")):
        ax = fig.add_subplot(1, 2, p + 1)
        for i, m in enumerate(report.models):
            for kind, style in zip(kinds, styles, strict=False):
                ax.plot(report.fractions, getattr(m, mode)[kind], style, color=model_color(i),
                        label=f"{m.name}: {kind}")
        ax.set_xlabel("share of patches " + ("removed" if mode == "deletion" else "put back"))
        ax.set_ylabel("probability of the model's answer")
        ax.set_title(mode, fontsize=9)
    # Below both panels, at the axes' type size: eight lines do not fit inside a panel legibly.
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=4, fontsize=8)
    return fig


def picture(fig: Figure) -> np.ndarray:
    return figure_to_array(fig)


def write_files(folder, summary: dict | None, pictures: dict[str, np.ndarray], corruption_rows=None,
                corruption_header=None, faithfulness_rows=None, faithfulness_header=None,
                cards: dict[str, dict] | None = None) -> list[str]:
    """What the tab shows, as files in `folder`: trust.json (every number), confusion CSVs (one per model),
    corruptions.csv, faithfulness.csv, each picture as PNG, and each model's card (`cards`: {"A": card's
    JSON, ...}) as card_A.json, card_B.json. Returns the paths."""
    from PIL import Image
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    if summary is not None:
        path = folder / "trust.json"
        path.write_text(json.dumps(summary, indent=1))
        out.append(path)
        for tag, m in zip("AB", summary["models"], strict=False):
            path = folder / f"confusion_{tag}.csv"
            with open(path, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["true \\ answer", *summary["class_names"]])
                for name, row in zip(summary["class_names"], m["confusion"], strict=True):
                    w.writerow([name, *row])
            out.append(path)
    for name, rows, header in (("corruptions.csv", corruption_rows, corruption_header),
                               ("faithfulness.csv", faithfulness_rows, faithfulness_header)):
        if rows:
            path = folder / name
            with open(path, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(header)
                w.writerows(rows)
            out.append(path)
    for name, array in pictures.items():
        if array is not None:
            path = folder / f"{name}.png"
            Image.fromarray(np.asarray(array)).save(path)
            out.append(path)
    for tag, card in (cards or {}).items():
        path = folder / f"card_{tag}.json"
        path.write_text(json.dumps(card, indent=1))
        out.append(path)
    return [str(p) for p in out]
