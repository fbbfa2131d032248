"""Plots for the explorer (matplotlib, drawn off-screen): per-layer attention distance and entropy, the
what-if, tau per layer (and per head) and over training, training curves; one colour per model across the
app; a cache of drawn plots (PlotCache)."""

from __future__ import annotations

import textwrap
import threading
from collections import OrderedDict

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

MODEL_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
NO_LSA_TEXT = "no LSA layers in the loaded models"
_LINESTYLES = ("-", "--", ":", "-.")


def model_color(index: int) -> str:
    """Colour of the index-th model: blue, orange, then the rest of tab10."""
    return MODEL_COLORS[index % len(MODEL_COLORS)]


# 520 px wide at 100 dpi: two side by side in a wide window, one per row in a narrow one (the UI's rows of
# plots wrap below 380 px each), and either way shown at 80 % of their size or more.
WIDTH = 5.2


def _figure(figsize: tuple[float, float] = (WIDTH, 3.6)) -> Figure:
    return Figure(figsize=figsize, layout="constrained")


def _no_data(fig: Figure, text: str) -> Figure:
    ax = fig.axes[0] if fig.axes else fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.35")
    return fig


def _label_axes(ax, xlabel: str, ylabel: str, title: str | None = None) -> None:
    """The app's plot convention: labelled axes, integer ticks along x (layers, epochs), a light grid."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)


def _epoch_axis(ax, epochs) -> None:
    """Integer epochs only; a run of one or two epochs gets half an epoch either side, not matplotlib's
    few per cent around a single point (an axis from 0.96 to 1.04)."""
    epochs = [float(e) for e in epochs]
    if epochs and max(epochs) - min(epochs) < 2:
        ax.set_xlim(min(epochs) - 0.5, max(epochs) + 0.5)
    ax.xaxis.get_major_locator().set_params(integer=True, min_n_ticks=1)


def _legend_outside(ax, **kwargs) -> None:
    """The legend to the right of the axes, where it covers no curve."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)


def _legend_below(fig: Figure, ax, **kwargs) -> None:
    """The axes' legend under the figure, where it covers no curve and leaves the axes the figure's width."""
    handles, labels = kwargs.pop("handles", None), None
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        _fitted_legend(fig, handles, labels if labels is not None else [h.get_label() for h in handles],
                       kwargs.pop("ncols", min(len(handles), 3)), **kwargs)


def _fitted_legend(fig: Figure, handles, labels, ncols: int, groups: list[int] | None = None, **kwargs):
    """A legend under the figure inside its width: fewer columns while it is wider (long names: fine-tuned
    models, four LSA models), and names wrapped when even one column is. `groups` (the sizes of consecutive
    runs of entries, in order) reads the legend by rows, each group starting a row of its own."""
    renderer = FigureCanvasAgg(fig).get_renderer()  # the canvas the figure is drawn with (see `drawn`)
    for n in range(max(1, ncols), 0, -1):
        shown = _in_rows(handles, labels, n, groups) if groups and n > 1 else (handles, labels)
        legend = fig.legend(*shown, loc="outside lower center", fontsize="small", ncols=n, **kwargs)
        if legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            return legend
        legend.remove()
    chars = max(12, int(len(max(labels, key=len)) * 0.98 * fig.bbox.width / legend.get_window_extent(renderer).width))
    wrapped = [textwrap.fill(label, chars, break_on_hyphens=False) for label in labels]
    return fig.legend(handles, wrapped, loc="outside lower center", fontsize="small", ncols=1, **kwargs)


def _in_rows(handles, labels, n: int, groups: list[int]) -> tuple[list, list]:
    """The entries reordered so that a legend of `n` columns (matplotlib fills its columns first) reads them
    by rows, each group starting a row: blank entries fill a group's last row."""
    cells, start = [], 0
    for size in groups:
        cells += list(zip(handles[start:start + size], labels[start:start + size], strict=True))
        cells += [(Line2D([], [], linestyle="none"), "")] * (-size % n)
        start += size
    rows = len(cells) // n
    ordered = [cells[r * n + c] for c in range(n) for r in range(rows)]
    return [h for h, _ in ordered], [label for _, label in ordered]


