"""Tests of explorer.analysis.render: shifts, patch grids, colour mapping, overlays and plots."""

from __future__ import annotations

import time

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

from explorer.analysis import plots, render

RNG = np.random.default_rng(0)


def _image(h: int = 12, w: int = 12) -> np.ndarray:
    return RNG.integers(1, 256, size=(h, w, 3), dtype=np.uint8)  # no zeros, so padding is detectable


# Independent of the implementation: explicit slices for shift 2 on a 12x12 image.
EXPECTED_SLICES = {
    "left-up": ((slice(0, 10), slice(0, 10)), (slice(2, 12), slice(2, 12))),
    "left-down": ((slice(2, 12), slice(0, 10)), (slice(0, 10), slice(2, 12))),
    "right-up": ((slice(0, 10), slice(2, 12)), (slice(2, 12), slice(0, 10))),
    "right-down": ((slice(2, 12), slice(2, 12)), (slice(0, 10), slice(0, 10))),
}


@pytest.mark.parametrize("mode", render.SHIFTS)
def test_shift_image_matches_explicit_slicing(mode):
    image = _image()
    out = render.shift_image(image, mode, 2)
    (oy, ox), (iy, ix) = EXPECTED_SLICES[mode]
    np.testing.assert_array_equal(out[oy, ox], image[iy, ix])
    padded = np.ones(image.shape[:2], bool)
    padded[oy, ox] = False
    assert padded.sum() == 12 * 12 - 10 * 10
    assert (out[padded] == 0).all()
    assert out.dtype == image.dtype and out.shape == image.shape


def test_shift_image_left_up_moves_content_up_and_left():
    image = np.zeros((6, 6, 1), np.float32)
    image[3, 4] = 7.0
    out = render.shift_image(image, "left-up", 1)
    assert out[2, 3, 0] == 7.0 and out.sum() == 7.0


def test_shift_image_edge_cases():
    image = _image(4, 4)
    np.testing.assert_array_equal(render.shift_image(image, "right-down", 0), image)
    assert (render.shift_image(image, "right-down", 4) == 0).all()
    with pytest.raises(ValueError, match="unknown shift mode 'up'"):
        render.shift_image(image, "up", 1)


def test_spt_views_order_and_shift():
    image = _image()
    views = render.spt_views(image, 6)
    assert list(views) == ["original", *render.SHIFTS]
    np.testing.assert_array_equal(views["original"], image)
    np.testing.assert_array_equal(views["right-down"][3:, 3:], image[:9, :9])


def test_patch_grid_places_patches_and_gaps():
    image, p, gap, scale = _image(12, 8), 4, 3, 2
    grid = render.patch_grid(image, p, gap=gap, scale=scale, background=(1, 2, 3))
    assert grid.shape == (3 * p * scale + 2 * gap, 2 * p * scale + gap, 3)
    covered = np.zeros(grid.shape[:2], bool)
    for r in range(3):
        for c in range(2):
            y0, x0 = render.patch_position(r, c, p, gap, scale)
            expected = image[r * p:(r + 1) * p, c * p:(c + 1) * p].repeat(scale, 0).repeat(scale, 1)
            np.testing.assert_array_equal(grid[y0:y0 + p * scale, x0:x0 + p * scale], expected)
            covered[y0:y0 + p * scale, x0:x0 + p * scale] = True
    assert (grid[~covered] == (1, 2, 3)).all()
    assert (~covered).sum() > 0


def test_patch_grid_default_scale_and_errors():
    grid = render.patch_grid(_image(72, 72), 6)
    assert 256 <= grid.shape[1] <= 320
    assert render.patch_grid(_image(24, 24), 6, scale=1).shape == (24 + 3 * 2, 24 + 3 * 2, 3)
    with pytest.raises(ValueError, match="13x12.*patch_size 4"):
        render.patch_grid(_image(13, 12), 4)


def test_spt_grids_match_patch_grid_of_views():
    image = _image()
    grids = render.spt_grids(image, 4, scale=2)
    views = render.spt_views(image, 4)
    assert list(grids) == list(views)
    for name in grids:
        np.testing.assert_array_equal(grids[name], render.patch_grid(views[name], 4, scale=2))


