"""The small-data study: vanilla against SPT/LSA at several training-set sizes and seeds, as a grid of trials
on Ray Tune. Each trial is exactly a run of `python -m explorer.train` (explorer.train.run_new_model) with a
backup (one TensorFlow thread per CPU Ray gives it); a grid killed at any moment and started again with the
same command skips the trials whose record is written and resumes the others from their last completed
epoch, on this machine or on another one that has the study folder (records and backups are plain files,
committed as they come).

    python -m explorer.study plan [study/grid.json] [--rate 270]     the trials and what they cost
    python -m explorer.study run  [study/grid.json] [--address ray://host:10001]
    python -m explorer.study show [study/grid.json] TRIAL            one trial's `explorer.train` command
    python -m explorer.study report [study/grid.json]                results.csv, RESULTS.md, curve.png
    python -m explorer.study mechanisms [study/grid.json]            what LSA does to attention, per model

The grid file (study/grid.json) names the dataset, the preset, the recipe and, per training-set size, the
epochs, how often to validate, the seeds and the variants; see study/README.md for the design. Ray is
imported by `run` only: the app and a Space never load it.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

from explorer.analysis.evaluate import store_check_set
from explorer.checkpoints.store import is_checkpoint, load_checkpoint, read_card, update_card
from explorer.core import atomic
from explorer.core.card import Card
from explorer.core.settings import PROJECT, Settings
from explorer.data.batches import training_split
from explorer.data.folders import load_dataset
from explorer.model.config import VARIANTS
from explorer.model.predict import accuracy_metrics, predict_logits
from explorer.study import mechanisms
from explorer.study import report as study_report
from explorer.study.report import DEFAULT_RECIPE, read_results, study_variant
from explorer.train import NewModelRun, parse_args, run_new_model
from explorer.training.recipe import TrainConfig

# The study's variants: the model variants with the keras.io example's one temperature per LSA layer, and the
# paper's own LSA (aanna0701/SPT_LSA_ViT: one learned temperature per head) as "<variant>_head".
STUDY_VARIANTS = {**{v: (v, "layer") for v in VARIANTS}, "lsa_head": ("lsa", "head"),
                  "spt_lsa_head": ("spt_lsa", "head")}

DEFAULT_GRID = "study/grid.json"
RESULT_COLUMNS = ("train_images", "variant", "recipe", "seed", "epochs", "steps", "test_top1", "test_top5",
                  "val_top1", "train_top1", "wall_seconds", "images_per_second", "test_images", "trial")
# The grid's own recipe (its top-level train_args) when the grid file names none.


class StudyError(ValueError):
    """A grid file or trial that cannot be run; the message says which field and why."""


@dataclass(frozen=True)
class Trial:
    train_images: int
    variant: str
    seed: int
    epochs: int
    val_every: int
    # The grid recipe it trains under; None: the grid's own (its top-level train_args), and no name suffix.
    recipe: str | None = None

    @property
    def name(self) -> str:
        tag = f"-{self.recipe}" if self.recipe else ""
        return f"n{self.train_images:05d}-{self.variant}{tag}-s{self.seed}"

    @property
    def images_seen(self) -> int:
        return self.train_images * self.epochs


@dataclass(frozen=True)
class Grid:
    """A grid file, read and checked. Paths in it are relative to the file's folder."""

    path: Path
    name: str
    dataset: str
    preset: str
    split_seed: int
    batch_size: int
    train_args: tuple[str, ...]
    trials: tuple[Trial, ...]
    keep_dir: Path
    keep_seed: int
    keep_variants: tuple[str, ...]
    test_subset: int | None = None
    # The grid's own recipe's name, and the other recipes: name -> (train_args, kept variants). A trial
    # with `recipe` set trains with that recipe's train_args instead of the grid's own.
    recipe: str = DEFAULT_RECIPE
    recipes: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = ()
    # What each recipe's train_args set, read once by explorer.train's parser: recipe name (None: the grid's
    # own) -> the run they make, which each trial's run takes with its own values on top.
    recipe_runs: tuple[tuple[str | None, NewModelRun], ...] = ()

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def records(self) -> Path:
        return self.folder / "cards"

    @property
    def backups(self) -> Path:
        return self.folder / "backups"

    @property
    def scratch(self) -> Path:
        return self.folder / ".runs"

    @property
    def results_csv(self) -> Path:
        return self.folder / "results.csv"

    def trial(self, name: str) -> Trial:
        for t in self.trials:
            if t.name == name:
                return t
        raise StudyError(f"{self.path} has no trial {name!r}; it has {', '.join(t.name for t in self.trials)}")

    def recipe_name(self, trial: Trial) -> str:
        """The name of the recipe `trial` trains under (results.csv's `recipe` column)."""
        return trial.recipe or self.recipe

    def recipe_run(self, trial: Trial) -> NewModelRun:
        """The run the train_args of `trial`'s recipe make, before the trial's own values."""
        return dict(self.recipe_runs)[trial.recipe]

    def passes(self, trial: Trial) -> int:
        """Passes over the training images per epoch (repeated augmentation: --repeats, or a named recipe's)."""
        return int(self.recipe_run(trial).recipe_values().get("repeats", 1))

    def kept(self, trial: Trial) -> bool:
        if trial.recipe is None:
            return trial.seed == self.keep_seed and trial.variant in self.keep_variants
        keep = next(kept for name, _, kept in self.recipes if name == trial.recipe)
        return trial.seed == self.keep_seed and trial.variant in keep

    def checkpoint_name(self, trial: Trial) -> str:
        tag = f"-{trial.recipe}" if trial.recipe else ""
        return (f"{self.dataset}-{trial.train_images}-{trial.variant}{tag}" if self.kept(trial)
                else f"{trial.name}")

    def checkpoint_dir(self, trial: Trial) -> Path:
        return (self.keep_dir if self.kept(trial) else self.scratch) / self.checkpoint_name(trial)

    def digest(self) -> str:
        """Changes when the trials or their arguments change: a Ray experiment belongs to one grid."""
        text = json.dumps([self.dataset, self.preset, self.split_seed, self.batch_size, list(self.train_args),
                           [t.name + f"/{t.epochs}/{t.val_every}" for t in self.trials], self.test_subset]
                          + ([[name, list(args)] for name, args, _ in self.recipes] if self.recipes else []))
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def trial_run(self, trial: Trial, data_dir: str | None = None, out: Path | None = None,
                  name: str | None = None, backup: Path | None = None, threads: int = 1) -> NewModelRun:
        """The run of `trial`: its recipe's with the trial's model, images, seeds and length, `threads`
        TensorFlow threads, a line per epoch, its checkpoint where the grid keeps it (or `out`/`name`) and its
        backup in the study folder (or `backup`). Its command line is `python -m explorer.study show`'s."""
        variant, tau_mode = STUDY_VARIANTS[trial.variant]
        run = self.recipe_run(trial)
        recipe = {**run.recipe, "balanced_subset": trial.train_images, "split_seed": self.split_seed,
                  "seed": trial.seed, "epochs": trial.epochs, "validation_every": trial.val_every,
                  "batch_size": self.batch_size}
        return replace(run, preset=self.preset, variant=variant, tau_mode=tau_mode, dataset=self.dataset,
                       recipe=recipe, threads=threads, verbose=2,
                       out=str(out if out is not None else self.checkpoint_dir(trial).parent),
                       name=name or self.checkpoint_name(trial),
                       backup=str(backup if backup is not None else self.backups / trial.name),
                       test_subset=self.test_subset or run.test_subset, data_dir=str(data_dir) if data_dir else None)