def fitted_title(ax, text: str, share: float = 0.8, after: str = "", limit: float | None = None, **kwargs) -> None:
    """The axes' title wrapped to `share` of the figure's width (or `limit` pixels): a longer one would narrow
    the axes (constrained layout keeps a title inside the figure) or leave it. `after`: a last line of its own
    (a measure's value)."""
    fig = ax.figure
    renderer = FigureCanvasAgg(fig).get_renderer()
    limit, chars = limit or share * fig.bbox.width, len(text)
    tail = f"\n{after}" if after else ""
    title = ax.set_title(text + tail, **kwargs)
    while (width := title.get_window_extent(renderer).width) > limit and chars > 12:
        chars = max(12, min(chars - 1, int(chars * limit / width)))
        title.set_text(textwrap.fill(text, chars, break_on_hyphens=False) + tail)


def _per_layer_plot(per_model: dict[str, np.ndarray], ylabel: str, title: str) -> Figure:
    """Each model's per-layer mean over heads as a line, its heads as small dots of the same colour."""
    fig = _figure()
    ax = fig.add_subplot()
    for k, (name, values) in enumerate(per_model.items()):
        v = np.asarray(values, np.float64)
        if v.ndim == 1:
            v = v[:, None]
        layers = np.arange(v.shape[0])
        color = model_color(k)
        ax.plot(layers, np.nanmean(v, axis=1), color=color, marker="o", label=name)
        ax.scatter(np.repeat(layers, v.shape[1]), v.ravel(), color=color, s=12, alpha=0.45, linewidths=0)
    _label_axes(ax, "layer", ylabel, title)
    if per_model:
        _legend_below(fig, ax, ncols=min(len(per_model), 2))
    return fig


def plot_attention_distance(per_model: dict[str, np.ndarray], pixels_label: str = "pixels") -> Figure:
    """Mean attention distance per layer for each model's (L, H) array; dots are single heads."""
    return _per_layer_plot(per_model, f"mean attention distance ({pixels_label})", "Attention distance")


def plot_entropy(per_model: dict[str, np.ndarray]) -> Figure:
    """Attention entropy (nats) per layer for each model's (L, H) array; dots are single heads."""
    return _per_layer_plot(per_model, "attention entropy (nats)", "Attention entropy")


def plot_what_if(entropy: dict[str, tuple[np.ndarray, np.ndarray]],
                 distance: dict[str, tuple[np.ndarray, np.ndarray]]) -> Figure:
    """Entropy and mean attention distance per layer (mean over heads), learned solid, what-if dashed.

    Each dict maps a model's name to its (learned, what-if) pair of (L, H) arrays.
    """
    fig = _figure((WIDTH, 5.6))
    axes = fig.subplots(2, 1)
    panels = ((axes[0], entropy, "attention entropy (nats)", "Entropy"),
              (axes[1], distance, "mean attention distance (pixels)", "Attention distance"))
    for ax, per_model, ylabel, title in panels:
        for k, (name, (learned, changed)) in enumerate(per_model.items()):
            for values, style, tag in ((learned, "-", "learned"), (changed, "--", "what if")):
                v = np.asarray(values, np.float64).reshape(len(values), -1)
                ax.plot(np.arange(len(v)), v.mean(1), color=model_color(k), linestyle=style,
                        marker="o" if style == "-" else "s", markersize=4, label=f"{name}: {tag}")
        _label_axes(ax, "layer", ylabel, title)
    if entropy:  # one legend for both panels, below them: inside, it covered a what-if curve
        _fitted_legend(fig, *axes[0].get_legend_handles_labels(), ncols=2)
    return fig


def plot_tau(per_model: dict[str, list[list[float]]], initial: dict[str, float]) -> Figure:
    """Learned LSA temperature per layer (dots per head), dashed at each model's initial sqrt(d_k)."""
    fig = _figure()
    ax = fig.add_subplot()
    # Colours follow the model's position among all loaded models, so they match the other plots.
    shown = [(k, name, tau) for k, (name, tau) in enumerate(per_model.items()) if tau]
    if not shown:
        return _no_data(fig, NO_LSA_TEXT)
    for k, name, tau in shown:
        color = model_color(k)
        layers = np.arange(len(tau))
        ax.plot(layers, [float(np.mean(t)) for t in tau], color=color, marker="o", label=name)
        xs = [layer for layer, t in zip(layers, tau, strict=True) if len(t) > 1 for _ in t]
        ys = [v for t in tau if len(t) > 1 for v in t]
        if xs:
            ax.scatter(xs, ys, color=color, s=12, alpha=0.45, linewidths=0)
    # One dashed line per distinct initial value: in its model's colour when it is that model's alone.
    starts: dict[float, list[int]] = {}
    for k, name, _ in shown:
        if name in initial:
            starts.setdefault(float(initial[name]), []).append(k)
    for value, owners in starts.items():
        ax.axhline(value, color=model_color(owners[0]) if len(owners) == 1 else "0.45", linestyle="--",
                   linewidth=1, label=f"initial √d_k = {value:.3g}")
    _label_axes(ax, "layer", "temperature τ", "Learned LSA temperature")
    _legend_below(fig, ax, ncols=2)
    return fig


