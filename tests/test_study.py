"""The small-data study's grid: read and checked, each trial exactly an `explorer.train` run, and the grid
on a real local Ray Tune, stopped mid-way with Ctrl-C and restarted, ending as the trials run directly."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from explorer.study.grid import StudyError, main, plan_table, read_grid, write_results
from explorer.study.report import read_results
from explorer.train import NewModelRun, parse_args
from tests.helpers import ROOT

TINY_GRID = {
    "name": "tiny-grid", "dataset": "cifar10", "preset": "tiny", "split_seed": 0, "batch_size": 16,
    "test_subset": 200, "keep": {"dir": "kept", "seed": 0, "variants": ["vanilla", "spt_lsa"]},
    "sizes": [{"train_images": 200, "epochs": 20, "val_every": 5, "seeds": [0], "variants": ["vanilla", "spt_lsa"]},
              {"train_images": 400, "epochs": 12, "val_every": 4, "seeds": [0], "variants": ["vanilla", "spt_lsa"]},
              {"train_images": 200, "epochs": 20, "val_every": 5, "seeds": [1], "variants": ["vanilla"]}],
}


def write_grid(folder: Path, spec: dict = TINY_GRID) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "grid.json"
    path.write_text(json.dumps(spec))
    return path


def test_the_shipped_grid_is_the_design(tmp_path):
    grid = read_grid(ROOT / "study" / "grid.json")
    light = [t for t in grid.trials if t.recipe is None]
    sizes = sorted({t.train_images for t in light})
    assert sizes == [1000, 2500, 5000, 10000, 20000]
    for n in sizes:
        trials = [t for t in light if t.train_images == n]
        seeds = {v: sorted(t.seed for t in trials if t.variant == v) for v in {t.variant for t in trials}}
        assert len(seeds["vanilla"]) >= (3 if n <= 5000 else 1) and seeds["vanilla"] == seeds["spt_lsa"]
        # the 2x2, and the paper's per-head LSA alone and with SPT (three seeds each), where data is fewest
        assert (set(seeds) == {"vanilla", "spt", "lsa", "spt_lsa", "lsa_head", "spt_lsa_head"}) == (n <= 2500)
        if n <= 2500:
            assert seeds["lsa_head"] == seeds["spt_lsa_head"] == seeds["lsa"] == [0, 1, 2]
        assert len({(t.epochs, t.val_every) for t in trials}) == 1  # one rule per size
    assert grid.trials[0].seed == 0 and grid.kept(grid.trials[0])  # the app's checkpoints come first
    assert "| **all** |" in plan_table(grid, 270.0)
    per_head = grid.trial_run(grid.trial("n01000-lsa_head-s0"))
    assert (per_head.variant, per_head.tau_mode) == ("lsa", "head")
    plain = grid.trial_run(grid.trial("n01000-lsa-s0"))
    assert plain.tau_mode == "layer" and plain.recipe_name is None
    assert grid.recipe_name(grid.trial("n01000-lsa-s0")) == "light"


def test_the_shipped_grid_has_the_paper_recipe_2x2_and_the_cutmix_arm():
    """Issue 54: the 2x2 (LSA with one tau per head, as the paper has it) under `--recipe paper` with three
    seeds at 1,000 images, and the vanilla ViT with CutMix alone; each trial named by its recipe."""
    grid = read_grid(ROOT / "study" / "grid.json")
    paper = [t for t in grid.trials if t.recipe == "paper" and t.train_images == 1000]
    assert {(t.variant, t.seed) for t in paper} == {(v, s) for v in ("vanilla", "spt", "lsa_head", "spt_lsa_head")
                                                    for s in (0, 1, 2)}
    run = grid.trial_run(grid.trial("n01000-lsa_head-paper-s1"))
    assert (run.recipe_name, run.drop_path, run.tau_mode) == ("paper", 0.1, "head")
    assert grid.passes(grid.trial("n01000-lsa_head-paper-s1")) == 3
    light = grid.trial_run(grid.trial("n01000-vanilla-s1"))
    cutmix = grid.trial_run(grid.trial("n01000-vanilla-cutmix-s1"))
    # the light recipe plus CutMix, nothing else
    assert cutmix.recipe == {**light.recipe, "cutmix_alpha": 1.0}
    assert replace(cutmix, recipe=light.recipe, name=light.name, backup=light.backup) == light
    kept = grid.trial("n01000-spt-paper-s0")
    assert grid.kept(kept) and grid.checkpoint_name(kept) == "cifar10-1000-spt-paper"
    assert not grid.kept(grid.trial("n01000-spt-paper-s1"))
    # the paper 1,000-image trials are started before the 2,500 ones, which are extra
    names = [t.name for t in grid.trials]
    assert max(names.index(t.name) for t in paper) < names.index("n02500-vanilla-paper-s0")


def test_show_prints_the_command_line_of_the_very_run_a_trial_is(tmp_path, capsys):
    """`python -m explorer.study show`'s command line, read back by explorer.train, makes the trial's run."""
    grid = read_grid(ROOT / "study" / "grid.json")
    for name in ("n01000-lsa_head-s0", "n01000-spt-paper-s1", "n01000-vanilla-cutmix-s2"):
        assert main(["show", str(grid.path), name, "--data-dir", str(tmp_path)]) == 0
        command = capsys.readouterr().out.strip()
        run = grid.trial_run(grid.trial(name), str(tmp_path))
        assert command == run.command() and command.startswith("python -m explorer.train --preset cifar-small ")
        again = NewModelRun.from_args(parse_args(command.split()[3:]))
        assert again.plan() == run.plan() and replace(again, recipe=run.recipe) == run


def test_the_grid_refuses_flags_that_are_its_own_or_not_explorer_trains(tmp_path):
    with pytest.raises(StudyError, match="may not set --dataset, --preset"):
        read_grid(write_grid(tmp_path, {**TINY_GRID, "train_args": ["--preset", "tiny", "--dataset", "x"]}))
    with pytest.raises(StudyError, match="recipes.odd.train_args are not flags of explorer.train"):
        read_grid(write_grid(tmp_path, {**TINY_GRID, "recipes": {"odd": {"train_args": ["--lr", "fast"]}}}))
    with pytest.raises(StudyError, match="may not set --base"):
        read_grid(write_grid(tmp_path, {**TINY_GRID, "train_args": ["--base", "checkpoints/cifar10-vanilla"]}))


@pytest.mark.parametrize("change, message", [
    ({"sizes": [{"train_images": 0, "epochs": 1, "seeds": [0], "variants": ["vanilla"]}]}, "train_images"),
    ({"sizes": [{"train_images": 10, "epochs": 1, "seeds": [0], "variants": ["vit"]}]}, "variants"),
    ({"sizes": [{"train_images": 10, "epochs": 1, "seeds": [], "variants": ["vanilla"]}]}, "seeds"),
    ({"sizes": [{"train_images": 10, "epochs": 1, "seeds": [0, 0], "variants": ["vanilla"]}]}, "listed twice"),
    ({"train_args": ["--seed", "3"]}, "may not set --seed"),
])
def test_a_bad_grid_is_refused_with_the_field(tmp_path, change, message):
    with pytest.raises(StudyError, match=message):
        read_grid(write_grid(tmp_path, {**TINY_GRID, **change}))


def test_the_required_part_starts_before_the_extra_seeds(tmp_path):
    """The kept pair first, then each size's `required_seeds` (the other variants' too), then the rest."""
    spec = {**TINY_GRID, "first_seeds": 2, "sizes": [
        {"train_images": 100, "epochs": 4, "seeds": [0, 1, 2], "variants": ["vanilla", "spt_lsa"]},
        {"train_images": 100, "epochs": 4, "seeds": [0, 1], "variants": ["lsa"]},
        {"train_images": 400, "epochs": 2, "required_seeds": 1, "seeds": [0, 1, 2],
         "variants": ["vanilla", "spt_lsa"]}]}
    names = [t.name for t in read_grid(write_grid(tmp_path, spec)).trials]
    tiers = [names[:4], names[4:8], names[8:10], names[10:]]
    assert set(tiers[0]) == {"n00400-vanilla-s0", "n00400-spt_lsa-s0", "n00100-vanilla-s0", "n00100-spt_lsa-s0"}
    assert tiers[0][:2] == ["n00400-spt_lsa-s0", "n00400-vanilla-s0"]  # longest first
    assert set(tiers[1]) == {"n00100-vanilla-s1", "n00100-spt_lsa-s1", "n00100-lsa-s0", "n00100-lsa-s1"}
    assert set(tiers[2]) == {"n00400-vanilla-s1", "n00400-spt_lsa-s1"}
    assert set(tiers[3]) == {"n00100-vanilla-s2", "n00100-spt_lsa-s2", "n00400-vanilla-s2", "n00400-spt_lsa-s2"}
    assert tiers[3][:2] == ["n00400-spt_lsa-s2", "n00400-vanilla-s2"]


def test_a_missing_or_broken_grid_file(tmp_path):
    with pytest.raises(StudyError, match="no grid file"):
        read_grid(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(StudyError, match="not valid JSON"):
        read_grid(tmp_path / "bad.json")


def ray_processes(tmpdir: str) -> list[int]:
    """Processes started for the Ray whose temp dir is `tmpdir` (they inherit RAY_TMPDIR)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                env = (proc / "environ").read_bytes()
            except OSError:
                continue
            if f"RAY_TMPDIR={tmpdir}".encode() in env.split(b"\0"):
                found.append(int(proc.name))
    return found


