"""`python -m explorer.train`: a new model trained with the keras.io recipe (its schedule really driving
AdamW; the recipe is explorer.training.recipe, the loop explorer.training.fitting), or a checkpoint
fine-tuned or continued (explorer.training.tuning); the training functions are explorer.training.runs's:
this module parses and calls.

    python -m explorer.train --preset cifar-small --variant spt_lsa --dataset cifar10 --epochs 30
    KERAS_BACKEND=jax python -m explorer.train --preset paper --recipe paper --variant vanilla   # on a GPU
    python -m explorer.train --base checkpoints/cifar10-spt_lsa --dataset my_images.zip --freeze-backbone
    python -m explorer.train --base runs/cifar10-spt_lsa --continue --dataset cifar10 --epochs 50 --lr 5e-4
    KERAS_BACKEND=jax python -m explorer.train --preset keras-io --dataset cifar100 --batch-size 256 --distribute
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field

from explorer.checkpoints.store import CheckpointError, read_card, resolve
from explorer.core.devices import DistributionError, check_batch_split, device_name, distribute_over_devices
from explorer.core.settings import Settings
from explorer.data.datasets import DATASETS, Dataset, DatasetError
from explorer.data.folders import held_out_problem, load_dataset
from explorer.model.config import PRESETS, VARIANTS, ViTConfig, get_preset
from explorer.training.backup import BackupError
from explorer.training.fitting import RunResult
from explorer.training.recipe import FINE_TUNE, RECIPES, TrainConfig
from explorer.training.runs import fine_tune, knows_classes, recipe_for, train_new

# --fast's steps per call into the compiled step: the host's Python between calls is paid once per 16 steps.
FAST_STEPS_PER_CALL = 16


def _default_help(name: str) -> str:
    recipe = {"epochs": f"about {FINE_TUNE.target_steps} steps' worth, {FINE_TUNE.image_budget} images at most",
              "batch_size": "scaled to the data (16-128)",
              "learning_rate": f"{FINE_TUNE.learning_rate}, or {FINE_TUNE.learning_rate_known} for classes the "
                               "base knows",
              "weight_decay": str(FINE_TUNE.weight_decay)}
    new = getattr(TrainConfig, name)
    tuned = recipe.get(name, new)
    return f"{new} (with --base, the fine-tune recipe: {tuned})" if tuned != new else str(new)


def _recipe_help() -> str:
    lines = []
    for name, values in RECIPES.items():
        lines.append(f"{name}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    return "; ".join(lines)


def _model_args(p: argparse.ArgumentParser) -> None:
    """The model flags: a new model of a preset and variant, or a checkpoint fine-tuned or continued."""
    g = p.add_argument_group("model", "a new model of a preset and variant, or a checkpoint fine-tuned or continued")
    g.add_argument("--preset", default=NewModelRun.preset, choices=sorted(PRESETS))
    g.add_argument("--variant", default=NewModelRun.variant, choices=VARIANTS)
    g.add_argument("--tau-mode", choices=("layer", "head"),
                   help="LSA temperature per layer or per head (default: the preset's; layer, head for paper)")
    g.add_argument("--drop-path", type=float, metavar="RATE",
                   help="stochastic depth of the last block, growing linearly from 0 at the first (default: the "
                        "preset's; 0, 0.1 for paper)")
    g.add_argument("--base", help="checkpoint folder or Hub id to fine-tune instead of a fresh model")
    g.add_argument("--continue", dest="extend", action="store_true",
                   help="with --base: a second stage of the base's own training (same data and split); "
                        "the new checkpoint's history and epochs include the base's")
    g.add_argument("--freeze-backbone", action="store_true")


def _data_args(p: argparse.ArgumentParser) -> None:
    """The data flags: the images and their splits."""
    g = p.add_argument_group("data", "the images and their splits")
    g.add_argument("--dataset", default=NewModelRun.dataset,
                   help="cifar10, cifar100, a folder of class folders, or a zip of them")
    g.add_argument("--data-dir", help="folder holding the CIFAR pickles (else $EXPLORER_DATA_DIR, "
                                      "~/.keras/datasets, then a download)")
    g.add_argument("--subset", type=int, help="train on this many images only")
    g.add_argument("--train-on-all", action="store_true",
                   help="a folder or zip: train on every image, holding none out (no test score); without it a "
                        "held-out fifth too small to judge the model is refused before training")
    g.add_argument("--balanced-subset", type=int, metavar="N",
                   help="after the validation split, train on N images, as many of each class, each size's "
                        "images part of every larger size's (drawn with --split-seed; the small-data study)")
    g.add_argument("--split-seed", type=int, help="seed of the validation split and of --subset or "
                                                 "--balanced-subset (default: --seed)")
    g.add_argument("--val-fraction", type=float, help="default: " + _default_help("validation_fraction"))
    g.add_argument("--test-subset", type=int, help="evaluate on this many test images only")


def _recipe_args(p: argparse.ArgumentParser) -> None:
    """The recipe flags: the optimisation (a named --recipe, or each value)."""
    g = p.add_argument_group("recipe", "the optimisation (a named --recipe, or each value)")
    g.add_argument("--recipe", choices=sorted(RECIPES),
                   help="a named recipe: its values replace the defaults below, and flags given explicitly win "
                        "over it (" + _recipe_help() + ")")
    g.add_argument("--epochs", type=int, help="default: " + _default_help("epochs"))
    g.add_argument("--batch-size", type=int, help="default: " + _default_help("batch_size"))
    g.add_argument("--lr", type=float, help="default: " + _default_help("learning_rate"))
    g.add_argument("--weight-decay", type=float, help="default: " + _default_help("weight_decay"))
    g.add_argument("--warmup", type=float, help="default: " + _default_help("warmup_fraction"))
    g.add_argument("--label-smoothing", type=float, help="default: " + _default_help("label_smoothing"))
    g.add_argument("--seed", type=int, default=0)


def _augmentation_args(p: argparse.ArgumentParser) -> None:
    """The augmentation flags: what each training image goes through."""
    g = p.add_argument_group("augmentation", "what each training image goes through")
    g.add_argument("--no-augment", action="store_true", help="no random crop and flip")
    g.add_argument("--mixup", type=float, metavar="ALPHA",
                   help="mixup with lam ~ Beta(ALPHA, ALPHA) (0 = off; 0.2-0.8 is usual; default 0)")
    g.add_argument("--cutmix", type=float, metavar="ALPHA",
                   help="CutMix with lam ~ Beta(ALPHA, ALPHA) (0 = off; 1.0 is usual; default 0); with --mixup "
                        "too, each mixed batch uses one of the two at random")
    g.add_argument("--mix-prob", type=float,
                   help="fraction of batches that are mixed when --mixup or --cutmix is on (default 1)")
    g.add_argument("--randaugment", type=float, metavar="FACTOR",
                   help="Keras' RandAugment inside the training step, at this strength (its factor, 0-1; 0 = off, "
                        "the default): --recipe paper's stand-in for AutoAugment's CIFAR policy (--autoaugment is "
                        "the policy itself). Two of its eleven operations per batch, each image at its own "
                        "magnitude; after crop, flip and mix")
    g.add_argument("--autoaugment", action=argparse.BooleanOptionalAction, default=None,
                   help="AutoAugment's CIFAR-10 policy inside the training step, each image its own sub-policy "
                        "(the authors' augmentation; in place of --randaugment); after crop, flip and mix "
                        "(default off; on in --recipe paper-autoaugment)")
    g.add_argument("--random-erasing", type=float, metavar="PROB",
                   help="inside the training step, after RandAugment or AutoAugment: erase one box of 2-40 %% of "
                        "the image with this probability (0 = off, the default)")
    g.add_argument("--repeats", type=int, metavar="N",
                   help="repeated augmentation: each epoch passes over the training images N times, each pass "
                        "shuffled and augmented anew (default 1)")


def _run_args(p: argparse.ArgumentParser) -> None:
    """The run flags: where it runs, how long, and what it writes."""
    g = p.add_argument_group("run", "where it runs, how long, and what it writes")
    g.add_argument("--out", default=NewModelRun.out, help="where the checkpoint folder is written")
    g.add_argument("--name", help="checkpoint folder name (default: <dataset>-<variant>)")
    g.add_argument("--val-every", type=int, default=1, metavar="N",
                   help="validate after every N-th epoch and after the last (default: 1)")
    g.add_argument("--max-seconds", type=float, help="stop after this much training time")
    g.add_argument("--max-steps", type=int, help="stop after this many optimizer steps")
    g.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="a window's budget for training (needs --backup): stop at the end of the last epoch that "
                        "fits, keep the backup and write no checkpoint; the same command resumes from it")
    g.add_argument("--backup", metavar="DIR",
                   help="folder where the run's state is kept after every epoch: the same command run again "
                        "resumes from the last completed epoch (a backup of another run is refused); "
                        "removed once the checkpoint is written")
    g.add_argument("--verbose", type=int, choices=(0, 1, 2),
                   help="Keras' progress: 1 a bar redrawn as it goes, 2 one line per epoch, 0 none (default: 1 on "
                        "a terminal, 2 when the output goes to a file or a pipe)")


def _devices_args(p: argparse.ArgumentParser) -> None:
    """The devices flags: the compute."""
    g = p.add_argument_group("devices", "the compute")
    g.add_argument("--precision", choices=("float32", "mixed_bfloat16"),
                   help="compute precision of a new model's training (default float32; mixed_bfloat16: bfloat16 "
                        "compute with float32 variables, temperatures, softmax, norms and loss; the checkpoint is "
                        "float32)")
    g.add_argument("--device-data", action="store_true",
                   help="a new model's training images on the device as uint8, with crop, flip and mix inside the "
                        "compiled step (the same draws as without it)")
    g.add_argument("--steps-per-call", type=int, metavar="K",
                   help="with --device-data on JAX: K training steps per call into the compiled step (default 1)")
    g.add_argument("--fast", action="store_true",
                   help="the GPU path: --precision mixed_bfloat16 --device-data --steps-per-call 16, unless given")
    g.add_argument("--threads", type=int, help="CPU threads for TensorFlow (default: all)")
    g.add_argument("--distribute", action="store_true",
                   help="train data-parallel over every device Keras' JAX backend sees (KERAS_BACKEND=jax): "
                        "each batch split evenly between them, so the batch size must be a multiple of "
                        "their number")


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m explorer.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for add in (_model_args, _data_args, _recipe_args, _augmentation_args, _run_args, _devices_args):
        add(p)
    args = p.parse_args(argv)
    if args.extend and not args.base:
        p.error("--continue needs --base: the checkpoint whose training it continues")
    if args.time_limit and not args.backup:
        p.error("--time-limit needs --backup: the folder the next window resumes from")
    if args.base and (args.fast or args.device_data or args.precision or args.steps_per_call):
        p.error("--fast, --device-data, --precision and --steps-per-call train a new model; a fine-tune "
                "(--base) runs in float32 from host batches")
    return args


# Each recipe value the command line sets: its TrainConfig field and its flag (whose argparse name follows from
# it), in the order NewModelRun.flags writes them. --no-augment turns `augment` off, and --fast stands for FAST,
# under the values given.
RECIPE_FLAGS = {
    "balanced_subset": "--balanced-subset", "split_seed": "--split-seed", "seed": "--seed", "epochs": "--epochs",
    "validation_every": "--val-every", "batch_size": "--batch-size",
    "learning_rate": "--lr", "weight_decay": "--weight-decay", "warmup_fraction": "--warmup",
    "label_smoothing": "--label-smoothing", "validation_fraction": "--val-fraction", "mixup_alpha": "--mixup",
    "cutmix_alpha": "--cutmix", "mix_prob": "--mix-prob", "randaugment": "--randaugment",
    "random_erasing": "--random-erasing", "autoaugment": "--autoaugment", "repeats": "--repeats",
    "train_subset": "--subset", "freeze_backbone": "--freeze-backbone", "max_seconds": "--max-seconds",
    "max_steps": "--max-steps", "time_limit": "--time-limit", "precision": "--precision",
    "device_data": "--device-data", "steps_per_call": "--steps-per-call", "augment": "--no-augment"}
# What sets one run of a study apart from another: NewModelRun.flags writes them before the rest of the recipe.
RUN_APART = ("balanced_subset", "split_seed", "seed", "epochs", "validation_every", "batch_size")
FAST = {"precision": "mixed_bfloat16", "device_data": True, "steps_per_call": FAST_STEPS_PER_CALL}


def flag_recipe(args) -> dict:
    """The recipe values the command line's flags give, without a named --recipe's (they go under these)."""
    given = {name: getattr(args, flag.removeprefix("--").replace("-", "_")) for name, flag in RECIPE_FLAGS.items()}
    given.update(augment=False if args.no_augment else None, device_data=True if args.device_data else None)
    given = {k: v for k, v in given.items() if v is not None}
    return {**FAST, **given} if args.fast else given


def with_named_recipe(name: str | None, given: dict) -> dict:
    """`given` over the named recipe's values, and the name for the card (None: TrainConfig's defaults)."""
    return {**RECIPES.get(name, {}), "name": name, **given} if name else dict(given)


def given_recipe(args) -> dict:
    """The recipe values the command line gives (a named recipe's under those given explicitly); the rest
    come from TrainConfig's defaults, or for a fine-tune the short recipe, which needs the dataset's size."""
    return with_named_recipe(args.recipe, flag_recipe(args))


@dataclass(frozen=True)
class NewModelRun:
    """A new model's run, as typed values: what `python -m explorer.train` runs for a command line without
    --base (from_args), and what each trial of the small-data study is (explorer.study.grid). `recipe` holds
    the TrainConfig values given, over the named recipe `recipe_name`'s and TrainConfig's defaults; `verbose`
    None is Keras' bar on a terminal, a line per epoch otherwise; flags() is the command line of the same run.
    """

    preset: str = "cifar-small"
    variant: str = "spt_lsa"
    tau_mode: str | None = None  # None: the preset's
    drop_path: float | None = None  # None: the preset's
    dataset: str = "cifar10"
    data_dir: str | None = None
    test_subset: int | None = None
    train_on_all: bool = False
    recipe_name: str | None = None
    recipe: dict = field(default_factory=dict)
    out: str = "checkpoints"
    name: str | None = None
    backup: str | None = None
    threads: int | None = None  # None: TensorFlow's default, all cores
    verbose: int | None = None
    distribute: bool = False

    @classmethod
    def from_args(cls, args) -> NewModelRun:
        return cls(preset=args.preset, variant=args.variant, tau_mode=args.tau_mode, drop_path=args.drop_path,
                   dataset=args.dataset, data_dir=args.data_dir, test_subset=args.test_subset,
                   train_on_all=args.train_on_all, recipe_name=args.recipe, recipe=flag_recipe(args), out=args.out,
                   name=args.name, backup=args.backup, threads=args.threads, verbose=args.verbose,
                   distribute=args.distribute)

    def recipe_values(self) -> dict:
        """The TrainConfig values of the run: those given, over the named recipe's."""
        return with_named_recipe(self.recipe_name, self.recipe)

    def plan(self) -> tuple[ViTConfig, TrainConfig]:
        """(the architecture, the recipe); a ValueError says what is wrong."""
        recipe = TrainConfig(**self.recipe_values())
        if recipe.time_limit and not self.backup:
            raise ValueError("a time limit needs a backup: the folder the same run resumes from")
        architecture = {k: v for k, v in dict(variant=self.variant, tau_mode=self.tau_mode,
                                              drop_path=self.drop_path).items() if v is not None}
        return get_preset(self.preset, **architecture), recipe

    def flags(self) -> list[str]:
        """The flags of `python -m explorer.train` that make this run: the model and the data; what sets one
        run of a study apart (its subset, seeds, length and batch); the recipe, a named one first; then where
        it runs and what it writes."""
        apart = [(RECIPE_FLAGS[name], self.recipe.get(name)) for name in RUN_APART]
        recipe = [(flag, self.recipe.get(name)) for name, flag in RECIPE_FLAGS.items() if name not in RUN_APART]
        values = [("--preset", self.preset), ("--variant", self.variant), ("--tau-mode", self.tau_mode),
                  ("--dataset", self.dataset), *apart, ("--recipe", self.recipe_name),
                  ("--drop-path", self.drop_path), *recipe, ("--threads", self.threads),
                  ("--verbose", self.verbose), ("--out", self.out), ("--name", self.name), ("--backup", self.backup),
                  ("--test-subset", self.test_subset), ("--data-dir", self.data_dir),
                  ("--train-on-all", self.train_on_all), ("--distribute", self.distribute)]
        return [word for flag, value in values for word in _flag_words(flag, value)]

    def command(self) -> str:
        return "python -m explorer.train " + " ".join(self.flags())


def _flag_words(flag: str, value) -> list[str]:
    if value is None:
        return []
    if flag == "--no-augment":  # the flag turns `augment` off
        return [flag] if value is False else []
    if flag == "--autoaugment":
        return [flag if value else "--no-autoaugment"]
    if isinstance(value, bool):
        return [flag] if value else []
    return [flag, str(value)]


def new_model_plan(args) -> tuple[ViTConfig | None, TrainConfig]:
    """(the architecture, or None with --base; the recipe); a ValueError says what is wrong."""
    if args.base:
        return None, TrainConfig(**given_recipe(args))
    return NewModelRun.from_args(args).plan()


def use_threads(threads: int | None) -> None:
    """TensorFlow's CPU threads, before it runs anything (None: its default, all cores)."""
    if threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        try:
            import tensorflow as tf
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except ImportError:
            pass


def _verbosity(verbose: int | None) -> int:
    return verbose if verbose is not None else (1 if sys.stdout.isatty() else 2)


def _run_data(name: str, data_dir: str | None, train_on_all: bool, test_subset: int | None, seed: int,
              settings: Settings, devices: int | None) -> Dataset:
    """The run's images, said on standard output; `devices`: those a data-parallel run spreads over (None:
    one)."""
    dataset = load_dataset(name, data_dir, test_fraction=0.0 if train_on_all else 0.2, settings=settings)
    if not train_on_all and dataset.name not in DATASETS and held_out_problem(dataset):
        raise DatasetError(f"{held_out_problem(dataset)} (--train-on-all)")
    if test_subset:
        dataset = dataset.subset(test=test_subset, seed=seed)
    print(f"dataset {dataset.name}: {len(dataset.x_train)} train / {len(dataset.x_test)} test images, "
          f"{dataset.num_classes} classes; device {device_name()}"
          + (f", data-parallel over {devices} devices" if devices is not None else ""), flush=True)
    if dataset.unreadable:
        print(f"warning: {dataset.note}", flush=True)
    return dataset


def _say_result(result: RunResult, epochs: int) -> None:
    """What a run wrote (or, stopped by its time limit, where its backup is), on standard output."""
    if result.stopped_by == "time_limit":
        print(f"time limit: {result.training.epochs} of {epochs} epochs done; backup kept in "
              f"{result.backup} (the same command resumes)", flush=True)
        return
    if result.training.kept_model:
        print(result.training.decision, flush=True)
    m, nan = result.metrics, float("nan")
    print(f"wrote {result.checkpoint}: test top-1 {nan if m.test_top1 is None else m.test_top1:.4f}, "
          f"top-5 {nan if m.test_top5 is None else m.test_top5:.4f}", flush=True)


def run_new_model(run: NewModelRun, settings: Settings | None = None) -> RunResult:
    """Trains the new model `run` describes as `python -m explorer.train` does, saying on standard output what
    it trains on and what it wrote; `settings`: default, this process's environment (where CIFAR is found). A
    refusal raises a ValueError that says why: a bad recipe or architecture (before anything is loaded), the
    data (DatasetError), another run's backup (BackupError), a checkpoint (CheckpointError), the devices
    (DistributionError)."""
    config, recipe = run.plan()
    settings = Settings.from_env() if settings is None else settings
    use_threads(run.threads)
    devices = distribute_over_devices() if run.distribute else 1  # before any model is built
    check_batch_split(recipe.batch_size, devices)
    dataset = _run_data(run.dataset, run.data_dir, run.train_on_all, run.test_subset, recipe.seed, settings,
                        devices if run.distribute else None)
    result = train_new(config, run.preset, dataset, recipe, run.out, run.name, verbose=_verbosity(run.verbose),
                       backup=run.backup)
    _say_result(result, recipe.epochs)
    return result


def _fine_tune_base(args, recipe: TrainConfig, settings: Settings) -> RunResult:
    """--base: the checkpoint fine-tuned, its recipe chosen once the data is read, or (--continue) a second
    stage of its own training."""
    use_threads(args.threads)
    devices = distribute_over_devices() if args.distribute else 1  # before any model is built
    if args.batch_size:  # else the recipe picks the batch size once the data is read
        check_batch_split(recipe.batch_size, devices)
    dataset = _run_data(args.dataset, args.data_dir, args.train_on_all, args.test_subset, args.seed, settings,
                        devices if args.distribute else None)
    if not args.extend:
        n = min(len(dataset.x_train), args.subset or len(dataset.x_train))
        base_classes = read_card(resolve(args.base)).class_names or []  # the card; the model once
        recipe = recipe_for(given_recipe(args), n, scratch=False,
                            known_classes=knows_classes(base_classes, dataset.class_names))
        print(f"recipe: {recipe.epochs} epochs of batch {recipe.batch_size}, learning rate {recipe.learning_rate}, "
              f"head {recipe.head_init}{', backbone frozen' if recipe.freeze_backbone else ''}", flush=True)
    result = fine_tune(args.base, dataset, recipe, args.out, args.name, verbose=_verbosity(args.verbose),
                       backup=args.backup, extend=args.extend)
    _say_result(result, recipe.epochs)
    return result


def main(argv=None, settings: Settings | None = None) -> int:
    """The command line; `settings`: default, this process's environment (where CIFAR is found)."""
    args = parse_args(argv)
    try:
        settings = Settings.from_env() if settings is None else settings
        _, recipe = new_model_plan(args)  # refuses a bad recipe before anything is loaded
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        if args.base:
            _fine_tune_base(args, recipe, settings)
        else:
            run_new_model(NewModelRun.from_args(args), settings)
    except (BackupError, CheckpointError, DatasetError, DistributionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