def plot_tau_history(per_model: dict[str, list[dict]], empty: str = NO_LSA_TEXT) -> Figure:
    """Mean tau of each layer over epochs: colour by layer (viridis), line style by model; `empty` says why
    there is no curve when no model has a tau yet."""
    fig = _figure()
    ax = fig.add_subplot()
    series: dict[str, list[tuple[list[float], list[float]]]] = {}
    for name, history in per_model.items():
        points = [(float(e["epoch"]), [float(np.mean(t)) for t in e["tau"]]) for e in history if e.get("tau")]
        if not points:
            continue
        layers = max(len(means) for _, means in points)
        series[name] = [([x for x, m in points if len(m) > layer],
                         [m[layer] for _, m in points if len(m) > layer]) for layer in range(layers)]
    if not series:
        return _no_data(fig, empty)
    layers = max(len(s) for s in series.values())
    colors = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.85, layers))
    for k, per_layer in enumerate(series.values()):
        style = _LINESTYLES[k % len(_LINESTYLES)]
        for layer, (xs, ys) in enumerate(per_layer):
            ax.plot(xs, ys, color=colors[layer], linestyle=style, marker="." if len(xs) == 1 else None)
    # Proxy handles keep the legend at models + layers entries instead of one per line.
    handles = [Line2D([], [], color="0.2", linestyle=_LINESTYLES[k % len(_LINESTYLES)], label=name)
               for k, name in enumerate(series)]
    handles += [Line2D([], [], color=colors[layer], label=f"L{layer}") for layer in range(layers)]
    _legend_below(fig, ax, handles=handles, ncols=min(len(handles), 4))
    _label_axes(ax, "epoch", "mean temperature τ", "LSA temperature during training")
    _epoch_axis(ax, [x for per_layer in series.values() for xs, _ in per_layer for x in xs])
    return fig


def plot_training(history: list[dict] | dict[str, list[dict]], kept: dict[str, int] | None = None) -> Figure:
    """Loss and top-1 accuracy per epoch, train solid and validation dashed; missing keys are skipped.

    Several runs (a dict of label -> history) share the axes, one colour per run, so a pair fine-tune's
    two models can be compared epoch by epoch; epoch 0 (before any step) is drawn where it is given.
    `kept` (label -> epoch) marks the epoch each finished run kept with a star on its accuracy, or says over
    the accuracy panel that a run kept none of its epochs (0: its start). One legend under both panels names
    the models (their colours) once, then training, validation and the star: long names keep the axes' size."""
    runs = history if isinstance(history, dict) else {"": history}
    named = any(runs)
    fig = _figure((WIDTH, 6.4))
    axes = fig.subplots(2, 1, sharex=True)
    panels = ((axes[0], "loss", ("loss", "val_loss")), (axes[1], "top-1 accuracy", ("top1", "val_top1")))
    epochs = [e.get("epoch", i) for run in runs.values() for i, e in enumerate(run)]
    styles = {}  # "training"/"validation" -> the look of its curves, for the legend
    for ax, ylabel, keys in panels:
        for k, (label, run) in enumerate(runs.items()):
            for j, key in enumerate(keys):
                points = [(e.get("epoch", i), e[key]) for i, e in enumerate(run) if e.get(key) is not None]
                if not points:
                    continue
                xs, ys = zip(*points, strict=True)
                color = MODEL_COLORS[k if label else j]
                # Validation: dashed, hollow squares, under the training curve, whose points (a one-epoch
                # run's only one) stay visible where the two meet.
                val = key.startswith("val_")
                look = {"marker": "s", "linestyle": "--", "markerfacecolor": "none"} if val else \
                       {"marker": "o", "linestyle": "-"}
                ax.plot(xs, ys, color=color, markersize=3 if len(xs) > 12 else 5, zorder=2 if val else 3,
                        label=f"{label} {key}".strip(), **look)
                styles.setdefault(j, ("validation" if val else "training", look | {"color": color}))
        if ylabel == "top-1 accuracy" and kept:
            _mark_kept(ax, runs, kept)
        _label_axes(ax, "epoch" if ax is axes[1] else "", ylabel)
        _epoch_axis(ax, epochs)
        if not ax.get_lines():
            ax.text(0.5, 0.5, "no epochs yet", ha="center", va="center", transform=ax.transAxes, color="0.35")
    models = [Line2D([], [], color=MODEL_COLORS[k], linewidth=2.5, label=label)
              for k, (label, run) in enumerate(runs.items()) if named and run]
    keys = [Line2D([], [], **(look | {"color": "0.3"}) if named else look, label=name)
            for name, look in (styles[j] for j in sorted(styles))]
    if any(line.get_marker() == "*" for line in axes[1].get_lines()):
        keys.append(Line2D([], [], marker="*", markersize=11, color="0.6", markeredgecolor="black", linestyle="none",
                           label="kept epoch"))
    handles = models + keys
    if handles:  # under both panels: they keep the figure's width, and every name is said once
        _fitted_legend(fig, handles, [h.get_label() for h in handles], ncols=2,
                       groups=[n for n in (len(models), len(keys)) if n])
    return fig


