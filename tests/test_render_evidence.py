"""Tests of explorer.analysis.render_evidence: occlusion maps, the robustness plot and the shift strip, from plain
arrays (no model)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from explorer.analysis import plots, render
from explorer.analysis import render_evidence as rv


def test_importing_it_builds_nothing_from_keras():
    import ast
    import inspect
    tree = ast.parse(inspect.getsource(rv))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m.split(".")[0] in ("keras", "tensorflow", "jax", "gradio") for m in imported), imported
    assert not {"explorer.analysis.evidence", "explorer.model.probe", "explorer.model.models"} & imported


def test_the_map_is_sharp_and_its_maximum_is_where_the_drop_is():
    grey = np.full((32, 32, 3), 128, np.uint8)
    drop = np.zeros((4, 4))
    drop[1, 3] = 0.4
    drop[2, 0] = 0.1
    out = rv.occlusion_overlay(grey, drop, vmax=0.4, size=160, colorbar=False)
    assert out.shape == (160, 160, 3)
    cells = out.reshape(4, 40, 4, 40, 3)
    # Nearest upscaling over a flat image: every patch is one flat colour.
    assert (cells == cells[:, :1, :, :1]).all()
    brightness = cells[:, 0, :, 0].astype(int).sum(-1)
    assert np.unravel_index(brightness.argmax(), (4, 4)) == (1, 3)
    assert brightness[2, 0] > brightness[0, 0]


def test_negative_drops_look_like_zero():
    image = np.random.default_rng(0).integers(0, 256, size=(8, 8, 3)).astype(np.uint8)
    down = np.array([[0.2, 0.0], [-0.3, 0.1]])
    np.testing.assert_array_equal(rv.occlusion_overlay(image, down, 0.2, size=64),
                                  rv.occlusion_overlay(image, np.clip(down, 0, None), 0.2, size=64))


def test_a_pair_shares_one_colour_scale():
    grey = np.full((32, 32, 3), 128, np.uint8)
    strong, weak = np.zeros((4, 4)), np.zeros((4, 4))
    strong[0, 0], weak[0, 0] = 0.6, 0.3
    shared = rv.occlusion_pair_picture(grey, [strong, weak], 0.6, ["A", "B"], size=128)
    half = (shared.shape[1] - 16) // 2
    top = shared.shape[0] - 128
    a, b = shared[top + 5, 5].astype(int), shared[top + 5, half + 16 + 5].astype(int)
    assert a.sum() > b.sum() + 60  # B's weaker evidence is darker on the shared scale
    alone = [rv.occlusion_overlay(grey, m, size=128) for m in (strong, weak)]
    np.testing.assert_array_equal(alone[0][5, 5], alone[1][5, 5])  # each on its own scale: the same
    with pytest.raises(ValueError, match="need 2 titles"):
        rv.occlusion_pair_picture(grey, [strong, weak], 0.6, ["A"])


def test_the_centre_of_mass_is_marked_in_cyan_on_the_map_only():
    grey = np.full((32, 32, 3), 128, np.uint8)
    drop = np.zeros((4, 4))
    drop[0, 3] = 1.0
    out = rv.occlusion_overlay(grey, drop, size=128, centre=(4.0, 28.0), spread=20.0, image_size=32)
    cyan = (out == render.QUERY_COLOR).all(-1)
    assert cyan[16, 112] and cyan[16, 108]  # the cross at (4, 28) * 4
    assert not cyan[:, 128:].any()          # the circle never reaches the colour bar


def test_concentration_text_and_wrapped_captions():
    text = rv.concentration_text(0.434, 6.07, 0.1, 6 / 64, 12.2)
    assert text == ("evidence: top 10% of patches carry 43% of the drop (even: 9%); "
                    "spread 6.1 px from its centre (even: 12.2 px)")
    assert "no patch lowers" in rv.concentration_text(None, None)
    picture = np.zeros((50, 120, 3), np.uint8)
    one_line = rv.captioned(picture, "short")
    several = rv.captioned(picture, text)
    assert several.shape[1] == 120 and several.shape[0] >= one_line.shape[0] + 3 * (one_line.shape[0] - 50)
    np.testing.assert_array_equal(several[-50:], picture)


def _robustness(accuracy, unchanged, flip_accuracy, flip_unchanged, labels=True):
    acc = np.asarray(accuracy, float)
    unc = np.asarray(unchanged, float)
    return SimpleNamespace(shifts=np.arange(len(unc)), padding="zero",
                           accuracy=acc if labels else None, unchanged=unc,
                           accuracy_by_direction=np.stack([acc - 0.01, acc + 0.01]) if labels else None,
                           unchanged_by_direction=np.stack([unc - 0.02, unc]),
                           flip_accuracy=flip_accuracy if labels else None, flip_unchanged=flip_unchanged)


def test_robustness_plot_draws_both_models_in_the_app_colours():
    fig = rv.plot_shift_robustness({"A": _robustness([0.8, 0.7, 0.6], [1, 0.8, 0.7], 0.78, 0.9),
                                    "B": _robustness([0.82, 0.8, 0.79], [1, 0.9, 0.85], 0.8, 0.92)})
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    for ax in fig.axes:
        lines = [line for line in ax.get_lines() if line.get_linestyle() != "None"]
        assert [to_rgb(line.get_color()) for line in lines] == [to_rgb(plots.model_color(k)) for k in (0, 1)]
        stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
        assert [tuple(s.get_xdata()) for s in stars] == [(3.0,), (3.0,)]
        assert [t.get_text() for t in ax.get_xticklabels()][-1] == "flip"
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_ydata(), [0.8, 0.7, 0.6])
    assert plots.figure_to_array(fig).ndim == 3


def test_robustness_plot_without_labels_says_so():
    fig = rv.plot_shift_robustness({"A": _robustness([0, 0], [1, 0.5], None, 0.9, labels=False)})
    assert "no labels" in [t.get_text() for t in fig.axes[0].texts]
    assert len(fig.axes[1].get_lines()) == 2


def test_strip_marks_changed_answers():
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(3, 8, 8, 3)).astype(np.uint8)
    answers = [("A", ["cat", "cat", "dog"], [0.5, 0.6, 0.7]), ("B", ["dog", "dog", "dog"], [0.4, 0.5, 0.6])]
    out = rv.shift_strip_picture(images, ["-1 px", "0 px", "+1 px"], answers, centre=1, cell=64)
    assert out.shape[1] == 3 * 64 + 2 * 4
    line = (out.shape[0] - 64 - 2) // 3
    np.testing.assert_array_equal(out[line:line + 64, :64], images[0].repeat(8, 0).repeat(8, 1))
    changed = (out == rv._CHANGED).all(-1)
    a_row = slice(line + 64, line + 64 + line)
    b_row = slice(line + 64 + line, line + 64 + 2 * line)
    assert changed[a_row, 2 * 68:].any() and not changed[a_row, :2 * 68].any()  # only A's "dog" changed
    assert not changed[b_row].any()
    with pytest.raises(ValueError, match="each of the 3 copies"):
        rv.shift_strip_picture(images, ["a", "b"], answers)


def test_a_strip_in_rows_keeps_every_copy_and_marks_changes_against_the_unshifted_copy():
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, size=(7, 8, 8, 3)).astype(np.uint8)
    names = ["cat", "cat", "cat", "cat", "dog", "cat", "dog"]
    answers = [("A", names, [0.5] * 7)]
    labels = [f"{i - 3} px" for i in range(7)]
    one = rv.shift_strip_picture(images, labels, answers, centre=3, cell=32)
    rows = rv.shift_strip_picture(images, labels, answers, centre=3, cell=32, per_row=4)
    assert rows.shape[1] == 4 * 32 + 3 * 4 and rows.shape[0] > 2 * (one.shape[0] - 1)
    line = (one.shape[0] - 32 - 2) // 2
    np.testing.assert_array_equal(rows[line:line + 32, :32], images[0].repeat(4, 0).repeat(4, 1))
    second = one.shape[0] + 8  # the second row starts below the first and a gap
    np.testing.assert_array_equal(rows[second + line:second + line + 32, :32], images[4].repeat(4, 0).repeat(4, 1))
    changed = (rows == rv._CHANGED).all(-1)
    assert not changed[:one.shape[0]].any()  # the first row's answers are all the unshifted copy's "cat"
    assert changed[second + line + 32:, :32].any() and not changed[second + line + 32:, 36:68].any()
