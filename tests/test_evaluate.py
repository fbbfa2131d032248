import os
import shutil
import subprocess
import sys

import numpy as np

from explorer.analysis.evaluate import evaluate, format_table, markdown_table
from explorer.checkpoints.store import read_card
from tests.helpers import ROOT


def test_evaluate_side_by_side_and_store(tiny_checkpoints, tmp_path, data_dir):
    folders = [shutil.copytree(p, tmp_path / p.name) for p in tiny_checkpoints.values()]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "explorer.evaluate", *map(str, folders), "--data-dir", str(data_dir),
                          "--markdown", "--locality", "8", "--flip"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "tiny-vanilla" in lines[0] and "tiny-spt_lsa" in lines[0]
    assert any(line.startswith("top1") for line in lines) and any(line.startswith("airplane") for line in lines)
    assert "| `tiny-spt_lsa` | spt_lsa |" in out.stdout
    assert "locality over the first 8 test images" in out.stdout
    assert "entropy L1" in out.stdout and "entropy L2" not in out.stdout  # tiny: layers L0 and L1
    for folder in folders:
        card = read_card(folder)
        assert card.metrics.test_count == 1000 and len(card.metrics.test_per_class) == 10
        assert card.metrics.check_set == "cifar10 test images 0-199" and 0 <= card.metrics.check_top1 <= 1
        assert f"{100 * card.metrics.test_top1:.2f} %" in (folder / "README.md").read_text()
        assert 0 < card.metrics.test_top1_flip <= 1 and 0 < card.metrics.test_top5_flip <= 1
        assert f"image + mirror averaged | {100 * card.metrics.test_top1_flip:.2f} %" in (
            folder / "README.md").read_text()
    assert any(line.startswith("top1 +mirror") for line in lines)


def test_flip_averages_each_image_with_its_mirror(tiny_checkpoints, data_dir):
    from explorer.checkpoints.store import load_checkpoint
    from explorer.model.predict import accuracy_metrics
    from explorer.model.probe import softmax

    result = evaluate([str(tiny_checkpoints["spt_lsa"])], data_dir=str(data_dir), limit=64, flip=True)[0]
    model, _ = load_checkpoint(tiny_checkpoints["spt_lsa"])
    images, labels = result.dataset.x_test[:64], result.dataset.y_test[:64]
    mirrored = np.stack([np.fliplr(im) for im in images])
    probs = sum(softmax(np.asarray(model(batch.astype("float32")))) for batch in (images, mirrored))
    expected = accuracy_metrics(probs, labels)
    assert result.flip.top1 == expected.top1 and result.flip.top5 == expected.top5
    assert result.metrics.top1 == accuracy_metrics(np.asarray(model(images.astype("float32"))), labels).top1


def test_limit_does_not_store(tiny_checkpoints, tmp_path, data_dir):
    folder = shutil.copytree(tiny_checkpoints["vanilla"], tmp_path / "v")
    before = read_card(folder)
    results = evaluate([str(folder)], data_dir=str(data_dir), limit=50)
    assert results[0].metrics.count == 50 and read_card(folder) == before
    assert "50" in format_table(results) and markdown_table(results).count("\n") == 2


def test_locality_per_layer(tiny_checkpoints, data_dir):
    """Batched averages equal the one-batch numbers; tau only for LSA; the table gets the rows."""
    from explorer.analysis.evaluate import locality
    from explorer.checkpoints.store import load_checkpoint
    from explorer.model.config import ViTConfig
    from explorer.model.probe import Probe, attention_entropy, mean_attention_distance

    results = evaluate([str(p) for p in tiny_checkpoints.values()], data_dir=str(data_dir), limit=20,
                       store=False, locality_images=10)
    by_variant = {r.card.variant: r.locality for r in results}
    model, card = load_checkpoint(tiny_checkpoints["spt_lsa"])
    config = ViTConfig.from_dict(card.config)
    images = results[0].dataset.x_test[:10]
    attention = Probe(model, config)(images).attention
    batched = locality(model, card, images, batch_size=3)
    np.testing.assert_allclose(batched.distance, mean_attention_distance(
        attention, config.grid_size, config.pixels_per_patch).mean(-1), rtol=1e-5)
    np.testing.assert_allclose(batched.entropy, attention_entropy(attention).mean(-1), rtol=1e-5)
    assert by_variant["spt_lsa"].images == 10 and len(by_variant["spt_lsa"].distance) == config.num_layers
    np.testing.assert_allclose(by_variant["spt_lsa"].distance, batched.distance, rtol=1e-5)
    assert all(t > 0 for t in by_variant["spt_lsa"].tau) and set(by_variant["vanilla"].tau) == {None}
    table = format_table(results)
    assert "distance px L0" in table and "tau L1" in table and "distance mean" in table
    tau_row = next(line for line in table.splitlines() if line.startswith("tau L0")).split()
    assert tau_row[2] == "-" and float(tau_row[3]) > 0  # vanilla column, then spt_lsa column


def test_bad_image_counts_are_refused(capsys):
    from explorer.analysis.evaluate import main
    for args in (["--locality", "-1"], ["--limit", "0"]):
        try:
            main(["checkpoints/cifar10-vanilla", *args])
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"{args} was accepted")
        assert "take a positive number of images" in capsys.readouterr().err