def _int(value, what: str, low: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise StudyError(f"{what} must be an integer >= {low}, got {value!r}")
    return value


def read_grid(path: str | os.PathLike = DEFAULT_GRID) -> Grid:
    """The grid file at `path`, checked: every size, variant, seed and epoch count, before anything runs."""
    path = Path(path).resolve()
    try:
        spec = json.loads(path.read_text())
    except FileNotFoundError:
        raise StudyError(f"no grid file at {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise StudyError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(spec, dict):
        raise StudyError(f"{path} must hold a JSON object")
    missing = {"name", "dataset", "preset", "sizes"} - set(spec)
    if missing:
        raise StudyError(f"{path} lacks {', '.join(sorted(missing))}")
    trials = []
    seen = set()
    required = set()
    first_seeds = _int(spec.get("first_seeds", 3), "first_seeds")
    own_recipe = str(spec.get("recipe", DEFAULT_RECIPE))
    recipes = _read_recipes(spec.get("recipes", {}), path.name, own_recipe)
    for i, size in enumerate(spec["sizes"]):
        where = f"{path.name}: sizes[{i}]"
        recipe = size.get("recipe")
        if recipe == own_recipe:
            recipe = None
        elif recipe is not None and recipe not in {name for name, _, _ in recipes}:
            raise StudyError(f"{where}.recipe must be {own_recipe!r} or one of the grid's recipes "
                             f"{sorted(name for name, _, _ in recipes)}, got {recipe!r}")
        n = _int(size.get("train_images"), f"{where}.train_images")
        epochs = _int(size.get("epochs"), f"{where}.epochs")
        val_every = _int(size.get("val_every", 1), f"{where}.val_every")
        seeds = size.get("seeds")
        if not isinstance(seeds, list) or not seeds:
            raise StudyError(f"{where}.seeds must be a non-empty list of integers, got {seeds!r}")
        variants = size.get("variants")
        if not isinstance(variants, list) or not variants or set(variants) - set(STUDY_VARIANTS):
            raise StudyError(f"{where}.variants must be some of {list(STUDY_VARIANTS)}, got {variants!r}")
        needed = _int(size.get("required_seeds", first_seeds), f"{where}.required_seeds", 0)
        for k, seed in enumerate(seeds):
            for variant in variants:
                trial = Trial(n, variant, _int(seed, f"{where}.seeds[]", 0), epochs, val_every, recipe)
                if trial.name in seen:
                    raise StudyError(f"{where}: trial {trial.name} is listed twice")
                seen.add(trial.name)
                trials.append(trial)
                if k < needed:
                    required.add(trial.name)
    keep = spec.get("keep", {})
    train_args = _train_args(spec.get("train_args", []), f"{path.name}: train_args")
    runs = [(None, _recipe_run(train_args, f"{path.name}: train_args"))]
    runs += [(name, _recipe_run(args, f"{path.name}: recipes.{name}.train_args")) for name, args, _ in recipes]
    return Grid(path=path, name=str(spec["name"]), dataset=str(spec["dataset"]), preset=str(spec["preset"]),
                split_seed=_int(spec.get("split_seed", 0), "split_seed", 0),
                batch_size=_int(spec.get("batch_size", 128), "batch_size"), train_args=tuple(train_args),
                trials=tuple(order_trials(trials, keep.get("seed", 0), keep.get("variants", ["vanilla", "spt_lsa"]),
                                          first_seeds, required,
                                          {name: kept for name, _, kept in recipes})),
                keep_dir=(path.parent / keep.get("dir", "../checkpoints/study")).resolve(),
                keep_seed=keep.get("seed", 0), keep_variants=tuple(keep.get("variants", ["vanilla", "spt_lsa"])),
                test_subset=spec.get("test_subset"), recipe=own_recipe, recipes=recipes, recipe_runs=tuple(runs))


# The flags the grid sets itself: per trial, or from its own preset and dataset.
_RESERVED = {"--variant", "--tau-mode", "--seed", "--epochs", "--balanced-subset", "--split-seed", "--out", "--name",
             "--backup", "--threads", "--val-every", "--batch-size", "--data-dir", "--subset", "--preset", "--dataset"}


def _train_args(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise StudyError(f"{where} must be a list of strings (extra explorer.train flags)")
    clash = sorted(_RESERVED & set(value))
    if clash:
        raise StudyError(f"{where} may not set {', '.join(clash)}: the grid sets them (per trial, or from its "
                         "preset and dataset)")
    return tuple(value)


def _recipe_run(train_args: tuple[str, ...], where: str) -> NewModelRun:
    """The run `train_args` make, read as `python -m explorer.train` reads its flags (a bad flag or value is
    refused here, before any trial runs)."""
    try:
        args = parse_args(list(train_args))
    except SystemExit:  # argparse has said why on standard error
        raise StudyError(f"{where} are not flags of explorer.train (see the message above)") from None
    if args.base:
        raise StudyError(f"{where} may not set --base: a trial trains a new model")
    return NewModelRun.from_args(args)


def _read_recipes(spec, file: str, own: str) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    """The grid's other recipes: name -> {"train_args": [...], "keep": [variants kept at the keep seed]}."""
    if not isinstance(spec, dict):
        raise StudyError(f"{file}: recipes must be an object of name -> {{train_args, keep}}")
    out = []
    for name, body in spec.items():
        where = f"{file}: recipes.{name}"
        if name == own or not name.replace("_", "").isalnum() or not name.islower():
            raise StudyError(f"{where}: a recipe's name is lower-case letters, digits and _, and not the grid's "
                             f"own ({own!r})")
        if not isinstance(body, dict):
            raise StudyError(f"{where} must be an object with train_args and keep")
        kept = body.get("keep", [])
        if not isinstance(kept, list) or set(kept) - set(STUDY_VARIANTS):
            raise StudyError(f"{where}.keep must be some of {list(STUDY_VARIANTS)}, got {kept!r}")
        out.append((name, _train_args(body.get("train_args", []), f"{where}.train_args"), tuple(kept)))
    return tuple(out)


def order_trials(trials: list[Trial], keep_seed: int, keep_variants, first_seeds: int = 3,
                 required: set[str] | None = None, recipe_keeps: dict | None = None) -> list[Trial]:
    """The order Ray starts them in: the kept pair at every size (the app's checkpoints), then the rest of
    the required part (`required`, trial names: each size's first `required_seeds` seeds; all of the first
    `first_seeds` when None), then the other trials among the first `first_seeds` seeds, then every further
    seed; longest first within each, so that the last trials to start are short ones and the cores stay busy
    to the end. A grid stopped at any point has its most needed trials done."""
    def tier(t: Trial) -> int:
        kept = keep_variants if t.recipe is None else (recipe_keeps or {}).get(t.recipe, ())
        needed = (t.name in required) if required is not None else True
        if t.seed == keep_seed and t.variant in kept and needed:
            return 0
        if (t.name in required) if required is not None else t.seed < first_seeds:
            return 1
        return 2 if t.seed < first_seeds else 3
    return sorted(trials, key=lambda t: (tier(t), -t.images_seen, t.seed, t.variant))


# ---- one trial -------------------------------------------------------------------------------------------

def record_path(grid: Grid, trial: Trial) -> Path:
    return grid.records / f"{trial.name}.json"


def read_record(grid: Grid, trial: Trial) -> Card | None:
    path = record_path(grid, trial)
    if not path.is_file():
        return None
    return Card.from_json(json.loads(path.read_text()))


def result_row(card: Card, trial: Trial, recipe: str = DEFAULT_RECIPE) -> dict:
    m, t = card.metrics, card.training
    return {"train_images": card.dataset.train_images, "variant": study_variant(card), "recipe": recipe,
            "seed": t.recipe.get("seed"), "epochs": t.epochs, "steps": t.steps,
            "test_top1": m.test_top1, "test_top5": m.test_top5, "val_top1": m.val_top1,
            "train_top1": m.train_top1, "wall_seconds": t.wall_time_s,
            "images_per_second": t.images_per_second, "test_images": card.dataset.test_images,
            "trial": trial.name}


def run_trial(grid: Grid, trial: Trial, data_dir: str | None = None, threads: int = 1) -> dict:
    """Runs one trial to its end (or finds it done) and returns its results row. What survives a kill at
    any point: the trial's backup (every completed epoch), its finished checkpoint, its record."""
    done = read_record(grid, trial)
    if done is not None:
        print(f"{trial.name}: done before, not repeated", flush=True)
        return result_row(done, trial, grid.recipe_name(trial))
    folder = grid.checkpoint_dir(trial)
    card = read_card(folder) if is_checkpoint(folder) else None
    recipe = card.training.recipe if card else {}
    if (recipe.get("seed"), recipe.get("balanced_subset"), recipe.get("epochs")) != (
            trial.seed, trial.train_images, trial.epochs):
        if folder.exists():  # another run's leftovers under this trial's name: never mixed into it
            raise StudyError(f"{folder} exists but is not this trial's finished checkpoint; move it away")
        run = grid.trial_run(trial, data_dir, threads=threads)
        print(f"{trial.name}: {run.command()}", flush=True)
        try:
            run_new_model(run)
        except ValueError as e:  # a refusal (the recipe, the data, another run's backup) says why
            raise StudyError(f"{trial.name}: {e}") from e
        card = read_card(folder)
    if card.metrics.train_top1 is None:
        card = update_card(folder, metrics={"train_top1": train_accuracy(folder, grid, data_dir)})
    if grid.kept(trial) and card.metrics.check_top1 is None:  # what anyone can re-measure with no data
        card = store_check_set(folder, data_dir)
    record = record_path(grid, trial)
    record.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(record, json.dumps(card.to_json(), indent=1))
    if not grid.kept(trial):
        shutil.rmtree(folder, ignore_errors=True)
    return result_row(card, trial, grid.recipe_name(trial))


def train_accuracy(folder: Path, grid: Grid, data_dir: str | None) -> float:
    """Top-1 of the checkpoint on the very images it was trained on (no augmentation): how far it fit them."""

    model, card = load_checkpoint(folder)
    names = {f.name for f in fields(TrainConfig)}
    recipe = TrainConfig(**{k: v for k, v in card.training.recipe.items() if k in names})
    (x, y), _ = training_split(load_dataset(grid.dataset, data_dir), recipe)
    return accuracy_metrics(predict_logits(model, x), y).top1


# ---- results ---------------------------------------------------------------------------------------------

def collect(grid: Grid) -> list[dict]:
    """The results row of every trial of the grid that has a record, in the grid's order by size."""
    rows = [result_row(card, t, grid.recipe_name(t)) for t in grid.trials
            if (card := read_record(grid, t)) is not None]
    recipes = [grid.recipe, *(name for name, _, _ in grid.recipes)]
    return sorted(rows, key=lambda r: (recipes.index(r["recipe"]), r["train_images"],
                                       list(STUDY_VARIANTS).index(r["variant"]), r["seed"]))


def write_results(grid: Grid) -> Path:
    """results.csv in the study folder, and the same file beside the kept checkpoints, where the app (and a
    Space, which is not sent the study folder) reads it."""
    rows = collect(grid)
    for path in (grid.results_csv, grid.keep_dir / "results.csv"):
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic.replacing(path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=RESULT_COLUMNS)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: ("" if row[k] is None else row[k]) for k in RESULT_COLUMNS})
    return grid.results_csv


def report(grid: Grid) -> list[Path]:
    """results.csv, RESULTS.md (the tables) and curve.png (the figure) in the study folder, from the records;
    and the tables in the README beside the study folder, where it has the markers for them."""
    from PIL import Image

    from explorer.analysis.plots import figure_to_array
    write_results(grid)
    rows = read_results(grid.results_csv)
    shipped = study_report.shipped_points(grid.keep_dir.parent, grid.dataset)
    paper_scale = study_report.shipped_points(grid.keep_dir.parent / "paper", grid.dataset)
    markdown = study_report.markdown(rows)  # the recipes side by side too, once another recipe has a row
    (grid.folder / "RESULTS.md").write_text(
        f"# {grid.name}: results\n\nWritten by `python -m explorer.study report` from {len(rows)} finished "
        f"trials of {len(grid.trials)} (results.csv).\n\n{markdown}\n\n![curve](curve.png)\n")
    Image.fromarray(figure_to_array(study_report.curve_figure(rows, shipped, paper_scale=paper_scale))).save(
        grid.folder / "curve.png")
    written = [grid.results_csv, grid.folder / "RESULTS.md", grid.folder / "curve.png"]
    readme = grid.folder.parent / "README.md"  # the project's, for the grid in its study folder
    if readme.is_file() and study_report.tables_block(readme.read_text()) is not None:
        readme.write_text(study_report.with_tables(readme.read_text(), rows))
        written.append(readme)
    return written


# ---- the grid on Ray Tune --------------------------------------------------------------------------------

def _tune_trial(config: dict) -> None:
    """Ray Tune's trainable: one trial, in a Ray worker process with `threads` CPUs of its own."""
    from ray import tune
    grid = read_grid(config["grid"])
    row = run_trial(grid, grid.trial(config["trial"]), config.get("data_dir"), config.get("threads", 1))
    tune.report({k: v for k, v in row.items() if isinstance(v, (int, float))})


def run_grid(grid: Grid, address: str | None = None, cpus: int | None = None, threads: int = 1,
             data_dir: str | None = None, only: list[str] | None = None) -> int:
    """Runs every trial not yet recorded, `threads` CPUs each, on a local Ray (`cpus` CPUs, default all)
    or the Ray cluster at `address`; returns how many trials did not finish."""
    import ray
    from ray import tune
    trials = [grid.trial(n) for n in only] if only else list(grid.trials)
    todo = [t for t in trials if read_record(grid, t) is None]
    write_results(grid)
    print(f"{grid.name}: {len(trials)} trials, {len(trials) - len(todo)} done before", flush=True)
    if not todo:
        return 0
    data_dir = str(Path(data_dir).resolve()) if data_dir else None

    class Results(tune.Callback):
        def on_trial_complete(self, iteration, trials, trial, **info):
            write_results(grid)

    env = {"PYTHONPATH": os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3"),
           "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "tensorflow"),
           "OMP_NUM_THREADS": str(threads)}
    # Ctrl-C stops the grid at once rather than after Tune's graceful stop (the trials go on training for its
    # 10 s, then are killed anyway, and Tune's hint to restore its experiment does not apply here): the
    # running trials' state is their backups, at their last completed epoch. SIGTERM (`kill`, a batch
    # system's stop, a shutdown) does the same, also for a grid started in the background, where the shell
    # has set SIGINT to be ignored (and it stays so).
    sigint_setting = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    handlers = _stop_on_signals()
    _STOPPED_BY.clear()
    try:
        if address:
            ray.init(address=address, runtime_env={"env_vars": env}, include_dashboard=False)
        else:
            ray.init(num_cpus=cpus or os.cpu_count(), runtime_env={"env_vars": env}, include_dashboard=False)
        if handlers:  # Ray's core worker installs its own SIGTERM handler (it aborts): ours again
            signal.signal(signal.SIGTERM, _interrupt)
        # A new Tune experiment over the trials not yet recorded: finished ones are not scheduled at all,
        # and a trial that was running resumes from its backup (explorer.train --backup), which also holds
        # when the grid moved to another machine with the study folder and nothing of Ray's state.
        experiment = f"{grid.name}-{grid.digest()}-{time.strftime('%Y%m%d-%H%M%S')}"
        space = {"trial": tune.grid_search([t.name for t in todo]), "grid": str(grid.path), "data_dir": data_dir,
                 "threads": threads}
        tuner = tune.Tuner(tune.with_resources(_tune_trial, {"cpu": threads}), param_space=space,
                           tune_config=tune.TuneConfig(reuse_actors=False),
                           run_config=tune.RunConfig(name=experiment, storage_path=str(grid.folder / ".ray"),
                                                     callbacks=[Results()], verbose=1,
                                                     failure_config=tune.FailureConfig(max_failures=0)))
        results = tuner.fit()
    except KeyboardInterrupt:
        signal_name = _STOPPED_BY[-1] if _STOPPED_BY else "SIGINT"
        print(f"stopped ({'Ctrl-C' if signal_name == 'SIGINT' else signal_name}); running trials resume from "
              "their backups", file=sys.stderr, flush=True)
    else:
        for r in results:
            if r.error is not None:
                print(f"trial {r.config.get('trial')} failed: {r.error}", file=sys.stderr, flush=True)
    finally:
        ray.shutdown()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if sigint_setting is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = sigint_setting
    write_results(grid)
    left = [t for t in todo if read_record(grid, t) is None]
    print(f"{grid.name}: {len(trials) - len(left)} of {len(trials)} trials done"
          + (f"; not finished: {', '.join(t.name for t in left)} (run the same command again to resume)"
             if left else ""), flush=True)
    return len(left)


_STOPPED_BY: list[str] = []  # the signals _interrupt received (Tune may re-raise KeyboardInterrupt bare)


def _interrupt(signum, frame):
    _STOPPED_BY.append(signal.Signals(signum).name)
    raise KeyboardInterrupt(_STOPPED_BY[-1])


def _stop_on_signals() -> dict:
    """SIGTERM, and SIGINT unless it is ignored (as a shell's `&` leaves it), raise KeyboardInterrupt in the
    main thread; returns the handlers they had."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    signals = [signal.SIGTERM] + ([signal.SIGINT] if signal.getsignal(signal.SIGINT) != signal.SIG_IGN else [])
    return {sig: signal.signal(sig, _interrupt) for sig in signals}


# ---- plan -----------------------------------------------------------------------------------------------

def validation_cost(trial: Trial, validation_images: int, forward_ratio: float = 3.0) -> float:
    """Validation passes in training-image equivalents (a forward pass costs about a third of a step)."""
    passes = trial.epochs // trial.val_every + (1 if trial.epochs % trial.val_every else 0)
    return passes * validation_images / forward_ratio


def plan_table(grid: Grid, rate: float, validation_images: int = 5000) -> str:
    """The cost table: per size, the trials, their epochs and the hours each takes at `rate` training
    images/s per thread (validation and the final evaluations included)."""
    by_size: dict[tuple[int, str], list[Trial]] = {}
    for t in grid.trials:
        by_size.setdefault((t.train_images, grid.recipe_name(t)), []).append(t)
    lines = ["| train images | recipe | trials | epochs | validate every | images seen per trial | hours per trial "
             "| hours |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    total = 0.0
    for (n, recipe), trials in sorted(by_size.items()):
        t = trials[0]
        extra = validation_cost(t, validation_images) + (10000 + n) / 3.0  # test and train evaluations
        hours = (t.images_seen * grid.passes(t) + extra) / rate / 3600
        total += hours * len(trials)
        lines.append(f"| {n:,} | {recipe} | {len(trials)} | {t.epochs} | {t.val_every} | "
                     f"{t.images_seen * grid.passes(t):,} | {hours:.2f} | {hours * len(trials):.1f} |")
    lines.append(f"| **all** | | **{len(grid.trials)}** | | | | | **{total:.1f}** |")
    return "\n".join(lines)


def main(argv=None, settings: Settings | None = None) -> int:
    """The command line; `settings`: default, this process's environment (where CIFAR is found)."""
    p = argparse.ArgumentParser(prog="python -m explorer.study", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("plan", "run", "show", "report", "mechanisms"):
        s = sub.add_parser(name)
        s.add_argument("grid", nargs="?" if name != "show" else None, default=DEFAULT_GRID)
        if name == "show":
            s.add_argument("trial")
        if name in ("run", "show", "mechanisms"):
            s.add_argument("--data-dir", help="folder holding the CIFAR pickles (else as explorer.train finds them)")
        if name == "plan":
            s.add_argument("--rate", type=float, default=270.0,
                           help="training images/s of one thread on this host (default 270)")
        if name == "run":
            s.add_argument("--address", help="join the Ray cluster at this address instead of starting one; "
                                             "the study folder must be the same path on every node")
            s.add_argument("--cpus", type=int, help="CPUs of the local Ray (default: all): one trial each")
            s.add_argument("--threads", type=int, default=1, help="CPUs (TensorFlow threads) per trial")
            s.add_argument("--only", nargs="+", metavar="TRIAL", help="run only these trials")
    args = p.parse_args(argv)
    try:
        grid = read_grid(args.grid)
        if args.command == "plan":
            print(plan_table(grid, args.rate))
            for t in grid.trials:
                print(f"  {t.name}: {t.epochs} epochs, validation every {t.val_every}"
                      + (" (kept)" if grid.kept(t) else ""))
        elif args.command == "show":
            trial = grid.trial(args.trial)
            print(grid.trial_run(trial, args.data_dir).command())
        elif args.command == "run":
            if args.threads < 1 or (args.cpus is not None and args.cpus < args.threads):
                raise StudyError("--threads must be at least 1 and --cpus at least --threads")
            return 1 if run_grid(grid, args.address, args.cpus, args.threads, args.data_dir, args.only) else 0
        elif args.command == "report":
            for path in report(grid):
                print(f"wrote {path}")
        elif args.command == "mechanisms":
            settings = Settings.from_env() if settings is None else settings
            for path in mechanisms.write(grid.keep_dir.parent, grid.folder, args.data_dir, settings=settings):
                print(f"wrote {path}")
    except StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