def _mark_kept(ax, runs: dict[str, list[dict]], kept: dict[str, int]) -> None:
    """A star on each run's kept epoch (its validation top-1, else its training top-1); for the runs that
    kept none of their epochs, the panel's title says so (over the axes, where it covers no point)."""
    none = []
    for k, (label, run) in enumerate(runs.items()):
        epoch = kept.get(label)
        if epoch is None:
            continue
        if epoch == 0:
            none.append(label or "the run")
            continue
        at = next((e for i, e in enumerate(run) if e.get("epoch", i) == epoch), None)
        value = None if at is None else at.get("val_top1", at.get("top1"))
        if value is not None:
            ax.plot([epoch], [value], marker="*", markersize=14, color=MODEL_COLORS[k if label else 0],
                    markeredgecolor="black", linestyle="none", zorder=4, label=f"{label} kept: epoch {epoch}".strip())
    if none:
        fitted_title(ax, f"{' and '.join(none)} kept none of the fine-tuned epochs (the status says what it kept)",
                      fontsize="small", color="0.25")


def plot_data_curve(curves: dict[str, tuple[list, list, list]], markers: dict[str, tuple[float, float]] | None = None,
                    note: str = "", colors: dict[str, str] | None = None, gaps: dict[int, dict] | None = None,
                    gap_marker=None, gap_label: str = "", dashed: frozenset[str] = frozenset(),
                    styles: dict[str, tuple[str, str]] | None = None, shapes: dict[str, str] | None = None,
                    gap_arms: dict[str, dict[int, dict]] | None = None) -> Figure:
    """Test top-1 against training-set size on a log axis: one line per variant (label -> sizes, means,
    stds) with a mean ± std band, and single points drawn apart as markers (label -> (size, top-1)), for
    example models trained with another, longer recipe: stars, or `shapes` (label -> a matplotlib marker).
    `colors`: label -> colour (else by order). The `dashed` labels are drawn dashed and on top, so that a
    line running level with another stays seen; `styles` (label -> (line style, marker)) draws a line of
    another recipe apart, with hollow markers.

    With `gaps` (size -> {"gaps": per seed, "mean", "interval": (low, high) or None}) a second panel shows
    the paired gap against the same sizes: each seed's gap, the mean with its 95 % interval, zero, each of
    `gap_arms` (label -> gaps of the same form: another recipe's) apart, and `gap_marker` ((size, gap, label)
    or a list of them, with an optional fourth item: the marker's shape; default a star)."""
    styles, shapes = styles or {}, shapes or {}
    colors = colors or {}
    # Alone, 5.2 inches: in the app's narrow column (at 800 px) the type stays near its size.
    fig = _figure((11.0, 4.8) if gaps else (5.2, 4.8))
    if gaps:
        ax, gap_ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    else:
        ax, gap_ax = fig.add_subplot(), None
    if not curves and not markers:
        return _no_data(fig, "no finished trials yet")
    for k, (label, (sizes, means, stds)) in enumerate(curves.items()):
        x, m, sd = (np.asarray(v, np.float64) for v in (sizes, means, stds))
        color = colors.get(label, model_color(k))
        if label in styles:  # another recipe's line: its own style, hollow markers, a lighter band
            line, shape = styles[label]
            ax.plot(x, 100 * m, color=color, marker=shape, label=label, zorder=2.5, linestyle=line,
                    markersize=7, markerfacecolor="white", markeredgewidth=1.5)
            ax.fill_between(x, 100 * (m - sd), 100 * (m + sd), color=color, alpha=0.08, linewidth=0)
            continue
        ax.plot(x, 100 * m, color=color, marker="o", label=label, zorder=2.5 if label in dashed else 2,
                linestyle="--" if label in dashed else "-", markersize=4 if label in dashed else 6)
        ax.fill_between(x, 100 * (m - sd), 100 * (m + sd), color=color, alpha=0.18, linewidth=0)
    for k, (label, (size, value)) in enumerate((markers or {}).items()):
        shape = shapes.get(label, "*")
        ax.scatter([size], [100 * value], color=colors.get(label, model_color(k)), marker=shape,
                   s=140 if shape == "*" else 80, edgecolors="black", linewidths=0.6, zorder=3, label=label)
    ax.set_xscale("log")
    ticks = sorted({int(v) for _, (sizes, _, _) in curves.items() for v in sizes}
                   | {int(size) for size, _ in (markers or {}).values()})
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("training images (log scale)")
    ax.set_ylabel("test top-1 (%)")
    ax.grid(alpha=0.3)
    if note:
        ax.set_title(note, fontsize="small")
    # Below the axes: inside, the legend covered the ends of the curves in a narrow figure.
    _fitted_legend(fig, *ax.get_legend_handles_labels(), ncols=2)
    if gap_ax is not None:
        _gap_panel(gap_ax, gaps, gap_marker, gap_label, ticks, gap_arms)
    return fig


