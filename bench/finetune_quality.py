"""Does a short fine-tune learn? The default recipe against the linear probe, on two small zips.

Builds two zips of class folders in a temporary folder from the CIFAR pickles (../shared/data or
$EXPLORER_DATA_DIR):
  known  5 CIFAR-10 classes (cat, deer, dog, frog, horse), 200 held-out *test* images each: the base models
         never trained on these images, but know the classes;
  new    6 CIFAR-100 coarse classes (flowers, fruit and vegetables, household electrical devices, household
         furniture, insects, people): a task the base models never saw.
Each zip is split 80/20 by the loader (the app's and the CLI's split). For both shipped models it prints
the test top-1 of: the base head restricted to the zip's classes (where they are base classes); a logistic
regression on the frozen pooled features (the probe); the default short recipe (`python -m explorer.train
--base CKPT --dataset ZIP`); the same recipe with a frozen backbone; training from scratch with the same
steps; and the old CLI default (30 epochs, batch 128, lr 1e-3, a fresh head), with wall times. The last
line is the lowest ratio, over models and zips, of default-recipe accuracy to probe accuracy (goal >= 1.0).

    python bench/finetune_quality.py [--rows default,probe] [--threads 2]
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
NEW = ("flowers", "fruit_and_vegetables", "household_electrical_devices", "household_furniture", "insects",
       "people")
ROWS = ("base", "probe", "default", "frozen", "scratch", "old")


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


def build_zips(folder: Path, data: Path) -> dict[str, Path]:
    test = _unpickle(data / "cifar-10-batches-py" / "test_batch")
    names = [n.decode() for n in _unpickle(data / "cifar-10-batches-py" / "batches.meta")[b"label_names"]]
    x, y = _pixels(test), np.asarray(test[b"labels"])
    keep = np.concatenate([np.flatnonzero(y == names.index(c))[:200] for c in KNOWN])
    known = _write_zip(folder / "cifar10-5-known.zip", x[keep], np.asarray([KNOWN.index(names[i]) for i in y[keep]]),
                       list(KNOWN))
    c100 = data / "cifar-100-python"
    coarse = [n.decode() for n in _unpickle(c100 / "meta")[b"coarse_label_names"]]
    xs, ys = [], []
    for part in ("train", "test"):
        batch = _unpickle(c100 / part)
        xs.append(_pixels(batch))
        ys.append(np.asarray(batch[b"coarse_labels"]))
    x, y = np.concatenate(xs), np.concatenate(ys)
    keep = np.flatnonzero(np.isin(y, [coarse.index(c) for c in NEW]))
    new = _write_zip(folder / "cifar100-6-new.zip", x[keep], np.asarray([NEW.index(coarse[i]) for i in y[keep]]),
                     list(NEW))
    return {"known": known, "new": new}


def probe_accuracy(model, ds) -> float:
    """Logistic regression on the frozen pooled features of all training images; its L2 chosen on a 10 %
    validation split of them, then refitted on all of them."""
    from explorer.batches import split_validation
    from explorer.finetune import pooled_features
    from explorer.linear import fit_logistic, fit_probe
    features, test = pooled_features(model, ds.x_train), pooled_features(model, ds.x_test)
    (fx, fy), (vx, vy) = split_validation(features, ds.y_train, 0.1, 0)
    l2 = fit_probe(fx, fy, ds.num_classes, vx, vy).l2
    return fit_logistic(features, ds.y_train, ds.num_classes, l2).accuracy(test, ds.y_test)


def bench_model(ref: str, zip_name: str, ds, rows: list[str], lr: float | None, out: Path,
                results: dict[tuple[str, str, str], tuple[float, float]]) -> None:
    """The rows asked for of one shipped model on one zip, each printed and kept in `results`."""
    from explorer.checkpoints import load_checkpoint
    from explorer.config import ViTConfig
    from explorer.finetune import base_rows, fine_tune, fine_tune_recipe
    from explorer.fitting import TrainConfig, accuracy_metrics, predict_logits
    from explorer.train import train_new
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
            record("base", accuracy_metrics(logits, ds.y_test)["top1"])
    if "probe" in rows or "default" in rows:
        record("probe", probe_accuracy(model, ds))

    def run(row, tc, scratch=False):
        start = time.perf_counter()
        if scratch:
            result = train_new(config, card.preset, ds, tc, out, f"{ref}-{row}", verbose=0)
        else:
            result = fine_tune(base, ds, tc, out, f"{ref}-{row}", verbose=0)
        kept = result["training"].get("kept_epoch")
        record(row, result["metrics"]["test_top1"], time.perf_counter() - start)
        t = result["training"]
        print(f"    {t['planned_epochs']} epochs x batch {t['batch_size']}, lr {t['recipe']['learning_rate']:g}, "
              f"{t['steps']} steps, {t['images_per_second']} images/s", flush=True)
        print(f"    kept epoch {kept} of {result['training']['epochs']}, head "
              f"{(result['training'].get('start') or {}).get('head')}, start val "
              f"{(result['training'].get('start') or {}).get('val_top1')}", flush=True)

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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default=",".join(ROWS), help=f"which of {ROWS} to run")
    p.add_argument("--zips", default="known,new")
    p.add_argument("--models", default="cifar10-vanilla,cifar10-spt_lsa")
    p.add_argument("--lr", type=float, help="override the recipe's learning rate")
    p.add_argument("--steps", type=int, help="override the recipe's target number of steps")
    p.add_argument("--budget", type=int, help="override the recipe's image budget (FT_IMAGE_BUDGET)")
    p.add_argument("--threads", type=int, default=0, help="TensorFlow threads (0: all cores)")
    args = p.parse_args()
    rows = args.rows.split(",")

    import tensorflow as tf
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import explorer.finetune
    from explorer.folders import read_image_zip
    if args.steps:
        explorer.finetune.FT_TARGET_STEPS = args.steps
    if args.budget:
        explorer.finetune.FT_IMAGE_BUDGET = args.budget

    results: dict[tuple[str, str, str], tuple[float, float]] = {}
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        zips = build_zips(tmp, Path(data_dir()))
        for zip_name in args.zips.split(","):
            ds = read_image_zip(zips[zip_name])
            print(f"\n## {zip_name}: {zips[zip_name].name}, {ds.num_classes} classes, {len(ds.x_train)} train / "
                  f"{len(ds.x_test)} test images (chance {100 / ds.num_classes:.1f} %)", flush=True)
            for ref in args.models.split(","):
                bench_model(ref, zip_name, ds, rows, args.lr, tmp / "out", results)
                if "default" in rows:
                    ratios.append((results[(zip_name, ref, "default")][0] / results[(zip_name, ref, "probe")][0],
                                   zip_name, ref))
    if ratios:
        low = min(ratios)
        print(f"lowest default/probe ratio {low[0]:.3f} ({low[2]} on {low[1]}); goal >= 1.0")


if __name__ == "__main__":
    main()
