"""The study's numbers from results rows: means and sample spreads, the paired gap seed by seed, the 2x2
corners, and the figure (a line and band per variant, the shipped pair as stars)."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.analysis.plots import figure_to_array
from explorer.study import report as study_report

ROWS = [dict(train_images=n, variant=v, seed=s, test_top1=t) for n, v, s, t in [
    (1000, "vanilla", 0, 0.30), (1000, "vanilla", 1, 0.32), (1000, "vanilla", 2, 0.31),
    (1000, "spt_lsa", 0, 0.35), (1000, "spt_lsa", 1, 0.36), (1000, "spt_lsa", 2, 0.38),
    (1000, "spt", 0, 0.34), (1000, "lsa", 0, 0.30),
    (20000, "vanilla", 0, 0.70), (20000, "spt_lsa", 0, 0.72), (20000, "spt_lsa", 1, 0.74)]]


def test_summary_means_and_sample_spread():
    s = study_report.summary(ROWS)
    assert s[(1000, "vanilla")]["mean"] == pytest.approx(0.31) and s[(1000, "vanilla")]["n"] == 3
    assert s[(1000, "vanilla")]["std"] == pytest.approx(np.std([0.30, 0.32, 0.31], ddof=1))
    assert s[(20000, "vanilla")]["std"] == 0.0 and s[(20000, "spt_lsa")]["seeds"] == [0, 1]


def test_the_gap_pairs_seeds_and_skips_unpaired_ones():
    gaps = study_report.paired_gaps(ROWS)
    assert gaps[1000]["gaps"] == pytest.approx([0.05, 0.04, 0.07]) and gaps[1000]["seeds"] == [0, 1, 2]
    assert gaps[1000]["std"] == pytest.approx(np.std([0.05, 0.04, 0.07], ddof=1))
    assert gaps[20000]["seeds"] == [0] and gaps[20000]["std"] is None  # seed 1 of SPT+LSA has no ViT


def test_the_interval_of_the_mean_gap():
    lo, hi = study_report.interval([0.05, 0.04, 0.07])
    half = 4.303 * np.std([0.05, 0.04, 0.07], ddof=1) / np.sqrt(3)
    assert (lo, hi) == pytest.approx((0.16 / 3 - half, 0.16 / 3 + half))
    assert study_report.interval([0.05]) is None
    assert study_report.t95(12) == study_report.T95[10] and study_report.t95(100) == 1.96


def test_markdown_tables():
    text = study_report.markdown(ROWS)
    assert "| 1,000 | 31.00 ± 1.00 (3) | 30.00 (1) | 34.00 (1) | 36.33 ± 1.53 (3) |" in text
    assert "| 1,000 | 3 | +5.33 ± 1.53 | +5.00, +4.00, +7.00 | 1.00, 1.53 | +1.54 to +9.13 |" in text
    # The 2x2 over the seeds all four ran (seed 0 here): each change over the ViT is that of the same seeds.
    assert "| 1,000 | 30.00 (1) | 30.00 (1), +0.00 | 34.00 (1), +4.00 | 35.00 (1), +5.00 |" in text
    assert "20,000 |" in text.split("2x2")[0] and "20,000" not in text.split("2x2")[1]  # not all four there
    assert study_report.markdown([]) == "No trial has finished yet."
    three = [r for r in ROWS if r["variant"] != "lsa"]
    assert "None yet: no size has all four variants." in study_report.markdown(three)
    apart = [r for r in ROWS if r["variant"] != "lsa"] + [dict(train_images=1000, variant="lsa", seed=5, test_top1=0.3)]
    assert study_report.corners_table(apart) == "None yet: no size has all four variants on a seed they share."


def test_the_2x2_as_paired_effects_with_intervals():
    rows = ROWS + [dict(train_images=1000, variant=v, seed=s, test_top1=t) for v, s, t in [
        ("spt", 1, 0.35), ("spt", 2, 0.37), ("lsa", 1, 0.33)]]
    table = study_report.effects_table(rows)
    head, rule, line = table.splitlines()
    assert head == ("| train images | SPT alone − ViT | LSA alone − ViT | SPT + LSA − SPT alone "
                    "| SPT + LSA − LSA alone |")
    # SPT - ViT over seeds 0-2: +4, +3, +6; LSA - ViT over seeds 0-1 only (seed 2 has no LSA): 0, +1;
    # SPT+LSA - SPT: +1, +1, +1 (no spread: the interval is the mean); SPT+LSA - LSA: +5, +3.
    spt = study_report.interval([0.04, 0.03, 0.06])
    lsa = study_report.interval([0.0, 0.01])
    assert line == (f"| 1,000 | +4.33 ({100 * spt[0]:+.2f} to {100 * spt[1]:+.2f}) "
                    f"| +0.50 ({100 * lsa[0]:+.2f} to {100 * lsa[1]:+.2f}) | +1.00 (+1.00 to +1.00) "
                    f"| +4.00 ({100 * study_report.interval([0.05, 0.03])[0]:+.2f} to "
                    f"{100 * study_report.interval([0.05, 0.03])[1]:+.2f}) |")
    one = study_report.effects_table(ROWS).splitlines()[2]  # one seed of each half: means, no interval
    assert one == "| 1,000 | +4.00 | +0.00 | +1.00 | +5.00 |"
    assert study_report.effects_table([r for r in ROWS if r["variant"] != "lsa"]).startswith("None yet")
    assert table in study_report.markdown(rows)


def test_curve_figure_draws_lines_bands_and_stars():
    fig = study_report.curve_figure(ROWS, {"vanilla": {"train_images": 45000, "test_top1": 0.77, "epochs": 200}})
    ax, gap = fig.axes
    assert ax.get_xscale() == "log" and len(ax.get_lines()) == 4 and len(ax.collections) == 4 + 1
    (legend,) = fig.legends  # below the panels, over no curve
    labels = [t.get_text() for t in legend.get_texts()]
    assert "ViT, shipped (200 epochs, staged recipe)" in labels and "SPT + LSA" in labels
    figure_to_array(fig)
    assert legend.get_window_extent().y1 <= min(a.get_window_extent().y0 for a in fig.axes) + 1
    # SPT alone and LSA alone run level with SPT + LSA and the ViT: dashed and on top, so both stay seen.
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert {k: v.get_linestyle() for k, v in lines.items()} == {"ViT": "-", "LSA alone": "--", "SPT alone": "--",
                                                                 "SPT + LSA": "-"}
    assert min(lines["SPT alone"].get_zorder(), lines["LSA alone"].get_zorder()) > lines["SPT + LSA"].get_zorder()
    assert figure_to_array(fig).shape[2] == 3
    # The gap panel: a mean per size with both models, the 95 % interval where there are two seeds or more.
    assert list(gap.get_lines()[0].get_xdata()) == [1000, 20000]
    assert list(gap.get_lines()[0].get_ydata()) == pytest.approx([100 * 0.16 / 3, 2.0])
    assert "95 % interval of the mean" in [t.get_text() for t in gap.get_legend().get_texts()]
    full = study_report.curve_figure(ROWS, {"vanilla": {"train_images": 45000, "test_top1": 0.77},
                                            "spt_lsa": {"train_images": 45000, "test_top1": 0.80}})
    stars = [c for c in full.axes[1].collections if c.get_label() == "shipped pair (0.2 M, staged recipe)"]
    assert len(stars) == 1 and stars[0].get_offsets()[0][1] == pytest.approx(3.0)
    # the paper recipe's arm (dotted, hollow squares) and the paper-scale pair (diamonds) beside them
    paper = [dict(r, recipe="paper", variant={"vanilla": "vanilla", "spt_lsa": "spt_lsa_head"}[r["variant"]],
                  test_top1=r["test_top1"] + 0.05 * (r["variant"] == "spt_lsa"))
             for r in ROWS if r["variant"] in ("vanilla", "spt_lsa") and r["train_images"] == 1000]
    scale = {"vanilla": {"train_images": 45000, "test_top1": 0.85},
             "spt_lsa": {"train_images": 45000, "test_top1": 0.9}}
    both = study_report.curve_figure(ROWS + paper, None, paper_scale=scale)
    lines = {line.get_label(): line for line in both.axes[0].get_lines()}
    assert lines["ViT, paper recipe"].get_linestyle() == ":" and lines["ViT, paper recipe"].get_marker() == "s"
    assert "SPT + LSA, per-head τ, paper recipe" in lines
    diamonds = {c.get_label(): c.get_offsets()[0][1] for c in both.axes[0].collections if c.get_label().endswith(
        "paper scale, 2.7 M, paper recipe")}
    assert diamonds == pytest.approx({"ViT, paper scale, 2.7 M, paper recipe": 85.0,
                                      "SPT + LSA, paper scale, 2.7 M, paper recipe": 90.0})
    arm = [line for line in both.axes[1].get_lines() if line.get_label() == study_report.PAPER_ARM_GAP]
    assert len(arm) == 1 and list(arm[0].get_ydata()) == pytest.approx([100 * 0.16 / 3 + 5.0])
    gap_diamond = [c for c in both.axes[1].collections if c.get_label() == "paper scale, 2.7 M, paper recipe"]
    assert gap_diamond[0].get_offsets()[0][1] == pytest.approx(5.0)
    alone = study_report.gap_figure(ROWS).axes[0]  # the app's second figure: the same panel on its own
    assert list(alone.get_lines()[0].get_ydata()) == list(gap.get_lines()[0].get_ydata())
    assert len(study_report.curve_figure(ROWS, gap_panel=False).axes) == 1
    assert "no size has both models yet" in study_report.gap_figure([]).axes[0].texts[0].get_text()


def test_the_mechanisms_equal_the_apps_own_per_image_analysis(tiny_checkpoints, cifar10, tmp_path):
    """python -m explorer.study mechanisms measures what the Attention tab shows: for one image, its entropy
    and mean distance per layer are the app's (reports.locality through the app's loaded model), its
    self-attention is the probe's diagonal, and a masked (LSA) model's is 0."""
    import numpy as np

    from explorer.analysis.reports import locality
    from explorer.app.models import ModelStore
    from explorer.model.probe import Probe
    from explorer.study import mechanisms
    store = ModelStore(tiny_checkpoints["vanilla"].parent)
    image = cifar10.x_test[:1]
    for variant in ("vanilla", "spt_lsa"):
        loaded = store.get(tiny_checkpoints[variant].name)
        rows = mechanisms.measure(loaded.model, loaded.config, image)
        app = locality([("m", loaded)], image)
        np.testing.assert_allclose([r["entropy"] for r in rows], app.entropy["m"].mean(-1), rtol=1e-6)
        np.testing.assert_allclose([r["distance_px"] for r in rows], app.distance["m"].mean(-1), rtol=1e-6)
        attention = Probe(loaded.model, loaded.config)(image).attention[0]
        diagonal = np.diagonal(attention, axis1=-2, axis2=-1).mean(-1).mean(-1)
        np.testing.assert_allclose([r["self_attention"] for r in rows], diagonal, rtol=1e-6)
        if variant == "spt_lsa":
            assert all(r["self_attention"] == 0 and r["tau"] and r["tau_start"] == loaded.config.initial_tau
                       for r in rows)
        else:
            assert all(r["self_attention"] > 0 and r["tau"] is None for r in rows)
    # several images in batches: the mean over images, the same as all of them at once
    many = cifar10.x_test[:7]
    loaded = store.get(tiny_checkpoints["vanilla"].name)
    batched = mechanisms.measure(loaded.model, loaded.config, many, batch=3)
    whole = mechanisms.measure(loaded.model, loaded.config, many, batch=100)
    np.testing.assert_allclose([r["entropy"] for r in batched], [r["entropy"] for r in whole], rtol=1e-5)
    # the table and the figure from a CSV round trip
    rows, heads = mechanisms.run([tiny_checkpoints["vanilla"], tiny_checkpoints["spt_lsa"]], many)
    mechanisms.write_csv(rows, tmp_path / "m.csv")
    back = mechanisms.read_csv(tmp_path / "m.csv")
    assert [r["layer"] for r in back] == [r["layer"] for r in rows] and "| " in mechanisms.markdown(back)
    # outside study/ a model is taken for a shipped one, trained in stages; a study model names its recipe
    assert {r["recipe"] for r in back} == {"staged"}
    # in paper/ it is a paper-scale model, named by its reference: never merged with a shipped one of its name
    import shutil
    scale = tmp_path / "paper" / tiny_checkpoints["vanilla"].name
    shutil.copytree(tiny_checkpoints["vanilla"], scale)
    both, _ = mechanisms.run([tiny_checkpoints["vanilla"], scale], many)
    assert {(r["model"], r["recipe"]) for r in both} == {(tiny_checkpoints["vanilla"].name, "staged"),
                                                         (f"paper/{scale.name}", "paper scale")}
    assert [m["recipe"] for m in mechanisms.per_model(both)] == ["staged", "paper scale"]
    # per head: the layer's numbers are the means over its heads; distance over the image's side
    whole_heads = whole[0]["heads"]
    assert np.mean([h["entropy"] for h in whole_heads]) == pytest.approx(whole[0]["entropy"], rel=1e-6)
    mine = [h for h in heads if h["model"] == tiny_checkpoints["vanilla"].name and h["layer"] == 0]
    assert np.mean([h["distance"] for h in mine]) == pytest.approx(whole[0]["distance_px"] / loaded.config.image_size,
                                                                   rel=1e-5)
    assert len(mine) == loaded.config.num_heads
    lsa = [h for h in heads if h["model"] == tiny_checkpoints["spt_lsa"].name]
    assert all(h["tau_ratio"] is not None and h["self_attention"] == 0 for h in lsa)
    mechanisms.write_csv(heads, tmp_path / "h.csv", mechanisms.HEAD_COLUMNS)
    table = mechanisms.head_table(mechanisms.read_csv(tmp_path / "h.csv"))
    assert table.count("\n") == 3 and "layer 0: smallest / mean distance" in table
    assert mechanisms.figure(back).axes
    # the layer's most local head: the smallest of its heads' distances
    assert back[0]["distance_min_px"] == pytest.approx(min(h["distance_px"] for h in whole[0]["heads"]), rel=1e-5)
    # the Small data tab's words, from these numbers (taken as the light study's: outside study/ they are staged)
    said = mechanisms.answer([{**r, "recipe": "light"} for r in back])
    assert "τ ends at" in said and "a ViT's query gives its own patch" in said and "CIFAR-100" in said


def test_the_recipes_gaps_side_by_side_never_mix_recipes():
    """Issue 54: each mechanism's paired gap under the light recipe and under the paper's, from the rows of
    that recipe only; the CutMix-only ViT against the light ViT of the same seed; rows without a recipe
    column are the light study's."""
    rows = []
    for seed in range(3):
        for variant, light, paper in (("vanilla", 0.35, 0.30), ("lsa_head", 0.352, 0.33), ("spt", 0.42, 0.40),
                                      ("spt_lsa_head", 0.425, 0.45)):
            rows.append({"train_images": 1000, "variant": variant, "seed": seed, "test_top1": light + 0.001 * seed})
            rows.append({"train_images": 1000, "variant": variant, "seed": seed, "recipe": "paper",
                         "test_top1": paper + 0.002 * seed})
        rows.append({"train_images": 1000, "variant": "vanilla", "seed": seed, "recipe": "cutmix",
                     "test_top1": 0.37 + 0.001 * seed})
    gaps = study_report.recipe_gaps(rows)
    assert gaps[("LSA alone − ViT", "light")][1000]["mean"] == pytest.approx(0.002)
    assert gaps[("LSA alone − ViT", "paper")][1000]["mean"] == pytest.approx(0.03)
    assert gaps[("SPT + LSA − SPT alone", "paper")][1000]["mean"] == pytest.approx(0.05)
    assert gaps[(study_report.RECIPE_ON_VIT, "cutmix")][1000]["gaps"] == pytest.approx([0.02] * 3)
    assert gaps[(study_report.RECIPE_ON_VIT, "paper")][1000]["gaps"] == pytest.approx([-0.05, -0.049, -0.048])
    # the light study's own tables read the light rows only, as before the paper rows came
    assert study_report.summary(rows)[(1000, "vanilla")]["mean"] == pytest.approx(0.351)
    table = study_report.recipe_gap_table(rows)
    assert "| 1,000 | LSA alone − ViT | +0.20 (+0.20 to +0.20) (3) | +3.00 (+3.00 to +3.00) (3) | – |" in table
    assert ("| 1,000 | the recipe − the light one, on the ViT | – | -4.90 (-5.15 to -4.65) (3) | "
            "+2.00 (+2.00 to +2.00) (3) |") in table
    assert study_report.recipe_gap_table([]).startswith("None yet")


