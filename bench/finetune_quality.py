"""Does a short fine-tune learn, on any draw of the data? The default recipe against the linear probe, over
several draws of two kinds of small zip.

Each draw writes two zips of class folders in a temporary folder from the CIFAR pickles (../shared/data or
$EXPLORER_DATA_DIR), each split 80/20 by the loader (the app's and the CLI's split):
  known  5 CIFAR-10 classes (cat, deer, dog, frog, horse), 200 *test* images each: the base models never
         trained on these images, but know the classes. Draw d takes the d-th 200 of each class's 1,000 (in a
         fixed shuffled order): five draws share no image.
  new    10 of CIFAR-100's 20 coarse classes, drawn anew for each draw, every image of them (about 1,000: this
         copy of CIFAR-100 holds 2,033 images): a task the base models never saw; the draws differ in classes,
         images and split.
  six    6 of CIFAR-100's 20 coarse classes, drawn anew for each draw, every image of them (about 600: 480-540
         training images), the size of zip people upload.
For both shipped models and every draw it prints the test top-1 of the probe (a logistic regression on the
frozen pooled features of all training images) and of the default short recipe (`python -m explorer.train
--base CKPT --dataset ZIP`), with what the recipe kept and why; optional rows: the base head restricted to the
zip's classes, the recipe with a frozen backbone, training from scratch with the same steps, and the old CLI
default (30 epochs, batch 128, lr 1e-3, a fresh head). The summary gives, per model and kind of zip, the mean
over the draws of the default recipe and of the probe, and the worst draw's difference (goals: mean default >=
mean probe; no draw more than 1.5 points under its probe).

On 110-200 test images a draw's difference moves by a few images either way, so two measures can be added
that count many more predictions per draw. Held out: the known zips' models are also scored on the 800 other
test images of each of their classes that the draw's zip does not hold (4,000 images neither the base nor the
fine-tune saw). `--folds K`: each zip is run K times, the test part rotated so that every image is held out
once (fold 0 is the loader's own split, the headline table's); the draw's difference is then counted over all
of its images. Every measure prints every draw.

    python bench/finetune_quality.py [--draws 5] [--rows probe,default] [--zips known,new,six] [--folds 1]
"""

from __future__ import annotations

import argparse
import io
import pickle
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

from _common import ROOT, data_dir

KNOWN = ("cat", "deer", "dog", "frog", "horse")
NEW_CLASSES = 10
SIX_CLASSES = 6
ROWS = ("base", "probe", "default", "frozen", "scratch", "old")
# Margins (in McNemar standard errors) a fine-tuned epoch must clear over its start: the default recipe
# runs with the app's FINE_TUNE.margin_z; the others are scored from the same runs (see watch_settle).
MARGINS = (1.0, 1.5, 2.0, 2.5)


def watch_settle(test_x: np.ndarray, test_y: np.ndarray, seen: dict):
    """Wraps the fine-tune's settle so that, before it decides, the test top-1 of both candidates (the
    fine-tuned epoch validation chose, and the fallback: the start's backbone with its fallback head) and
    the epoch's paired gain on the validation images are put in `seen`. A stricter margin than the run's
    only turns a kept epoch into its fallback, whose test top-1 is then known: the margin sweep is exact."""
    import explorer.training.tuning as tuning
    from explorer.model.models import HEAD
    from explorer.model.predict import predict_logits
    from explorer.training.linear_probe import paired_gain
    original = tuning.settle

    def settle(model, record, start_weights, choice, val):
        seen.clear()
        if choice is not None and record.training.kept_epoch:
            top1 = lambda: float((predict_logits(model, test_x).argmax(-1) == test_y).mean())  # noqa: E731
            tuned, epoch = model.get_weights(), top1()
            gained, lost = paired_gain(predict_logits(model, val[0]).argmax(-1) == val[1], choice.start_correct)
            model.set_weights(start_weights)
            model.get_layer(HEAD).set_weights(list(choice.fallback))
            seen.update(epoch=epoch, fallback=top1(), gained=gained, lost=lost)
            model.set_weights(tuned)
        return original(model, record, start_weights, choice, val)

    tuning.settle = settle
    return original


