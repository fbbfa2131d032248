import shutil
import subprocess
import sys
import os

from explorer.checkpoints import read_card
from explorer.evaluate import evaluate, format_table, markdown_table
from tests.conftest import ROOT


def test_evaluate_side_by_side_and_store(tiny_checkpoints, tmp_path, data_dir):
    folders = [shutil.copytree(p, tmp_path / p.name) for p in tiny_checkpoints.values()]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "explorer.evaluate", *map(str, folders), "--data-dir", str(data_dir),
                          "--markdown"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "tiny-vanilla" in lines[0] and "tiny-spt_lsa" in lines[0]
    assert any(line.startswith("top1") for line in lines) and any(line.startswith("airplane") for line in lines)
    assert "| `tiny-spt_lsa` | spt_lsa |" in out.stdout
    for folder in folders:
        card = read_card(folder)
        assert card["metrics"]["test_count"] == 10000 and len(card["metrics"]["test_per_class"]) == 10
        assert card["metrics"]["check_set"] == "cifar10 test images 0-199" and 0 <= card["metrics"]["check_top1"] <= 1
        assert f"{100 * card['metrics']['test_top1']:.2f} %" in (folder / "README.md").read_text()


def test_limit_does_not_store(tiny_checkpoints, tmp_path, data_dir):
    folder = shutil.copytree(tiny_checkpoints["vanilla"], tmp_path / "v")
    before = read_card(folder)
    results = evaluate([str(folder)], data_dir=str(data_dir), limit=50)
    assert results[0]["metrics"]["count"] == 50 and read_card(folder) == before
    assert "50" in format_table(results) and markdown_table(results).count("\n") == 2