def test_colorize_ends_nan_and_constant():
    cmap = matplotlib.colormaps[render.CMAP]
    low, high = (np.round(np.asarray(cmap(x)[:3]) * 255) for x in (0.0, 1.0))
    out = render.colorize(np.array([[2.0, 5.0], [np.nan, 3.5]]))
    assert out.dtype == np.uint8 and out.shape == (2, 2, 3)
    np.testing.assert_array_equal(out[0, 0], low)
    np.testing.assert_array_equal(out[0, 1], high)
    np.testing.assert_array_equal(out[1, 0], low)
    assert not (out[1, 1] == low).all() and not (out[1, 1] == high).all()
    with np.errstate(all="raise"):
        constant = render.colorize(np.full((3, 3), 0.25))
    assert (constant == low).all()
    np.testing.assert_array_equal(render.colorize(np.array([0.0, 10.0]), vmin=0, vmax=5)[1], high)


def test_attention_overlay_shape_query_and_hot_cell():
    image = np.full((32, 32, 3), 128, np.uint8)
    attention = np.zeros((8, 8), np.float32)
    attention[5, 2] = 1.0
    out = render.attention_overlay(image, attention, query=(1, 6), size=256)
    assert out.shape == (256, 256 + render.COLORBAR_WIDTH, 3) and out.dtype == np.uint8
    cyan = np.array(render.QUERY_COLOR)
    # Cell (1, 6) spans rows 32..63 and columns 192..223; its 2-px outline is cyan, its inside is not.
    assert (out[32:34, 192:224] == cyan).all() and (out[32:64, 222:224] == cyan).all()
    assert not (out[40:56, 200:216] == cyan).all(axis=-1).any()
    brightness = out[:, :256].astype(int).sum(axis=-1)
    hottest = np.unravel_index(np.argmax(brightness), brightness.shape)
    assert hottest[0] // 32 == 5 and hottest[1] // 32 == 2
    assert render.attention_overlay(image, attention, colorbar=False, size=100).shape == (100, 100, 3)
    with pytest.raises(ValueError):
        render.attention_overlay(image, attention, query=(8, 0))