def paper_rows(lsa_paper_gain: float, seeds: int = 3) -> list[dict]:
    """Results rows of both recipes at 1,000 images: LSA alone − ViT is 0 ± noise under the light recipe and
    `lsa_paper_gain` ± the same noise under the paper's."""
    noise = [0.002, -0.001, -0.0015, 0.001][:seeds]
    rows = []
    for seed, e in enumerate(noise):
        rows += [{"train_images": 1000, "variant": "vanilla", "seed": seed, "test_top1": 0.35},
                 {"train_images": 1000, "variant": "lsa_head", "seed": seed, "test_top1": 0.35 + e},
                 {"train_images": 1000, "variant": "vanilla", "seed": seed, "recipe": "paper", "test_top1": 0.43},
                 {"train_images": 1000, "variant": "lsa_head", "seed": seed, "recipe": "paper",
                  "test_top1": 0.43 + lsa_paper_gain + e}]
    return rows


def test_the_small_data_tabs_heading_says_what_the_gaps_measured():
    """Issue 54: the heading over what LSA does to attention follows the paired gaps, recipe by recipe: it
    asks why LSA adds nothing only while no interval says otherwise, and names both recipes once the paper's
    has two seeds or more."""
    light_only = [r for r in paper_rows(0.0) if "recipe" not in r]
    assert study_report.lsa_verdict(light_only) == "none" and study_report.lsa_verdict(light_only, "paper") is None
    assert study_report.lsa_question(light_only).startswith("Why does LSA add nothing here?")
    assert study_report.lsa_question(paper_rows(0.0, seeds=1)).startswith("Why does LSA add nothing here?")
    assert study_report.lsa_verdict(paper_rows(0.0), "paper") == "none"
    assert study_report.lsa_question(paper_rows(0.0)).startswith(
        "Why does LSA alone add nothing measurable here, under the light recipe or the paper's?")
    assert study_report.lsa_verdict(paper_rows(0.02), "paper") == "gain"
    assert study_report.lsa_question(paper_rows(0.02)).startswith("LSA alone gains only under the paper's recipe")
    assert study_report.lsa_verdict(paper_rows(-0.02), "paper") == "loss"
    assert study_report.lsa_question(paper_rows(-0.02)).startswith("What LSA does here, recipe by recipe")
    # the tables: the recipes side by side once another recipe has a row, nothing of it before
    assert "Under the paper's own recipe" in study_report.markdown(paper_rows(0.0))
    assert "Under the paper's own recipe" not in study_report.markdown(light_only)


