"""The 2x2 ablation's README section, from evaluate-shaped results, and the CLI's refusals."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from explorer.analysis.evaluate import Evaluation, Locality
from explorer.core.card import Card, Metrics
from explorer.model.ablation import ORDER, PAPER, AblationError, ablation_markdown, by_variant
from explorer.model.predict import Accuracy
from tests.helpers import tiny_config

CLASSES = ["cat", "dog"]
TOP1 = {"vanilla": 0.70, "lsa": 0.71, "spt": 0.74, "spt_lsa": 0.75}


def result(variant: str, top1: float, count: int = 1000, classes=CLASSES) -> Evaluation:
    config = tiny_config(variant=variant if variant in ORDER else "vanilla").to_dict()
    per_class = [top1 - 0.05, top1 + 0.05]
    return Evaluation(f"checkpoints/cifar10-{variant}",
                      Card(name=f"cifar10-{variant}", variant=variant, config=config,
                           metrics=Metrics(val_top1=top1 + 0.01, top1=top1 + 0.1, test_top1_flip=top1 + 0.02)),
                      SimpleNamespace(name="cifar10", class_names=classes),
                      Accuracy(top1, 0.99, per_class, count),
                      locality=Locality(8, [10.0 + k for k in range(2)], [3.0, 2.5],
                                        [4.5, 4.2] if "lsa" in variant else [None, None]))


def test_the_section_holds_the_grid_the_table_beside_the_paper_and_how_the_gains_add_up():
    text = ablation_markdown([result(v, TOP1[v]) for v in reversed(ORDER)])  # any order
    assert "On all 1,000 cifar10 test images:" in text
    assert "| plain patches | ViT: **70.00 %** | LSA alone: **71.00 %** (+1.00) |" in text
    assert "| shifted patches (SPT) | SPT alone: **74.00 %** (+4.00) | SPT + LSA: **75.00 %** (+5.00) |" in text
    row = next(line for line in text.splitlines() if line.startswith("| `cifar10-spt` |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:8] == ["**74.00 %**", "+4.00", "99.00 %", "76.00 %", "75.00 %", "84.00 %"]
    assert cells[8:] == [f"{PAPER['spt'][0]:.2f} % (+2.48)", f"{PAPER['spt'][1]:.2f} % (+3.60)"]
    assert ("LSA alone +1.00, SPT alone +4.00, both +5.00; the sum of the parts is +5.00, so together they add "
            "+0.00 beyond it. SPT alone reaches 80 % of the joint gain and LSA alone 20 %.") in text
    assert "In the paper (CIFAR-100): LSA +1.06, SPT +2.48, both +3.11 (SPT alone 80 %" in text
    assert "| dog | 75.0 % | +1.0 | +4.0 | +5.0 |" in text
    start = tiny_config(variant="lsa").initial_tau
    assert f"| LSA alone (starts at √d_k = {start:.3g}) | 4.50 | 4.20 |" in text and "| SPT alone (" not in text.split(
        "learned τ")[1].split("| per layer")[0]
    assert "| distance (px), SPT + LSA | 10.0 | 11.0 | 10.5 |" in text
    # Tau is a weight: its table comes before the line that says over how many images the attention was measured.
    assert text.index("| learned τ") < text.index("Attention over the first") < text.index("| per layer |")


def test_a_limited_evaluation_says_so():
    results = [result(v, TOP1[v], count=300) for v in ORDER]
    for r in results:
        r.dataset.x_test = [None] * 10_000
    assert ablation_markdown(results).startswith("On the first 300 of 10,000 cifar10 test images:")


def test_no_joint_gain_is_said_plainly_and_locality_is_optional():
    results = [result(v, 0.70 if v != "lsa" else 0.72) for v in ORDER]
    for r in results:
        r.locality = None
    text = ablation_markdown(results)
    assert "do not beat the plain ViT" in text
    assert "| per layer |" not in text and "| learned τ, mean of heads |" not in text


@pytest.mark.parametrize("variants, message", [
    (["vanilla", "lsa", "spt"], "missing spt_lsa"),
    (["vanilla", "lsa", "spt", "spt_lsa", "spt"], "spt twice"),
    (["vanilla", "lsa", "spt", "spt_lsa", "mystery"], "unknown variant mystery"),
])
def test_anything_but_one_checkpoint_per_variant_is_refused_with_the_reason(variants, message):
    with pytest.raises(AblationError, match=message):
        by_variant([result(v, 0.7) for v in variants])


def test_different_test_sets_are_refused():
    results = [result(v, 0.7) for v in ORDER]
    results[2] = result("spt", 0.7, count=500)
    with pytest.raises(AblationError, match="different test sets"):
        ablation_markdown(results)


def test_the_cli_refuses_an_incomplete_ablation_before_evaluating(tiny_checkpoints, tmp_path, data_dir, capsys):
    from explorer.analysis.evaluate import main  # what `python -m explorer.evaluate` calls, in this process
    folders = [shutil.copytree(p, tmp_path / p.name) for p in tiny_checkpoints.values()]
    cards = [(f / "explorer.json").read_bytes() for f in folders]
    assert main([*map(str, folders), "--data-dir", str(data_dir), "--ablation"]) == 2
    out = capsys.readouterr()
    assert "missing lsa, spt" in out.err and out.out == ""  # nothing evaluated, no card touched
    assert [(f / "explorer.json").read_bytes() for f in folders] == cards