def backup_epochs(folder: Path) -> dict[str, int]:
    out = {}
    for meta in folder.glob("backups/*/training_metadata.json"):
        try:
            out[meta.parent.name] = json.loads(meta.read_text()).get("epoch", 0)
        except (OSError, json.JSONDecodeError):
            pass
    return out


@pytest.mark.slow
def test_grid_on_ray_tune_stopped_and_restarted_ends_as_direct_runs(tmp_path, data_dir):
    import tempfile
    grid_path = write_grid(tmp_path / "study")
    grid = read_grid(grid_path)
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's socket paths must stay short
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_DOCKER_CPU_WARNING": "1"}
    command = [sys.executable, "-m", "explorer.study", "run", str(grid_path), "--data-dir", str(data_dir),
               "--cpus", "2"]
    log1 = open(tmp_path / "first.log", "w")
    # A grid started in a terminal, where Ctrl-C is heard: whoever ran pytest may have left SIGINT ignored (a
    # background job of a shell), and a child inherits that; the grid in the background is the next test.
    first = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log1, stderr=subprocess.STDOUT,
                             start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # Ctrl-C once a trial is recorded and another has completed a few epochs in its backup.
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if first.poll() is not None:
            pytest.fail("the grid ended before it could be stopped:\n" + (tmp_path / "first.log").read_text()[-3000:])
        done = {p.stem for p in grid.records.glob("*.json")}
        # A trial at its first epochs (of 20 or 12), so that it is still running when the stop reaches it
        # even on a fast host: the stop takes about a second (Ray's shutdown), not Tune's graceful 10 s.
        if done and any(1 <= e <= 2 for k, e in backup_epochs(grid.folder).items() if k not in done):
            break
        time.sleep(0.05)
    else:
        pytest.fail("no trial finished in 10 minutes")
    os.killpg(first.pid, signal.SIGINT)  # Ctrl-C in a terminal: the driver's whole process group
    assert first.wait(timeout=180) != 0
    log1.close()
    assert "stopped (Ctrl-C); running trials resume from their backups" in (tmp_path / "first.log").read_text()
    done_first = {p.stem: p.stat().st_mtime_ns for p in grid.records.glob("*.json")}
    interrupted = {k: v for k, v in backup_epochs(grid.folder).items() if k not in done_first and v >= 1}
    assert done_first and interrupted and len(done_first) < len(grid.trials)
    deadline = time.monotonic() + 60
    while ray_processes(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray_processes(ray_tmp) == [], "Ray processes left behind after Ctrl-C"

    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    out = second.stdout + second.stderr
    assert second.returncode == 0, out[-4000:]
    assert f"{len(done_first)} done before" in out
    for name, epochs in interrupted.items():
        trial = grid.trial(name)
        assert f"resuming from backup {grid.backups / name}: {epochs} of {trial.epochs} epochs done" in out, out[-4000:]
    assert {p.stem: p.stat().st_mtime_ns for p in grid.records.glob("*.json") if p.stem in done_first} == done_first
    assert ray_processes(ray_tmp) == [], "Ray processes left behind after the grid ended"
    assert not list(grid.backups.glob("*/training_metadata.json"))  # finished runs drop their backups

    rows = {r["trial"]: r for r in read_results(grid.results_csv)}
    assert set(rows) == {t.name for t in grid.trials}
    assert write_results(grid) and {r["trial"] for r in read_results(grid.results_csv)} == set(rows)

    from explorer.checkpoints.store import load_checkpoint, read_card
    # Every trial run again directly: explorer.train's main (what `python -m explorer.train` runs) on the trial's
    # command line, the trials one after another in one process, so that TensorFlow's import and start are paid
    # once. A run is the same after others as in a process of its own (it seeds whatever it draws); were it not,
    # it would differ from its Ray trial, which had a fresh process, and fail below.
    direct = tmp_path / "direct"
    commands = [grid.trial_run(t, str(data_dir), out=direct, name=t.name, backup=tmp_path / "db" / t.name).flags()
                for t in grid.trials]
    code = ("import json, sys\nfrom explorer.train import main\nfor flags in json.loads(sys.argv[1]):\n"
            "    if main(flags) != 0:\n        sys.exit(f'explorer.train {flags} failed')\n")
    runs = subprocess.run([sys.executable, "-c", code, json.dumps(commands)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert runs.returncode == 0, runs.stderr[-3000:]
    for trial in grid.trials:
        card = read_card(direct / trial.name)
        record = json.loads((grid.records / f"{trial.name}.json").read_text())
        row = rows[trial.name]
        assert row["train_images"] == card.dataset.train_images == trial.train_images
        assert row["seed"] == card.training.recipe["seed"] == trial.seed
        for key in ("test_top1", "test_top5", "val_top1"):
            assert row[key] == pytest.approx(getattr(card.metrics, key), abs=1e-6), (trial.name, key)
        assert [h["loss"] for h in record["history"]] == pytest.approx([h.loss for h in card.history],
                                                                       rel=1e-5)
        assert record["training"]["steps"] == card.training.steps == row["steps"]
        assert 0 <= row["train_top1"] <= 1 and row["images_per_second"] > 0
        if grid.kept(trial):
            kept, kept_card = load_checkpoint(grid.checkpoint_dir(trial))
            # its check set, measured once kept: what tests/test_shipped.py re-measures with no data
            assert kept_card.metrics.check_set == "cifar10 test images 0-199"
            assert 0 <= kept_card.metrics.check_top1 <= kept_card.metrics.check_top5 <= 1
            mine, _ = load_checkpoint(direct / trial.name)
            for a, b in zip(kept.get_weights(), mine.get_weights(), strict=True):
                np.testing.assert_allclose(a, b, atol=1e-6)
        else:
            assert not grid.checkpoint_dir(trial).exists()  # only the kept seed keeps its weights


@pytest.mark.slow
def test_sigterm_stops_a_grid_started_in_the_background(tmp_path, data_dir):
    """`kill PID` (or a shell's `&`, which starts the grid with SIGINT ignored, then Ctrl-C is no use) stops
    the grid as Ctrl-C does: at once, the running trial's backup kept, no Ray process left."""
    import tempfile
    spec = {**TINY_GRID, "sizes": [{"train_images": 400, "epochs": 40, "val_every": 10, "seeds": [0],
                                    "variants": ["spt_lsa"]}]}
    grid = read_grid(write_grid(tmp_path / "study", spec))
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_DOCKER_CPU_WARNING": "1"}
    log = open(tmp_path / "grid.log", "w")
    driver = subprocess.Popen([sys.executable, "-m", "explorer.study", "run", str(grid.path), "--data-dir",
                               str(data_dir), "--cpus", "1"], cwd=tmp_path, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 600
        while not backup_epochs(grid.folder) and time.monotonic() < deadline:
            assert driver.poll() is None, (tmp_path / "grid.log").read_text()[-3000:]
            time.sleep(0.05)
        driver.send_signal(signal.SIGINT)  # ignored, as in a background job
        time.sleep(1)
        assert driver.poll() is None
        driver.send_signal(signal.SIGTERM)  # the driver only, not its group
        assert driver.wait(timeout=60) != 0
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        log.close()
    text = (tmp_path / "grid.log").read_text()
    assert "stopped (SIGTERM); running trials resume from their backups" in text, text[-3000:]
    assert "not finished: n00400-spt_lsa-s0 (run the same command again to resume)" in text
    assert 1 <= backup_epochs(grid.folder)["n00400-spt_lsa-s0"] < 40 and not list(grid.records.glob("*.json"))
    deadline = time.monotonic() + 60
    while ray_processes(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray_processes(ray_tmp) == [], "Ray processes left behind after SIGTERM"


def test_the_readme_tables_are_the_study_results():
    """The small-data tables (study/RESULTS.md, linked from the README) are what `explorer.study report` writes
    from study/results.csv, and the app's copy of the results is the same file."""
    from explorer.study import report as study_report
    rows = read_results(ROOT / "study" / "results.csv")
    assert study_report.markdown(rows) in (ROOT / "study" / "RESULTS.md").read_text(), \
        "run python -m explorer.study report"
    block = study_report.tables_block((ROOT / "README.md").read_text())
    assert block is None or block == study_report.markdown(rows)  # a page with the markers gets them too
    shipped = (ROOT / "checkpoints" / "study" / "results.csv").read_bytes()
    assert shipped == (ROOT / "study" / "results.csv").read_bytes()
    assert {r["trial"] for r in rows} == {p.stem for p in (ROOT / "study" / "cards").glob("*.json")}


def imported_on_import(module: str, root: Path = ROOT) -> set[str]:
    """Every module that importing explorer's `module` imports, read from the code: the imports each of our
    modules runs as it loads (at its top level, in class bodies and in top-level `if`/`try` blocks; not those
    inside functions nor under `if TYPE_CHECKING`), followed through our own modules and their packages'
    `__init__`."""
    def loaded(stmts) -> set[str]:
        names = set()
        for node in stmts:
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                names |= loaded(node.orelse)
            elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    names |= loaded(getattr(node, field, []))
        return names

    def source(name: str) -> Path | None:
        path = root.joinpath(*name.split("."))
        return next((p for p in (path / "__init__.py", path.with_suffix(".py")) if p.is_file()), None)

    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a module's packages load before it
            part = ".".join(parts[:i])
            if part in seen:
                continue
            seen.add(part)
            if part.split(".")[0] == "explorer" and (path := source(part)):
                todo += loaded(ast.parse(path.read_text()).body)
    return seen


def test_ray_is_for_training_only():
    """Ray is in what training and CI install, never in what a Space installs, and only `run` imports it (the
    imports read from the code here; a fresh process imports them in the slow test below)."""
    lines = lambda name: [line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines()]  # noqa: E731
    assert not any(line.startswith("ray") for line in lines("requirements.txt"))
    assert "ray[tune]==2.60.0" in lines("requirements-train.txt")
    assert "-r requirements-train.txt" in lines("requirements-test.txt")
    loads = imported_on_import("explorer.study.grid") | imported_on_import("explorer.ui")
    assert {"explorer.ui.shell", "explorer.study.grid", "gradio", "keras"} <= loads  # the reading follows
    assert not {m for m in loads if m == "ray" or m.startswith("ray.")}


def test_the_import_reading_sees_what_loads_and_not_what_waits(tmp_path):
    (tmp_path / "explorer" / "sub").mkdir(parents=True)
    (tmp_path / "explorer" / "__init__.py").write_text("import numpy\n")
    (tmp_path / "explorer" / "sub" / "__init__.py").write_text("")
    (tmp_path / "explorer" / "sub" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nfrom explorer.sub import b\nif TYPE_CHECKING:\n    import scipy\n"
        "def later():\n    import jax\n")
    (tmp_path / "explorer" / "sub" / "b.py").write_text(
        "try:\n    from ray import tune\nexcept ImportError:\n    pass\n")
    loads = imported_on_import("explorer.sub.a", tmp_path)
    assert {"numpy", "explorer.sub.b", "ray", "ray.tune"} <= loads and not {"scipy", "jax"} & loads


@pytest.mark.slow
def test_a_fresh_process_importing_the_app_and_the_grid_loads_no_ray():
    code = ("import sys, explorer.study.grid, explorer.ui;"
            "print(any(m == 'ray' or m.startswith('ray.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