def mechanism_rows() -> list[dict]:
    """mechanisms.csv rows of four 1,000-image models (ViT and LSA alone under the light and the paper recipe, a
    ViT with CutMix alone) and a 2,500-image light pair, two layers each, with numbers a reader can check."""
    rows = []

    def add(model, variant, recipe, n, entropy, distance, local, share, tau=None):
        for layer in range(2):
            rows.append({"model": model, "variant": variant, "recipe": recipe, "train_images": n, "layer": layer,
                         "tau_mean": tau, "tau_min": tau, "tau_max": tau, "tau_start": 4.0 if tau else None,
                         "entropy": entropy, "distance_px": distance, "distance_min_px": local + 3.2 * layer,
                         "self_attention": share, "patches": 64, "image_size": 32, "test_top1": 0.4})
    add("v1", "vanilla", "light", 1000, 3.6, 16.3, 15.5, 0.016)
    add("l1", "lsa_head", "light", 1000, 3.55, 16.5, 15.8, 0.0, tau=3.9)
    add("c1", "vanilla", "cutmix", 1000, 3.6, 16.1, 15.1, 0.019)
    add("v1p", "vanilla", "paper", 1000, 3.3, 16.2, 14.8, 0.017)
    add("l1p", "lsa_head", "paper", 1000, 3.25, 16.5, 15.3, 0.0, tau=3.8)
    add("v2", "vanilla", "light", 2500, 3.5, 16.2, 15.4, 0.017)
    add("l2", "lsa_head", "light", 2500, 3.45, 16.5, 15.7, 0.0, tau=3.92)
    return rows


