"""Training images/s of the fast path's settings against today's loop, measured in one run on one machine:
the paper recipe's step (crop, flip, mixup/CutMix on half the batches, RandAugment, random erasing) on the
chosen preset, each setting timed over whole epochs after a first epoch that compiles.

    host float32      numpy batches from the host, float32 (the loop as it trains the shipped models)
    device float32    the images on the device, crop/flip/mix inside the step (explorer.data.device_batches)
    device bf16       the same at mixed_bfloat16
    device bf16 xK    the same, K steps per call into the compiled step (JAX only; elsewhere as x1)
    ... batch 256     the last at a larger batch (its learning rate would follow the linear rule:
                      1e-3 x 256 / 128; not used by the recipe until it reaches the same accuracy)
    ... autoaugment   device bf16 xK with AutoAugment's CIFAR-10 policy in place of RandAugment (the recipe
                      paper-autoaugment: explorer.data.autoaugment)

The issue's target (GPU, paper preset, batch 128): 30,000 images/s or more, 3.3x the 9,100 of today's loop
on an H100. On a CPU the ratios only show that every setting runs; run it where a GPU is lent:

    KERAS_BACKEND=jax python bench/fast_path.py --preset paper --epochs 3 --steps 200     # on the GPU
    python bench/fast_path.py --preset tiny --epochs 2 --steps 12                         # a CPU rehearsal
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import _common  # noqa: F401  (puts the project on the path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="paper")
    p.add_argument("--variant", default="spt_lsa", choices=("vanilla", "spt", "lsa", "spt_lsa"))
    p.add_argument("--steps", type=int, default=200, help="steps per epoch")
    p.add_argument("--epochs", type=int, default=3, help="epochs per setting; the first (compiling) is not timed")
    p.add_argument("--steps-per-call", type=int, default=16)
    p.add_argument("--only", help="comma-separated setting names to run, in this order (default: all)")
    p.add_argument("--json", help="write the rows to this file too")
    p.add_argument("--randaugment", type=float, help="RandAugment's magnitude in every setting's step (default: the "
                                                     "paper recipe's; 0 leaves it out, as a rehearsal of the "
                                                     "stage may: it takes most of a tiny step's compiling)")
    args = p.parse_args()
    if args.randaugment is not None and args.randaugment < 0:
        p.error("--randaugment must be 0 (none) or a positive magnitude")
    if args.epochs < 2:
        p.error("--epochs must be at least 2: the first compiles and is not timed")

    import keras
    import numpy as np

    from explorer.core.devices import device_name
    from explorer.data.datasets import Dataset
    from explorer.model.config import get_preset
    from explorer.model.models import build_vit
    from explorer.training.fitting import fit
    from explorer.training.recipe import RECIPES, TrainConfig

    paper = {k: v for k, v in RECIPES["paper"].items() if k not in ("epochs", "batch_size", "repeats")}
    if args.randaugment is not None:
        paper["randaugment"] = args.randaugment
    settings = {
        "host float32": dict(batch_size=128),
        "device float32": dict(batch_size=128, device_data=True),
        "device bf16": dict(batch_size=128, device_data=True, precision="mixed_bfloat16"),
        f"device bf16 x{args.steps_per_call}": dict(batch_size=128, device_data=True, precision="mixed_bfloat16",
                                                    steps_per_call=args.steps_per_call),
        f"device bf16 x{args.steps_per_call} batch 256": dict(batch_size=256, device_data=True,
                                                              precision="mixed_bfloat16",
                                                              steps_per_call=args.steps_per_call,
                                                              learning_rate=2e-3),
        f"device bf16 x{args.steps_per_call} autoaugment": dict(batch_size=128, device_data=True,
                                                                precision="mixed_bfloat16",
                                                                steps_per_call=args.steps_per_call,
                                                                randaugment=0.0, autoaugment=True),
    }
    if args.only:  # in the order given: a run with a time limit measures the ones that matter first
        unknown = [k for k in args.only.split(",") if k not in settings]
        if unknown:
            p.error(f"--only: no setting {', '.join(map(repr, unknown))}; the settings: {', '.join(settings)}")
        settings = {k: settings[k] for k in args.only.split(",")}
    config = get_preset(args.preset, variant=args.variant)
    rng = np.random.default_rng(0)
    rows = []
    print(f"preset {args.preset} ({config.num_layers} blocks, dim {config.projection_dim}), {args.variant}, "
          f"backend {keras.backend.backend()}, device {device_name()}; {args.steps} steps x {args.epochs} epochs "
          f"per setting, the first epoch not timed", flush=True)
    for name, values in settings.items():
        n = args.steps * values["batch_size"]
        x = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        y = rng.integers(0, 10, n)
        data = Dataset("cifar10", x, y, x[:0], y[:0], [str(i) for i in range(10)])
        recipe = TrainConfig(**{**paper, **values, "epochs": args.epochs, "validation_fraction": 0.0})
        keras.utils.set_random_seed(0)
        model = build_vit(config, 10, precision=recipe.precision)
        began = time.perf_counter()
        history = [e.to_json() for e in fit(model, data, recipe, verbose=0).history]
        total = time.perf_counter() - began
        epochs = [e["time_s"] for e in history[1:]]
        rate = args.steps * values["batch_size"] / statistics.median(epochs)
        rows.append({"setting": name, "images_per_second": round(rate, 1), "batch_size": values["batch_size"],
                     "first_epoch_s": history[0]["time_s"], "epoch_s": epochs,
                     "loss": history[-1]["loss"], "wall_s": round(total, 1)})
        print(f"{name:32s} {rate:9.1f} images/s   first epoch {history[0]['time_s']:.1f} s, then "
              f"{', '.join(f'{e:.2f}' for e in epochs)} s; loss {history[-1]['loss']:.3f}", flush=True)
        keras.backend.clear_session()
        if args.json:  # after every setting, so that a run stopped at its time limit keeps what it measured
            with open(args.json, "w") as f:
                json.dump({"device": device_name(), "backend": keras.backend.backend(), "preset": args.preset,
                           "variant": args.variant, "steps": args.steps, "rows": rows}, f, indent=1)
    base = rows[0]["images_per_second"]
    for row in rows:
        print(f"  {row['setting']:32s} {row['images_per_second'] / base:5.2f}x {rows[0]['setting']}")


if __name__ == "__main__":
    main()