def test_attention_overlay_colorbar_runs_from_low_to_high():
    bar = render.attention_overlay(_image(), np.ones((4, 4)), size=128)[:, 128 + render.BAR_GAP:]
    lut = render.colormap_lut()
    assert bar.shape == (128, render.BAR_WIDTH, 3)
    # The labels sit inside the bar, so its first column is pure gradient: top = high end, bottom = low.
    np.testing.assert_array_equal(bar[:, 0], lut[(np.arange(127, -1, -1) * 255) // 127])
    assert (bar[2:20, 1:-1].sum(axis=-1) < 150).any()  # the black max label on the bright end
    assert (bar[-20:-2, 1:-1].sum(axis=-1) > 600).any()  # the white "0" on the dark end


def test_per_request_code_needs_no_matplotlib(monkeypatch):
    render.colorize(np.zeros(1))

    def forbidden(*_args, **_kwargs):
        raise AssertionError("matplotlib called per request")

    monkeypatch.setattr(render.matplotlib, "colormaps", forbidden)
    render.attention_overlay(_image(), RNG.random((3, 3)), query=(0, 0), size=97)
    render.head_sheet(_image(), RNG.random((2, 2, 3, 3)), cell=37)


def test_attention_overlay_is_fast():
    image, attention = _image(72, 72), RNG.random((12, 12))
    render.attention_overlay(image, attention, query=(3, 3))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        render.attention_overlay(image, attention, query=(3, 3))
        times.append(time.perf_counter() - start)
    # Generous against a busy machine; the real figure is ~2 ms.
    assert min(times) < 0.02


def test_head_sheet_grows_with_layers_and_heads():
    image = _image(72, 72)
    small = render.head_sheet(image, RNG.random((2, 3, 12, 12)), cell=40, gap=4)
    taller = render.head_sheet(image, RNG.random((3, 3, 12, 12)), cell=40, gap=4)
    wider = render.head_sheet(image, RNG.random((2, 4, 12, 12)), cell=40, gap=4)
    assert small.dtype == np.uint8 and small.ndim == 3
    assert taller.shape[0] - small.shape[0] == 44 and taller.shape[1] == small.shape[1]
    assert wider.shape[1] - small.shape[1] == 44 and wider.shape[0] == small.shape[0]
    titled = render.head_sheet(image, RNG.random((2, 3, 12, 12)), cell=40, title="attention")
    assert titled.shape[0] > small.shape[0] and titled.shape[1] == small.shape[1]
    with pytest.raises(ValueError):
        render.head_sheet(image, RNG.random((2, 3, 12, 12)), row_labels=["a"])


def test_head_sheet_normalises_each_cell():
    maps = np.zeros((1, 2, 4, 4))
    maps[0, 0, 0, 0], maps[0, 1, 0, 0] = 1.0, 0.01
    sheet = render.head_sheet(np.zeros((8, 8, 3), np.uint8), maps, cell=40, gap=4)
    high = render.colormap_lut()[255].astype(int) * 0.6
    # Both cells' hot corner gets the top colour because each cell is scaled by its own max.
    corners = sheet[sheet.shape[0] - 3 - 40 + 2, [-3 - 14 - 4 - 40 - 4 - 40 + 2, -3 - 14 - 4 - 40 + 2]]
    np.testing.assert_allclose(corners, np.tile(high, (2, 1)), atol=1)


def test_head_tiles_wrap_into_rows_and_normalise_each_tile():
    maps = np.zeros((3, 4, 4))
    maps[0, 0, 0], maps[1, 0, 0], maps[2, 0, 0] = 1.0, 0.01, 0.5
    sheet = render.head_tiles(np.zeros((8, 8, 3), np.uint8), maps, cell=40, columns=2, gap=4)
    caption = render.label_image(np.zeros((40, 40, 3), np.uint8), "head 0").shape[0] - 40
    tile = caption + 40
    assert sheet.shape == (2 * tile + 4, 2 * 40 + 4 + 4 + render.BAR_WIDTH, 3)
    high = render.colormap_lut()[255].astype(int) * 0.6
    # Each tile's hot corner gets the top colour (own max); the fourth place of the 2x2 stays white.
    hot = [sheet[caption + 2, 2], sheet[caption + 2, 44 + 2], sheet[tile + 4 + caption + 2, 2]]
    np.testing.assert_allclose(hot, np.tile(high, (3, 1)), atol=1)
    assert (sheet[tile + 4:, 44:84] == 255).all()
    assert render.head_tiles(np.zeros((8, 8, 3), np.uint8), maps[:2], cell=40, columns=2).shape[0] == tile
    with pytest.raises(ValueError):
        render.head_tiles(np.zeros((8, 8, 3), np.uint8), maps, labels=["a"])
    with pytest.raises(ValueError):
        render.head_tiles(np.zeros((8, 8, 3), np.uint8), maps[0])


def test_side_by_side_keeps_every_picture_whole_under_its_title():
    left, right = _image(30, 20), _image(12, 9)
    out = render.side_by_side([left, right], ["A: one", "B: two"], gap=6)
    title = render.label_image(left, "A: one").shape[0] - 30
    assert out.shape == (title + 30, 20 + 6 + 9, 3)
    np.testing.assert_array_equal(out[title:, :20], left)
    np.testing.assert_array_equal(out[title:title + 12, 26:], right)
    assert (out[title + 12:, 26:] == 255).all()  # the shorter picture is topped, padded white below
    assert (out[:title] < 255).any(axis=-1)[:, 26:].any()  # B's title is drawn above B's picture
    rule = out[:, 20:26, 0]
    assert (rule[:, 2:4] == 200).all() and (rule[:, [0, 1, 4, 5]] == 255).all()  # a grey rule mid-gap
    np.testing.assert_array_equal(render.side_by_side([left]), left)
    with pytest.raises(ValueError, match="2 titles"):
        render.side_by_side([left, right], ["only one"])
    with pytest.raises(ValueError):
        render.side_by_side([])


def _legend(ax):
    """The axes' legend: its own, or the figure's (drawn below the axes)."""
    return ax.get_legend() or ax.figure.legends[0]


def _legend_texts(ax) -> list[str]:
    return [t.get_text() for t in _legend(ax).get_texts()]


def test_per_layer_plots():
    data = {"vanilla": RNG.random((6, 4)) * 20, "spt_lsa": RNG.random((6, 4)), "third": RNG.random((6, 4))}
    for fig in (plots.plot_attention_distance(data), plots.plot_entropy(data)):
        assert isinstance(fig, Figure)
        ax = fig.axes[0]
        lines = ax.get_lines()
        assert len(lines) == 3 and _legend_texts(ax) == list(data)
        assert [line.get_color() for line in lines] == ["#1f77b4", "#ff7f0e", "#2ca02c"]
        np.testing.assert_allclose(lines[0].get_ydata(), data["vanilla"].mean(axis=1))
        assert len(ax.collections) == 3 and len(ax.collections[0].get_offsets()) == 24
    assert "pixels" in plots.plot_attention_distance(data).axes[0].get_ylabel()
    assert "nats" in plots.plot_entropy(data).axes[0].get_ylabel()


def test_plot_tau():
    per_model = {"vanilla": [], "lsa": [[5.0], [5.5], [6.0]], "lsa_head": [[5.0, 6.0], [4.0, 4.5]]}
    fig = plots.plot_tau(per_model, {"lsa": 8.0, "lsa_head": 8.0})
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 3  # a tau line per model that has tau, one dashed line for their shared start
    assert lines[0].get_color() == "#ff7f0e"  # colour follows the model's position among all models
    dashed = [line for line in lines if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and np.allclose(dashed[0].get_ydata(), 8.0) and dashed[0].get_color() == "0.45"
    assert _legend_texts(ax).count("initial √d_k = 8") == 1
    np.testing.assert_allclose(lines[1].get_ydata(), [5.5, 4.25])
    assert len(ax.collections) == 1 and len(ax.collections[0].get_offsets()) == 4
    # Different starts: one line each, in its model's colour.
    fig = plots.plot_tau(per_model, {"lsa": 8.0, "lsa_head": 4.0})
    dashed = [line for line in fig.axes[0].get_lines() if line.get_linestyle() == "--"]
    assert [line.get_color() for line in dashed] == ["#ff7f0e", "#2ca02c"]


@pytest.mark.parametrize("plot", [lambda: plots.plot_tau({"vanilla": []}, {}),
                                  lambda: plots.plot_tau_history({"vanilla": [{"epoch": 1, "tau": []}]})])
def test_no_lsa_text(plot):
    fig = plot()
    assert [t.get_text() for t in fig.axes[0].texts] == [plots.NO_LSA_TEXT]
    assert not fig.axes[0].get_lines()


def test_plot_tau_history():
    history = [{"epoch": e, "tau": [[8.0 - e], [8.0 - 2 * e, 8.0]]} for e in range(1, 4)]
    fig = plots.plot_tau_history({"lsa": history, "spt_lsa": history[:2], "vanilla": []})
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 4  # two layers for each of the two models with tau
    np.testing.assert_allclose(lines[1].get_ydata(), [(6 + 8) / 2, (4 + 8) / 2, (2 + 8) / 2])
    assert {line.get_linestyle() for line in lines[:2]} != {line.get_linestyle() for line in lines[2:]}
    assert not np.allclose(lines[0].get_color(), lines[1].get_color())  # colour by layer
    assert _legend_texts(ax) == ["lsa", "spt_lsa", "L0", "L1"]


def test_plot_training_skips_missing_keys():
    history = [{"epoch": 1, "loss": 2.0, "top1": 0.3},
               {"epoch": 2, "loss": 1.5, "val_loss": 1.7, "top1": 0.4}]
    fig = plots.plot_training(history)
    loss_ax, acc_ax = fig.axes
    assert [line.get_label() for line in loss_ax.get_lines()] == ["loss", "val_loss"]
    assert [line.get_label() for line in acc_ax.get_lines()] == ["top1"]
    assert _legend_texts(loss_ax) == ["training", "validation"]  # one legend for both panels, each name once
    np.testing.assert_array_equal(loss_ax.get_lines()[1].get_xdata(), [2])
    single = plots.plot_training([{"epoch": 1, "loss": 1.0, "val_loss": 1.1, "top1": 0.5, "val_top1": 0.4}])
    assert [len(ax.get_lines()) for ax in single.axes] == [2, 2]


def test_figure_to_array():
    fig = plots.plot_training([{"epoch": 1, "loss": 1.0}])
    array = plots.figure_to_array(fig)
    width, height = fig.get_size_inches() * fig.dpi
    assert array.dtype == np.uint8 and array.shape == (round(height), round(width), 3)
    assert (array < 255).any()


def test_plot_what_if_draws_learned_solid_and_what_if_dashed():
    learned, changed = RNG.random((6, 4)), RNG.random((6, 4)) / 2
    fig = plots.plot_what_if({"A": (learned, changed), "B": (changed, learned)},
                              {"A": (learned * 10, changed * 10), "B": (changed * 10, learned * 10)})
    entropy, distance = fig.axes
    assert "nats" in entropy.get_ylabel() and "pixels" in distance.get_ylabel()
    lines = entropy.get_lines()
    assert [line.get_linestyle() for line in lines] == ["-", "--", "-", "--"]
    np.testing.assert_allclose(lines[1].get_ydata(), changed.mean(1))
    assert lines[0].get_color() == lines[1].get_color() != lines[2].get_color()
    legend = fig.legends[0]  # one for both panels, below them: it covers no curve
    assert [t.get_text() for t in legend.get_texts()][:2] == ["A: learned", "A: what if"]
    _assert_outside(fig, legend, entropy, distance)


def _assert_outside(fig, legend, *axes):
    plots.figure_to_array(fig)  # lays the figure out
    box = legend.get_window_extent()
    for ax in axes:
        inside = ax.get_window_extent()
        assert box.x0 >= inside.x1 - 1 or box.x1 <= inside.x0 + 1 or box.y0 >= inside.y1 - 1 \
            or box.y1 <= inside.y0 + 1, (box, inside)


def test_the_tau_history_legend_sits_beside_the_curves_and_an_empty_plot_says_why():
    history = [{"epoch": e, "tau": [[8.0 - e], [8.0 - 2 * e]]} for e in range(1, 4)]
    fig = plots.plot_tau_history({"lsa": history})
    _assert_outside(fig, _legend(fig.axes[0]), fig.axes[0])
    waiting = plots.plot_tau_history({"B": []}, empty="τ of B shows here after its first epoch")
    assert [t.get_text() for t in waiting.axes[0].texts] == ["τ of B shows here after its first epoch"]


@pytest.mark.parametrize("draw", [
    lambda: plots.plot_tau({"cifar10-spt_lsa (spt_lsa)": [[4.5], [4.2], [3.9]], "e2e40-B (spt_lsa)": [[4.1], [4.0]]},
                           {"cifar10-spt_lsa (spt_lsa)": 4.0, "e2e40-B (spt_lsa)": 4.0}),
    lambda: plots.plot_entropy({"A: vanilla": RNG.random((6, 4)), "B: spt_lsa": RNG.random((6, 4))}),
    lambda: plots.plot_training({m: [{"epoch": e, "loss": 1.0 / (e + 1), "val_loss": 1.1 / (e + 1),
                                      "top1": 0.2 * e, "val_top1": 0.19 * e} for e in range(4)] for m in "AB"}),
], ids=["tau", "per-layer", "training"])
def test_no_legend_covers_a_curve_or_the_initial_tau_line(draw):
    fig = draw()
    for ax in fig.axes:
        _assert_outside(fig, _legend(ax), *fig.axes)


LONG = [f"{tag}: cifar10-{size}-spt_lsa_head-ft-three-classes"
        for tag, size in zip("ABCD", (1000, 2500, 5000, 45000), strict=True)]


@pytest.mark.parametrize("draw", [
    lambda: plots.plot_what_if({n: (RNG.random((6, 4)), RNG.random((6, 4))) for n in LONG[:2]},
                               {n: (RNG.random((6, 4)), RNG.random((6, 4))) for n in LONG[:2]}),
    lambda: plots.plot_tau_history({n: [{"epoch": e, "tau": [[8.0 - e]] * 6} for e in range(3)] for n in LONG}),
    lambda: plots.plot_entropy({n: RNG.random((6, 4)) for n in LONG}),
], ids=["what-if", "tau-history", "per-layer"])
def test_a_legend_of_long_names_stays_inside_its_figure(draw):
    fig = draw()
    plots.figure_to_array(fig)
    for legend in fig.legends:
        box = legend.get_window_extent()
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (box, fig.bbox.width)
    # Every name is there whole (wrapped at most).
    shown = " ".join("".join(t.get_text().split()) for legend in fig.legends for t in legend.get_texts())
    assert all("".join(name.split()) in shown for name in LONG[:2]), shown


def test_a_one_epoch_run_shows_its_training_point_over_the_validation_one():
    fig = plots.plot_training({"A": [{"epoch": 0, "val_loss": 1.2, "val_top1": 0.3},
                                     {"epoch": 1, "loss": 1.0, "val_loss": 1.0, "top1": 0.5, "val_top1": 0.5}]})
    for ax in fig.axes:
        train, val = ax.get_lines()
        assert train.get_zorder() > val.get_zorder() and train.get_marker() != val.get_marker()
        assert val.get_markerfacecolor() == "none"


def test_the_fine_tune_curves_mark_the_kept_epoch_or_say_none_was():
    """A star on the kept epoch's validation top-1 for a run that kept a fine-tuned epoch; a line of text for
    one that kept its start (or the probe): none of its epochs."""
    def run(scale):
        return [{"epoch": e, "loss": 1.0 / (e + 1), "val_loss": 1.1 / (e + 1), "top1": 0.2 * e,
                 "val_top1": scale * e} for e in range(4)]
    fig = plots.plot_training({"A": run(0.19), "B": run(0.1)}, kept={"A": 2, "B": 0})
    accuracy = fig.axes[1]
    stars = [line for line in accuracy.get_lines() if line.get_marker() == "*"]
    assert len(stars) == 1 and list(stars[0].get_xdata()) == [2] and list(stars[0].get_ydata()) == [0.38]
    assert stars[0].get_label() == "A kept: epoch 2"
    assert " ".join(accuracy.get_title().split()) == ("B kept none of the fine-tuned epochs (the status says what "
                                                      "it kept)")
    assert not [line for line in fig.axes[0].get_lines() if line.get_marker() == "*"]  # the loss panel: none
    running = plots.plot_training({"A": run(0.19)})
    assert not [line for line in running.axes[1].get_lines() if line.get_marker() == "*"]
    assert not running.axes[1].get_title()
    _assert_outside(fig, _legend(accuracy), *fig.axes)


def test_long_model_names_and_a_run_that_kept_its_start_leave_the_curves_their_size():
    """Issue #83 item 5: a pair fine-tune whose A kept its start (the linear probe) and whose names are long:
    both panels keep most of the figure, every name is shown whole inside it, and the note over the accuracy
    panel covers neither the axes nor B's star."""
    names = [f"{t}: paper scale · {v} · 45,000 images (fine-tuned · my-own-six-superclasses-{t})"
             for t, v in (("A", "ViT"), ("B", "SPT + LSA"))]
    history = [{"epoch": e, "loss": 1.0 / (e + 1), "val_loss": 1.1 / (e + 1), "top1": 0.2 * e,
                "val_top1": 0.19 * e} for e in range(5)]
    fig = plots.plot_training(dict.fromkeys(names, history), kept={names[0]: 0, names[1]: 4})
    plots.figure_to_array(fig)
    width, height = fig.bbox.width, fig.bbox.height
    loss, accuracy = (ax.get_window_extent() for ax in fig.axes)
    assert min(loss.width, accuracy.width) >= 0.8 * width, (loss, accuracy, width)
    assert min(loss.height, accuracy.height) >= 0.22 * height, (loss, accuracy, height)
    legend = fig.legends[0]
    box = legend.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= width and box.y0 >= 0, (box, width)
    shown = [t.get_text().replace("\n", " ") for t in legend.get_texts()]
    assert all(name in shown for name in names), shown
    title = fig.axes[1].title.get_window_extent()
    assert title.x0 >= 0 and title.x1 <= width and title.y0 >= accuracy.y1 - 1, (title, accuracy)
    _assert_outside(fig, legend, *fig.axes)


def test_plots_are_drawn_to_sit_two_abreast_or_one_per_row_at_80_percent():
    """Every plot of the Attention, Tau and Fine-tune tabs is 520 px wide: the UI's rows put two side by side
    in a wide window and one per row in a narrow one, each shown at 80 % of its size or more."""
    history = [{"epoch": 1, "loss": 1.0, "tau": [[7.0]]}]
    data = {"A": RNG.random((6, 4))}
    for fig in (plots.plot_tau({"lsa": [[5.0]]}, {"lsa": 8.0}), plots.plot_tau_history({"lsa": history}),
                plots.plot_training({"A": history}), plots.plot_entropy(data), plots.plot_attention_distance(data),
                plots.plot_what_if({"A": (data["A"], data["A"])}, {"A": (data["A"], data["A"])})):
        assert plots.figure_to_array(fig).shape[1] == 520


def test_a_one_epoch_run_has_an_integer_epoch_axis_around_its_epoch():
    fig = plots.plot_training({"A": [{"epoch": 1, "loss": 1.0, "val_loss": 1.1, "top1": 0.5, "val_top1": 0.4}]})
    plots.figure_to_array(fig)
    for ax in fig.axes:
        assert ax.get_xlim() == (0.5, 1.5)
        ticks = [t for t in ax.get_xticks() if 0.5 <= t <= 1.5]
        assert ticks == [1.0]
    tau = plots.plot_tau_history({"lsa": [{"epoch": 1, "tau": [[7.0]]}]})
    assert tau.axes[0].get_xlim() == (0.5, 1.5)


@pytest.mark.parametrize("shape", [(1, 1, 3), (7, 5, 3), (120, 90, 3), (400, 700, 3)])
def test_encode_png_is_lossless(shape):  # the last is deflated in pieces at once
    import io

    from PIL import Image
    pixels = RNG.integers(0, 256, shape, dtype=np.uint8)
    pixels[shape[0] // 2:] = pixels[0]  # flat runs, as in the upscaled pictures
    assert (shape[0] * (1 + 3 * shape[1]) >= render.PARALLEL_DEFLATE_BYTES) == (shape[0] == 400)
    decoded = Image.open(io.BytesIO(render.encode_png(pixels)))
    assert decoded.mode == "RGB" and decoded.size == (shape[1], shape[0])
    np.testing.assert_array_equal(np.asarray(decoded), pixels)


def test_plot_tau_heads_writes_each_heads_ratio_beside_its_layers_mean_on_a_scale_centred_at_one():
    fig = plots.plot_tau_heads({"A: lsa": [[8.8], [7.2]], "B: spt_lsa": [[4.8, 3.2, 4.0], [4.4, 3.6, 4.0]]},
                               {"A: lsa": 8.0, "B: spt_lsa": 4.0})
    per_layer, per_head = [ax for ax in fig.axes if ax.images]
    assert [t.get_text() for t in per_layer.get_xticklabels()] == ["one τ per layer"]
    assert [t.get_text() for t in per_layer.texts] == ["1.10", "0.90"]
    assert [t.get_text() for t in per_head.get_xticklabels()] == ["0", "1", "2", "mean"]
    assert [t.get_text() for t in per_head.texts] == ["1.20", "0.80", "1.00", "1.00", "1.10", "0.90", "1.00", "1.00"]
    assert [t.get_text() for t in per_head.get_yticklabels()] == ["L0", "L1"]
    norm = per_head.images[0].norm
    assert norm.vmin + norm.vmax == pytest.approx(2.0) and norm.vmax >= 1.2  # both panels on one scale
    assert per_layer.images[0].norm is norm
    assert plots.figure_to_array(fig).shape[1] == 520
    empty = plots.plot_tau_heads({"A: vanilla": []}, {})
    assert [t.get_text() for t in empty.axes[0].texts] == [plots.NO_LSA_TEXT]


def test_plot_tau_trajectory_draws_each_layers_mean_and_its_heads_range_in_the_models_colour():
    history = [{"epoch": e, "tau": [[4.0 + 0.1 * e, 4.0 - 0.1 * e], [4.4, 4.4]]} for e in (1, 2, 3)]
    fig = plots.plot_tau_trajectory({"B: spt_lsa": history, "A: vanilla": []}, {"B: spt_lsa": 4.0},
                                    {"B: spt_lsa": plots.model_color(1)})
    layers = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in layers] == ["layer 0", "layer 1"]
    mean = layers[0].lines[0]
    np.testing.assert_allclose(mean.get_ydata(), [1.0, 1.0, 1.0])
    assert mean.get_color() == plots.model_color(1)
    band = layers[0].collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.925) and band.max() == pytest.approx(1.075)
    assert not layers[1].collections  # one tau in all heads: no band
    np.testing.assert_allclose(layers[1].lines[0].get_ydata(), [1.1, 1.1, 1.1])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["B: spt_lsa: mean over heads",
                                                                  "B: spt_lsa: heads' range"]
    empty = plots.plot_tau_trajectory({"A: vanilla": []}, {}, empty="no tau per epoch")
    assert [t.get_text() for t in empty.axes[0].texts] == ["no tau per epoch"]


def test_the_tau_heatmap_writes_each_value_at_9_pt_or_more_none_over_another():
    """The paper-scale model's 9 layers x 12 heads and their mean: every cell's value legible and apart."""
    fig = plots.plot_tau_heads({"B: paper scale · SPT + LSA · 45,000 images": [[8.0 + 0.1 * h for h in range(12)]] * 9},
                               {"B: paper scale · SPT + LSA · 45,000 images": 8.0})
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # laid out as the app draws it
    renderer = canvas.get_renderer()
    texts = [t for ax in fig.axes for t in ax.texts]
    assert len(texts) == 9 * 13 and min(t.get_fontsize() for t in texts) >= 9
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert not [(i, j) for i in range(len(boxes)) for j in range(i) if boxes[i].overlaps(boxes[j])]


@pytest.mark.parametrize("grid", [4, 8])
def test_overlays_in_one_go_draw_what_each_overlay_draws(grid):
    """A query click's 56 maps drawn at once (head_sheet, head_tiles, marked_tiles) are pixel for pixel the maps
    drawn one by one, with a flat map, NaNs, an inf and a tiny scale among them."""
    base = RNG.integers(0, 256, (96, 96, 3), dtype=np.uint8)
    maps = RNG.random((6, grid, grid)).astype(np.float32)
    maps[1], maps[2, 0, 0], maps[3], maps[4, 1, 1] = 0, np.nan, np.nan, np.inf
    maps[5] *= 1e-9
    drawn = render._overlays(base, maps, 0.6, (1, 2))
    for one, m in zip(drawn, maps, strict=True):
        np.testing.assert_array_equal(one, render._overlay(base, m, 0.6, None, (1, 2))[0])


def test_trust_figures_keep_a_fine_tuned_models_long_title_over_its_own_panel():
    """Issue #91: long class names push each confusion matrix right and a fine-tuned model's name is long;
    each title wraps to stay over its own half of the figure, none cut at its right edge."""
    from explorer.analysis import render_trust
    from explorer.analysis.trust import Reliability
    names = ["aquatic_mammals", "fish", "large_man-made_outdoor_things", "large_omnivores_and_herbivores"]
    titles = [f"{t}: fine-tuned · cifar10-{v}-ft-cifar100-10-new-d0 · top-1 50.0 %" for t, v in
              (("A", "vanilla"), ("B", "spt_lsa"))]
    matrices = [RNG.integers(0, 5, (4, 4)) for _ in titles]
    edges = np.linspace(0, 1, 16)
    reliability = Reliability(edges, np.ones(15, np.int64), np.full(15, 0.5), np.full(15, 0.5), 0.1, 1.0)
    for fig in (render_trust.confusion_figure(matrices, names, titles),
                render_trust.reliability_figure([reliability] * 2, titles, 15)):
        plots.figure_to_array(fig)
        width = fig.bbox.width
        for k, ax in enumerate(fig.axes[:2]):
            box = ax.title.get_window_extent()
            assert k * width / 2 - 1 <= box.x0 and box.x1 <= (k + 1) * width / 2 + 1, (k, box, width)
            assert "\n" in ax.get_title() and "cifar10-" in ax.get_title().replace("\n", " ")