def test_the_mechanisms_never_mix_recipes(tmp_path):
    """Issue 54: the words, the table and the figures of `python -m explorer.study mechanisms` keep each
    recipe's models apart: the light study's statements from its models only, the paper's recipe (and CutMix
    alone) in a paragraph and a per-layer figure of their own."""
    from explorer.study import mechanisms
    rows = mechanism_rows()
    said = mechanisms.answer(rows)
    # the light recipe's τ range is its own (0.975 to 0.980), not the paper's 0.95
    assert "τ ends at 0.975 to 0.980 of its start" in said
    assert "by -0.05 nats" in said and "+0.20 to +0.30 px, at 1,000 and 2,500 images" in said
    # the paper's paragraph: the ViT's entropy and its most local head under each recipe
    assert "entropy 3.60 → 3.30 nats" in said
    assert "most local head's mean distance is 0.484 of the image's side under the light recipe and 0.463" in said
    assert "0.472 with CutMix alone" in said and "τ ends at 0.950 to 0.950 of √d_k there too" in said
    assert "the paper's recipe at 1,000 images only" in said and "sharper (entropy" in said
    assert "but hardly more local" in said
    local = [{**r, "distance_min_px": 0.3} if r["model"] == "v1p" else r for r in rows]  # as arXiv 2605.16390 saw
    assert "and more local: its most local head's mean distance is 0.484" in mechanisms.answer(local)
    assert "Under the paper's recipe" not in mechanisms.answer([r for r in rows if r["recipe"] == "light"])
    table = mechanisms.markdown(rows)
    assert "| paper | 1,000 | LSA alone, per-head τ | 0.950 |" in table and "| light | 2,500 | ViT | – |" in table
    assert len(table.splitlines()) == 1 + 1 + 2 + 7  # the words, a blank line, header and rule, a row per model
    # the per-layer figure: one line per model at the size where another recipe ran, styled by recipe
    fig = mechanisms.layer_figure(rows)
    lines = [line for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")]  # not the cited
    labels = [line.get_label() for line in lines]
    assert len(labels) == 5 and "ViT (paper recipe)" in labels and "ViT (light recipe + CutMix)" in labels
    styles = {line.get_label(): line.get_linestyle() for line in lines}
    assert styles["ViT (light recipe)"] == "-" and styles["ViT (paper recipe)"] == "--"
    assert list(lines[0].get_ydata()) == pytest.approx([15.5 / 32, 18.7 / 32])
    assert mechanisms.layer_figure([r for r in rows if r["recipe"] == "light"]) is None
    # the overview figure draws the light study only: two points per variant, one per size
    overview = mechanisms.figure(rows)
    assert all(len(line.get_xdata()) == 2 for line in overview.axes[1].get_lines() if line.get_label() == "ViT")
    # the per-layer table (the Small data tab's): the models at the size where another recipe ran
    layers = mechanisms.layer_table(rows)
    assert len(layers.splitlines()) == 2 + 5 and "2,500" not in layers
    assert "| paper | 1,000 | ViT | 0.463 / 0.506 | 0.562 / 0.506 |" in layers
    # the paper-scale models: a paragraph of their own; no statement about the 0.2 M models takes them in
    scale = rows + [{**r, "model": f"paper/{r['model']}", "recipe": "paper scale", "train_images": 45000,
                     "self_attention": 0.039, "test_top1": 0.8502} for r in rows if r["model"] == "v1"]
    with_scale = mechanisms.answer(scale)
    assert with_scale.replace(mechanisms._paper_scale_paragraph(mechanisms.per_model(scale), 64) + "\n\n", "") == (
        said.replace("differs from the paper's:", "differs from the paper's, but for the paper-scale models above:"))
    assert ("**At the paper's scale**" in with_scale and "the ViT, 85.02 % on the test set: entropy 3.60 nats" in
            with_scale and "gives its own patch 3.9 % of its attention (even attention: 1.56 %)" in with_scale)
    assert "| paper scale | 45,000 | ViT |" in mechanisms.markdown(scale) and "paper scale" not in said
    assert mechanisms.layer_table(scale) == layers and mechanisms.layer_figure(scale) is not None
    # a paper-scale ViT of each augmentation: each says which, and a CSV round trip keeps the recipe
    both = scale + [{**r, "model": f"paper/{r['model']}-autoaugment", "recipe": "paper scale, AutoAugment",
                     "train_images": 45000, "self_attention": 0.02, "test_top1": 0.91}
                    for r in rows if r["model"] == "v1"]
    said_both = mechanisms.answer(both)
    assert "the ViT with RandAugment, 85.02 % on the test set" in said_both
    assert "the ViT with AutoAugment, 91.00 % on the test set" in said_both
    mechanisms.write_csv(both, tmp_path / "both.csv")
    assert [m["recipe"] for m in mechanisms.per_model(mechanisms.read_csv(tmp_path / "both.csv"))][-2:] == [
        "paper scale", "paper scale, AutoAugment"]
    # a CSV written before the most-local column still reads and says the rest
    old = [{k: v for k, v in r.items() if k not in ("distance_min_px", "image_size")} for r in rows]
    assert "entropy 3.60 → 3.30 nats" in mechanisms.answer(old) and "| – |" in mechanisms.markdown(old)
    assert mechanisms.layer_table(old) == ""


def test_the_answer_at_three_settings_sets_them_side_by_side():
    """Issue 73: 0.2 M under the light recipe, 0.2 M under the paper's, 2.7 M at the paper's scale, a row each
    with what SPT + LSA and LSA alone add (paired over seeds, or one seed at the paper's scale), how far τ
    moved, the ViT's most self-attending head and the most local heads; and the caveats in words."""
    from explorer.study import mechanisms
    def layer(model, variant, recipe, n, top1, tau=None, self_max=0.02, local=0.4):
        return {"model": model, "variant": variant, "recipe": recipe, "train_images": n, "layer": 0,
                "tau_mean": tau, "tau_min": tau, "tau_max": tau, "tau_start": 4.0 if tau else None, "entropy": 3.0,
                "distance_px": 10.0, "distance_min_px": local * 32, "self_attention": self_max / 2,
                "self_attention_max": self_max, "patches": 64, "image_size": 32, "test_top1": top1}
    rows = [layer("a", "vanilla", "light", 1000, 0.35), layer("b", "spt_lsa", "light", 1000, 0.42, tau=4.2),
            layer("c", "vanilla", "paper", 1000, 0.43), layer("d", "spt_lsa_head", "paper", 1000, 0.46, tau=3.8),
            layer("paper/cifar10-vanilla", "vanilla", mechanisms.PAPER_SCALE, 45000, 0.8502, self_max=0.155,
                  local=0.008),
            layer("paper/cifar10-spt_lsa", "spt_lsa_head", mechanisms.PAPER_SCALE, 45000, 0.8991, tau=5.8, local=0.235)]
    results = []
    for seed in range(3):
        results += [{"train_images": 1000, "variant": "vanilla", "seed": seed, "recipe": "light", "test_top1": 0.35},
                    {"train_images": 1000, "variant": "spt_lsa", "seed": seed, "recipe": "light",
                     "test_top1": 0.41 + 0.01 * seed},
                    {"train_images": 1000, "variant": "vanilla", "seed": seed, "recipe": "paper", "test_top1": 0.43},
                    {"train_images": 1000, "variant": "spt_lsa_head", "seed": seed, "recipe": "paper",
                     "test_top1": 0.46}]
    table = mechanisms.settings_table(rows, results)
    lines = table.splitlines()
    assert len(lines) == 5
    assert lines[2].startswith("| 0.2 M, the light recipe (crop and flip), 1,000 images | +7.00 at 1,000 (3 seeds) | "
                               "not trained | 1.05 to 1.05 | 2.0\u00a0% (even:\u00a01.56\u00a0%) | 0.400 / 0.400 |")
    assert lines[3].startswith("| 0.2 M, the paper's recipe, 1,000 images | +3.00 at 1,000 (3 seeds) |")
    assert lines[4] == ("| 2.7 M, the paper's recipe at the paper's scale, 45,000 images | +4.89 (one seed) | "
                        "to train | 1.45 to 1.45 | 15.5\u00a0% (even:\u00a01.56\u00a0%) | 0.008 / 0.235 |")
    said = mechanisms.three_settings(rows, results)
    assert said.startswith("**What SPT + LSA does, at three settings**") and table in said
    assert "+0.95" in said and "under-fits" in said and "still to be trained" in said
    assert mechanisms.three_settings(rows[:2], []).count("\n|") == 3  # one setting: one row, still a table
    assert mechanisms.three_settings([], []) == ""