def kept_at(margin: float, top1: float, seen: dict) -> float:
    """The default run's test top-1 had it needed `margin` standard errors (at least the run's own)."""
    from explorer.training.linear_probe import clearly_better
    if not seen:
        return top1
    return seen["epoch"] if clearly_better(seen["gained"], seen["lost"], margin) else seen["fallback"]


def _png(image: np.ndarray) -> bytes:
    from PIL import Image
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _write_zip(path: Path, images: np.ndarray, labels: np.ndarray, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for i, (image, label) in enumerate(zip(images, labels, strict=True)):
            z.writestr(f"{path.stem}/{names[label]}/{i:05d}.png", _png(image))
    return path


def _unpickle(path: Path) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f, encoding="bytes")


def _pixels(batch: dict) -> np.ndarray:
    return np.asarray(batch[b"data"], np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def _superclass_zip(folder: Path, x: np.ndarray, y: np.ndarray, coarse: list[str], count: int, seed: int,
                    draw: int, tag: str) -> Path:
    chosen = sorted(np.random.default_rng([seed, draw]).choice(len(coarse), count, replace=False).tolist())
    keep = np.flatnonzero(np.isin(y, chosen))
    return _write_zip(folder / f"cifar100-{count}-{tag}-d{draw}.zip", x[keep],
                      np.asarray([chosen.index(int(i)) for i in y[keep]]), [coarse[c] for c in chosen])


def draw_zips(folder: Path, data: Path, draw: int) -> dict[str, Path]:
    """The known-classes, new-classes and six-classes zips of draw `draw` (see the module's docstring); from
    draw 5 on only new and six (the known zips have used every test image of their classes by then)."""
    test = _unpickle(data / "cifar-10-batches-py" / "test_batch")
    names = [n.decode() for n in _unpickle(data / "cifar-10-batches-py" / "batches.meta")[b"label_names"]]
    x, y = _pixels(test), np.asarray(test[b"labels"])
    zips = {}
    keep = []
    for c in KNOWN:
        members = np.flatnonzero(y == names.index(c))
        order = members[np.random.default_rng([7, names.index(c)]).permutation(len(members))]
        keep.append(order[200 * draw:200 * (draw + 1)])
    keep = np.sort(np.concatenate(keep))
    if len(keep):
        zips["known"] = _write_zip(folder / f"cifar10-5-known-d{draw}.zip", x[keep],
                                   np.asarray([KNOWN.index(names[i]) for i in y[keep]]), list(KNOWN))
    c100 = data / "cifar-100-python"
    coarse = [n.decode() for n in _unpickle(c100 / "meta")[b"coarse_label_names"]]
    xs, ys = [], []
    for part in ("train", "test"):
        batch = _unpickle(c100 / part)
        xs.append(_pixels(batch))
        ys.append(np.asarray(batch[b"coarse_labels"]))
    x, y = np.concatenate(xs), np.concatenate(ys)
    return {**zips, "new": _superclass_zip(folder, x, y, coarse, NEW_CLASSES, 11, draw, "new"),
            "six": _superclass_zip(folder, x, y, coarse, SIX_CLASSES, 13, draw, "six")}


def held_out_known(data: Path, draw: int) -> tuple[np.ndarray, np.ndarray]:
    """The test images of the known zip's classes that draw `draw`'s known zip does not hold (800 of each
    class's 1,000), labelled as in that zip: neither the base models nor that draw's fine-tune saw them."""
    test = _unpickle(data / "cifar-10-batches-py" / "test_batch")
    names = [n.decode() for n in _unpickle(data / "cifar-10-batches-py" / "batches.meta")[b"label_names"]]
    x, y = _pixels(test), np.asarray(test[b"labels"])
    keep = []
    for c in KNOWN:
        members = np.flatnonzero(y == names.index(c))
        order = members[np.random.default_rng([7, names.index(c)]).permutation(len(members))]
        keep.append(np.delete(order, np.arange(200 * draw, 200 * (draw + 1))))
    keep = np.sort(np.concatenate(keep))
    return x[keep], np.asarray([KNOWN.index(names[i]) for i in y[keep]])


def fold(ds, k: int, folds: int):
    """`ds` with its test part rotated: fold 0 is `ds` itself (the loader's split); fold k of `folds` holds out
    the k-th of `folds` - 1 equal parts of each class's training images, and trains on the rest and on the
    loader's test part. Over all folds every image of the zip is held out once."""
    from dataclasses import replace
    if k == 0:
        return ds
    test, train = [], []
    for c in range(ds.num_classes):
        members = np.flatnonzero(ds.y_train == c)
        parts = np.array_split(members[np.random.default_rng([5, c]).permutation(len(members))], folds - 1)
        test.append(parts[k - 1])
        train.append(np.concatenate([p for i, p in enumerate(parts) if i != k - 1]))
    test, train = np.sort(np.concatenate(test)), np.sort(np.concatenate(train))
    return replace(ds, x_train=np.concatenate([ds.x_train[train], ds.x_test]),
                   y_train=np.concatenate([ds.y_train[train], ds.y_test]),
                   x_test=ds.x_train[test], y_test=ds.y_train[test])


def probe_accuracy(model, ds, held_out=None):
    """Logistic regression on the frozen pooled features of all training images; its L2 chosen on a 10 %
    validation split of them, then refitted on all of them. Its test top-1, and with `held_out` (images,
    labels) the pair of its test and held-out top-1."""
    from explorer.training.head import pooled_features
    head = probe_head(pooled_features(model, ds.x_train), ds.y_train, ds.num_classes)
    top1 = head.accuracy(pooled_features(model, ds.x_test), ds.y_test)
    if held_out is None:
        return top1
    return top1, head.accuracy(pooled_features(model, held_out[0]), held_out[1])


def probe_head(features, labels, num_classes: int):
    """The probe of probe_accuracy on features already pooled."""
    from explorer.data.batches import split_validation
    from explorer.training.linear_probe import fit_logistic, fit_probe
    (fx, fy), (vx, vy) = split_validation(features, labels, 0.1, 0)
    l2 = fit_probe(fx, fy, num_classes, vx, vy).l2
    return fit_logistic(features, labels, num_classes, l2)


def probe_on_features(features, labels, test, test_labels, num_classes: int) -> float:
    """probe_accuracy on features already pooled."""
    return probe_head(features, labels, num_classes).accuracy(test, test_labels)


def bench_model(ref: str, zip_name: str, ds, rows: list[str], lr: float | None, out: Path,
                results: dict[tuple, tuple[float, float]], held_out=None) -> None:
    """The rows asked for of one shipped model on one zip, each printed and kept in `results`; with
    `held_out` (images, labels of the zip's classes it does not hold), the probe's and the default's top-1
    on them too (kept under (zip, model, row, "held"))."""
    from explorer.checkpoints.store import load_checkpoint
    from explorer.model.config import ViTConfig
    from explorer.model.predict import accuracy_metrics, predict_logits
    from explorer.training.head import base_rows
    from explorer.training.recipe import TrainConfig
    from explorer.training.runs import train_new
    from explorer.training.tuning import fine_tune, fine_tune_recipe
    base = ROOT / "checkpoints" / ref
    model, card = load_checkpoint(base)
    config = ViTConfig.from_dict(card.config)
    n = len(ds.x_train)

    def record(row, top1, seconds=None):
        results[(zip_name, ref, row)] = (top1, seconds)
        timing = f"  {seconds:6.1f} s" if seconds is not None else ""
        print(f"{ref:18s} {row:8s} {100 * top1:6.1f} %{timing}", flush=True)

    if "base" in rows:
        index = base_rows(card.class_names, ds.class_names)
        if index is not None:
            logits = predict_logits(model, ds.x_test)[:, index]
            record("base", accuracy_metrics(logits, ds.y_test).top1)
    results[(zip_name, ref, "n")] = (len(ds.y_test), None)
    if "probe" in rows or "default" in rows:
        if held_out is None:
            record("probe", probe_accuracy(model, ds))
        else:
            top1, held = probe_accuracy(model, ds, held_out)
            record("probe", top1)
            results[(zip_name, ref, "probe", "held")] = (held, None)
            print(f"    held out ({len(held_out[1])} images): {100 * held:.2f} %", flush=True)

    def run(row, tc, scratch=False):
        start = time.perf_counter()
        seen: dict = {}
        if scratch:
            result = train_new(config, card.preset, ds, tc, out, f"{ref}-{row}", verbose=0)
        else:
            original = watch_settle(ds.x_test, ds.y_test, seen)
            try:
                result = fine_tune(base, ds, tc, out, f"{ref}-{row}", verbose=0)
            finally:
                import explorer.training.tuning
                explorer.training.tuning.settle = original
        kept = result.training.kept_epoch
        record(row, result.metrics.test_top1, time.perf_counter() - start)
        if row == "default" and held_out is not None and result.checkpoint:
            kept_model, _ = load_checkpoint(result.checkpoint)
            held = accuracy_metrics(predict_logits(kept_model, held_out[0]), held_out[1]).top1
            results[(zip_name, ref, "default", "held")] = (held, None)
            print(f"    held out ({len(held_out[1])} images): {100 * held:.2f} %", flush=True)
        if row == "default":
            top1 = result.metrics.test_top1
            results[(zip_name, ref, "margins")] = ({m: kept_at(m, top1, seen) for m in MARGINS}, None)
            if seen:
                spread = np.sqrt(seen["gained"] + seen["lost"]) or 1.0
                print(f"    epoch vs fallback: test {100 * seen['epoch']:.1f} % vs {100 * seen['fallback']:.1f} %; "
                      f"validation +{seen['gained']} -{seen['lost']} ({(seen['gained'] - seen['lost']) / spread:.2f} "
                      f"standard errors)", flush=True)
        t = result.training
        print(f"    {t.planned_epochs} epochs x batch {t.batch_size}, lr {t.recipe['learning_rate']:g}, "
              f"{t.steps} steps, {t.images_per_second} images/s", flush=True)
        ran = t.epochs if t.epochs_trained is None else t.epochs_trained
        from explorer.core.card import Start
        start_head = t.start or Start()
        print(f"    kept epoch {kept} of {ran}, head {start_head.head}, start val {start_head.val_top1}, "
              f"prepare {t.timing.prepare_s if t.timing else None} s", flush=True)
        print(f"    kept: {t.kept_model}: {t.decision}", flush=True)

    known = base_rows(card.class_names, ds.class_names) is not None
    recipe = fine_tune_recipe(n, learning_rate=lr, known_classes=known)
    if "default" in rows:
        run("default", recipe)
    if "frozen" in rows:
        run("frozen", fine_tune_recipe(n, learning_rate=lr, freeze_backbone=True, known_classes=known))
    if "scratch" in rows:
        run("scratch", TrainConfig(epochs=recipe.epochs, batch_size=recipe.batch_size), scratch=True)
    if "old" in rows:
        run("old", TrainConfig(epochs=30, head_init="new"))


def summary(title: str, zips: list[str], models: list[str], draws: int, score) -> None:
    """One measure's table: per kind of zip and model, the probe's and the default's mean, every draw's
    default - probe (points) and the worst; `score(zip_name, ref, draw, row)` gives a top-1 or None."""
    print(f"\n{title}")
    print("| zip | model | probe mean | default mean | " + " | ".join(f"draw {d}" for d in range(draws))
          + " | mean | worst | under -1.5 |")
    print("|---|---|---|---|" + "---|" * (draws + 3))
    every = []
    for zip_name in zips:
        for ref in models:
            pairs = [(score(zip_name, ref, d, "default"), score(zip_name, ref, d, "probe")) for d in range(draws)]
            if any(a is None or b is None for a, b in pairs):
                continue
            gaps = [100 * (a - b) for a, b in pairs]
            every += gaps
            print(f"| {zip_name} | {ref} | {100 * np.mean([b for _, b in pairs]):.1f} % | "
                  f"{100 * np.mean([a for a, _ in pairs]):.1f} % | " + " | ".join(f"{g:+.1f}" for g in gaps)
                  + f" | {np.mean(gaps):+.2f} | {min(gaps):+.1f} | {sum(g < -1.5 for g in gaps)} |")
    if every:
        print(f"all {len(every)} draws: mean {np.mean(every):+.2f}, worst {min(every):+.1f}, "
              f"{sum(g < -1.5 for g in every)} under -1.5 (goals: each mean >= 0; no draw under -1.5)")


def pooled(results: dict, folds: int, zip_name: str, ref: str, draw: int, row: str) -> float:
    """A row's top-1 over all of a draw's folds: images right over images held out, every image once."""
    names = [f"{zip_name}-d{draw}" + (f"-f{k}" if k else "") for k in range(folds)]
    n = [results[(name, ref, "n")][0] for name in names]
    return sum(results[(name, ref, row)][0] * m for name, m in zip(names, n, strict=True)) / sum(n)


def held_out_runs(models: list[str], draws: int, folds: int, results: dict) -> None:
    """Every run of the known zips (each draw's folds) on the 4,000 held-out images of its draw: a run's
    default - probe in points, counted over 4,000 images."""
    print(f"\nEvery known run ({folds} folds a draw) on its draw's 4,000 held-out images (default - probe, points):")
    print("| model | draw | " + " | ".join(f"fold {k}" for k in range(folds)) + " | mean |")
    print("|---|---|" + "---|" * (folds + 1))
    every = []
    for ref in models:
        for d in range(draws):
            names = [f"known-d{d}" + (f"-f{k}" if k else "") for k in range(folds)]
            if any((name, ref, "default", "held") not in results for name in names):
                continue
            gaps = [100 * (results[(name, ref, "default", "held")][0] - results[(name, ref, "probe", "held")][0])
                    for name in names]
            every += gaps
            print(f"| {ref} | {d} | " + " | ".join(f"{g:+.2f}" for g in gaps) + f" | {np.mean(gaps):+.2f} |")
    if every:
        print(f"all {len(every)} runs: mean {np.mean(every):+.2f}, worst {min(every):+.2f}, "
              f"{sum(g < -1.5 for g in every)} under -1.5")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="probe,default", help=f"which of {ROWS} to run")
    p.add_argument("--zips", default="known,new,six")
    p.add_argument("--draws", type=int, default=5, help="draws of each kind of zip (at most 5: known's images)")
    p.add_argument("--folds", type=int, default=1,
                   help="run each zip this many times, its test part rotated (fold 0: the loader's split)")
    p.add_argument("--models", default="cifar10-vanilla,cifar10-spt_lsa")
    p.add_argument("--lr", type=float, help="override the recipe's learning rate")
    p.add_argument("--steps", type=int, help="override the recipe's target number of steps")
    p.add_argument("--budget", type=int, help="override the recipe's image budget (FINE_TUNE.image_budget)")
    p.add_argument("--threads", type=int, default=0, help="TensorFlow threads (0: all cores)")
    args = p.parse_args()
    rows = args.rows.split(",")
    if not 1 <= args.draws <= 5:
        p.error("--draws must be 1-5: the known zips take 200 of each class's 1,000 test images per draw")
    if args.folds < 1 or args.folds == 2:
        p.error("--folds must be 1 or at least 3 (the rotated folds split the loader's training part)")

    import tensorflow as tf
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import dataclasses

    import explorer.training.tuning
    from explorer.data.folders import read_image_zip
    if args.steps or args.budget:  # the recipe fine_tune_recipe reads, for every run of this process
        tuning, recipe = explorer.training.tuning, explorer.training.tuning.FINE_TUNE
        tuning.FINE_TUNE = dataclasses.replace(recipe, target_steps=args.steps or recipe.target_steps,
                                               image_budget=args.budget or recipe.image_budget)

    zip_names, models = args.zips.split(","), args.models.split(",")
    results: dict[tuple, tuple[float, float]] = {}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for draw in range(args.draws):
            zips = draw_zips(tmp, Path(data_dir()), draw)
            for zip_name in zip_names:
                read = read_image_zip(zips[zip_name])
                held_out = held_out_known(Path(data_dir()), draw) if zip_name == "known" else None
                for k in range(args.folds):
                    ds = fold(read, k, args.folds)
                    print(f"\n## draw {draw}, {zip_name}" + (f", fold {k} of {args.folds}" if args.folds > 1 else "")
                          + f": {zips[zip_name].name}, {ds.num_classes} classes, {len(ds.x_train)} train / "
                          f"{len(ds.x_test)} test images (chance {100 / ds.num_classes:.1f} %)", flush=True)
                    for ref in models:
                        name = f"{zip_name}-d{draw}" + (f"-f{k}" if k else "")
                        bench_model(ref, name, ds, rows, args.lr, tmp / "out", results, held_out)
    if "default" not in rows:
        return
    print(f"\n## over {args.draws} draws ({time.perf_counter() - began:.0f} s)")

    def split(zip_name, ref, d, row):
        return results[(f"{zip_name}-d{d}", ref, row)][0]

    summary("On the loader's test split (default - probe, points):", zip_names, models, args.draws, split)
    if "known" in zip_names:
        summary("On the held-out images (known zips: the 4,000 test images of their classes no zip of the draw "
                "holds):", ["known"], models, args.draws,
                lambda z, ref, d, row: results.get((f"{z}-d{d}", ref, row, "held"), (None,))[0])
    if "known" in zip_names and args.folds > 1:
        held_out_runs(models, args.draws, args.folds, results)
    if args.folds > 1:
        summary(f"Over {args.folds} folds, every image of the zip held out once:", zip_names, models, args.draws,
                lambda z, ref, d, row: pooled(results, args.folds, z, ref, d, row))
    print("\nThe same runs (the loader's split) had a fine-tuned epoch needed more standard errors over its start "
          "(the run used FINE_TUNE.margin_z): default - probe, mean / worst draw / draws under -1.5")
    print("| zip | model | " + " | ".join(f"z >= {m:g}" for m in MARGINS) + " |")
    print("|---|---|" + "---|" * len(MARGINS))
    every = {m: [] for m in MARGINS}
    for zip_name in zip_names:
        for ref in models:
            cells = []
            for m in MARGINS:
                gaps = [100 * (results[(f"{zip_name}-d{d}", ref, "margins")][0][m]
                               - results[(f"{zip_name}-d{d}", ref, "probe")][0]) for d in range(args.draws)]
                every[m] += gaps
                cells.append(f"{np.mean(gaps):+.2f} / {min(gaps):+.1f} / {sum(g < -1.5 for g in gaps)}")
            print(f"| {zip_name} | {ref} | " + " | ".join(cells) + " |")
    print("| **all** | | " + " | ".join(f"**{np.mean(g):+.2f} / {min(g):+.1f} / {sum(x < -1.5 for x in g)}**"
                                       for g in every.values()) + " |")


if __name__ == "__main__":
    main()