def _gap_markers(marker) -> list[tuple]:
    """(size, gap, label, shape) for each of plot_gaps' markers: one tuple, a list of them, or None."""
    if marker is None:
        return []
    found = [marker] if isinstance(marker, tuple) else list(marker)
    return [(*m[:3], m[3] if len(m) > 3 else "*") for m in found]


def plot_gaps(gaps: dict[int, dict], marker=None, label: str = "", arms: dict[str, dict[int, dict]] | None = None
              ) -> Figure:
    """The paired gap against training-set size alone (the second panel of plot_data_curve), for a page
    that lays the two out itself: `marker` as plot_data_curve's `gap_marker`, `arms` as its `gap_arms`."""
    fig = _figure((4.7, 4.8))  # beside the 5.2-inch curve at 9 : 10, the same height and type size
    if not gaps:
        return _no_data(fig, "no size has both models yet")
    ticks = sorted(set(gaps) | {int(m[0]) for m in _gap_markers(marker)}
                   | {n for arm in (arms or {}).values() for n in arm})
    _gap_panel(fig.add_subplot(), gaps, marker, label, ticks, arms)
    return fig


def _gap_panel(ax, gaps: dict[int, dict], marker, label: str, ticks: list[int],
               arms: dict[str, dict[int, dict]] | None = None) -> None:
    sizes = sorted(gaps)
    for n in sizes:
        seeds = 100 * np.asarray(gaps[n]["gaps"], np.float64)
        ax.scatter(np.full(len(seeds), n), seeds, s=14, color="0.55", zorder=2,
                   label="one seed" if n == sizes[0] else None)
    means = np.array([100 * gaps[n]["mean"] for n in sizes])
    ax.plot(sizes, means, color="black", marker="o", zorder=3, label="mean")
    with_ci = [n for n in sizes if gaps[n].get("interval")]
    if with_ci:
        lo = np.array([100 * gaps[n]["interval"][0] for n in with_ci])
        hi = np.array([100 * gaps[n]["interval"][1] for n in with_ci])
        mid = np.array([100 * gaps[n]["mean"] for n in with_ci])
        ax.errorbar(with_ci, mid, yerr=[mid - lo, hi - mid], fmt="none", ecolor="black", capsize=4,
                    linewidth=1.2, zorder=3, label="95 % interval of the mean")
    for k, (arm, found) in enumerate((arms or {}).items()):  # another recipe's gaps: hollow squares, dotted
        color = model_color(4 + k)
        near = sorted(found)
        shifted = [n * 1.06 for n in near]  # a little to the right of the light recipe's points at the same size
        mid = np.array([100 * found[n]["mean"] for n in near])
        ax.plot(shifted, mid, color=color, linestyle=":", marker="s", markersize=7, markerfacecolor="white",
                markeredgewidth=1.5, zorder=3, label=arm)
        for x, n in zip(shifted, near, strict=True):
            if found[n].get("interval"):
                low, high = (100 * v for v in found[n]["interval"])
                ax.errorbar([x], [100 * found[n]["mean"]], yerr=[[100 * found[n]["mean"] - low],
                            [high - 100 * found[n]["mean"]]], fmt="none", ecolor=color, capsize=3, linewidth=1.0,
                            zorder=3)
    for size, gap, text, shape in _gap_markers(marker):
        ax.scatter([size], [100 * gap], marker=shape, s=140 if shape == "*" else 80, color="0.35" if shape == "*"
                   else model_color(1), edgecolors="black", linewidths=0.6, zorder=4, label=text)
    ax.axhline(0, color="0.3", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("training images (log scale)")
    ax.set_ylabel(label or "gap (points)")
    ax.grid(alpha=0.3)
    ax.set_title("the paired gap, seed by seed", fontsize="small")
    # below the axes: inside, it covered points (the pairs' markers sit at the right edge)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2))


def figure_to_array(fig: Figure) -> np.ndarray:
    """The figure rendered by Agg as an RGB uint8 (H, W, 3) array."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


class PlotCache:
    """Plots drawn once per content: matplotlib costs ~120 ms a figure, so a what-if asked again (by any
    session) reuses the pixels of the first drawing."""

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self._items: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes, draw) -> np.ndarray:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        picture = figure_to_array(draw())
        picture.setflags(write=False)
        with self._lock:
            self._items[key] = picture
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return picture


# The Tau tab's colours: τ / √d_k diverging at 1 (its start), blue below (sharper attention), red above.
TAU_RATIO_CMAP = "RdBu_r"


def _tau_ratio_cells(ax, ratios: np.ndarray, norm, limit: float) -> None:
    """Each cell's τ / √d_k written in it, white on the strongest colours: 9 pt for 13 columns (the paper-scale
    model's 12 heads and their mean: "0.93" takes 28 of a column's 33 px), 10 pt for fewer."""
    rows, cols = ratios.shape
    size = 9 if cols > 8 else 10
    for (i, j), v in np.ndenumerate(ratios):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=size,
                color="white" if abs(v - 1.0) > 0.6 * limit else "black")


def plot_tau_heads(per_model: dict[str, list[list[float]]], initial: dict[str, float]) -> Figure:
    """τ / √d_k of every layer (rows) and head (columns) of each model, its value in the cell, the layer's mean
    over heads in a last column; one panel per model, one colour scale for all (diverging at 1, the start)."""
    shown = {name: tau for name, tau in per_model.items() if tau and name in initial}
    rows = sum(len(tau) for tau in shown.values())
    fig = _figure((WIDTH, max(3.0, 0.27 * rows + 1.15 * len(shown) + 0.6)))
    if not shown:
        return _no_data(fig, NO_LSA_TEXT)
    ratios = {name: [np.asarray(t, np.float64) / float(initial[name]) for t in tau] for name, tau in shown.items()}
    spread = max(float(np.max(np.abs(r - 1.0))) for rs in ratios.values() for r in rs)
    limit = max(0.2, float(np.ceil(spread * 20) / 20))  # a few per cent stay pale; in steps of 0.05
    norm = Normalize(1.0 - limit, 1.0 + limit)
    axes = fig.subplots(len(shown), 1, squeeze=False,
                        height_ratios=[len(tau) + 1.5 for tau in shown.values()])[:, 0]
    for ax, (name, rs) in zip(axes, ratios.items(), strict=True):
        heads = max(len(r) for r in rs)
        grid = np.full((len(rs), heads), np.nan)
        for layer, r in enumerate(rs):
            grid[layer, :len(r)] = r
        if heads > 1:  # the layer's mean beside its heads, after a white gap
            grid = np.hstack([grid, np.nanmean(grid, axis=1, keepdims=True)])
        image = ax.imshow(grid, cmap=TAU_RATIO_CMAP, norm=norm, aspect="auto", interpolation="nearest")
        _tau_ratio_cells(ax, grid, norm, limit)
        if heads > 1:
            ax.axvline(heads - 0.5, color="white", linewidth=4)
            ax.set_xticks(range(heads + 1), [*map(str, range(heads)), "mean"], fontsize="small")
            ax.set_xlabel("head", fontsize="small")
        else:
            ax.set_xticks([0], ["one τ per layer"], fontsize="small")
        ax.set_yticks(range(len(rs)), [f"L{layer}" for layer in range(len(rs))], fontsize="small")
        ax.tick_params(length=0)
        ax.set_title(f"{name} · √d_k = {float(initial[name]):.3g}", fontsize="small")
        for side in ax.spines.values():
            side.set_visible(False)
    bar = fig.colorbar(image, ax=list(axes), location="right", shrink=min(1.0, 3.5 / fig.get_figheight() + 0.3),
                       pad=0.02, fraction=0.04)
    bar.set_label("τ / √d_k  (below 1: sharper)", fontsize="small")
    bar.ax.tick_params(labelsize="small")
    fig.suptitle("Learned temperature against its start √d_k", fontsize="medium")
    return fig


def plot_tau_trajectory(per_model: dict[str, list[dict]], initial: dict[str, float],
                        colors: dict[str, str] | None = None, empty: str = NO_LSA_TEXT) -> Figure:
    """τ / √d_k over training, one panel per layer: each model's mean over heads as a line, the heads' range
    (lowest to highest) as a band of its colour; `colors` maps a model to its colour (else by position)."""
    series: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {}
    for name, history in per_model.items():
        points = [(float(e["epoch"]), e["tau"]) for e in history if e.get("tau")]
        if not points or name not in initial:
            continue
        start = float(initial[name])
        per_layer = []
        for layer in range(max(len(tau) for _, tau in points)):
            kept = [(x, np.asarray(tau[layer], np.float64) / start) for x, tau in points if len(tau) > layer]
            xs = np.array([x for x, _ in kept])
            per_layer.append((xs, np.array([r.mean() for _, r in kept]), np.array([r.min() for _, r in kept]),
                              np.array([r.max() for _, r in kept])))
        series[name] = per_layer
    layers = max((len(s) for s in series.values()), default=0)
    cols = min(3, max(layers, 1))
    panel_rows = -(-layers // cols) if layers else 1
    fig = _figure((WIDTH, 1.2 + 1.25 * panel_rows))
    if not series:
        return _no_data(fig, empty)
    axes = fig.subplots(panel_rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    handles = []
    for k, (name, per_layer) in enumerate(series.items()):
        color = (colors or {}).get(name, model_color(k))
        banded = False
        for layer, (xs, mean, low, high) in enumerate(per_layer):
            ax = axes[layer]
            if np.any(high > low):
                ax.fill_between(xs, low, high, color=color, alpha=0.22, linewidth=0)
                banded = True
            ax.plot(xs, mean, color=color, linewidth=1.4, marker="." if len(xs) == 1 else None)
        handles.append(Line2D([], [], color=color, linewidth=1.4, label=f"{name}: mean over heads"
                              if banded else name))
        if banded:
            handles.append(Patch(color=color, alpha=0.22, linewidth=0,
                                                    label=f"{name}: heads' range"))
    for layer, ax in enumerate(axes):
        if layer >= layers:
            ax.set_visible(False)
            continue
        ax.axhline(1.0, color="0.45", linestyle="--", linewidth=0.8)
        ax.set_title(f"layer {layer}", fontsize="small", pad=2)
        ax.tick_params(labelsize="x-small")
        ax.grid(alpha=0.3)
        if layer + cols >= layers:  # the lowest panel of its column: the epoch axis is written under it
            ax.set_xlabel("epoch", fontsize="small")
            ax.tick_params(labelbottom=True)
    _epoch_axis(axes[0], [x for per_layer in series.values() for xs, *_ in per_layer for x in xs])
    fig.supylabel("τ / √d_k  (dashed: the start)", fontsize="small")
    fig.suptitle("Temperature during training", fontsize="medium")
    _fitted_legend(fig, handles, [h.get_label() for h in handles], ncols=min(len(handles), 2))
    return fig
