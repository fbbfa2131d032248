"""Training images/s: our loop (explorer.training.fitting.fit) against the seed's own loop (keras.io vit_small_ds,
bench/seed_vit_small_ds.py) on the same preset geometry, data and batch size, measured in one run.

Hosts of this kind are noisy (a neighbour's load comes and goes within a minute), so the two loops take
turns: each round trains both, the one that went second going first in the next round, and the ratio
reported is the median of the rounds' ratios, each round's printed beside it.

    python bench/train_throughput.py [--preset cifar-small] [--variant spt_lsa] [--steps 60] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import data_dir


class Timer:
    """Steps done and when, as the loop reports them; the rate is taken over the steps after the first `skip`.

    Counts steps by their number, not by reports: our loop reports a step at most every
    fitting.PROGRESS_EVERY_S (and always an epoch's last), so on a host faster than one step per 0.25 s counting
    reports would count too few steps and understate its speed."""

    def __init__(self, skip):
        self.skip, self.marks = skip, []

    def mark(self, steps_done):
        self.marks.append((steps_done, time.perf_counter()))

    def rate(self, batch_size):
        marks = [(s, t) for s, t in self.marks if s > self.skip]
        if len(marks) < 2 or marks[-1][0] == marks[0][0]:
            raise SystemExit(f"fewer than two steps were reported after the first {self.skip}: give more --steps")
        (s0, t0), (s1, t1) = marks[0], marks[-1]
        return (s1 - s0) * batch_size / (t1 - t0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="cifar-small")
    p.add_argument("--variant", default="spt_lsa", choices=("vanilla", "spt_lsa"))
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--skip", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if args.rounds < 1 or args.steps < args.skip + 2:
        p.error("--rounds must be at least 1 and --steps at least --skip + 2 (two timed batches)")

    import keras

    from explorer.core.protocol import BatchEnd
    from explorer.data.datasets import load_cifar
    from explorer.model.config import get_preset
    from explorer.model.models import build_vit
    from explorer.training.fitting import fit
    from explorer.training.recipe import TrainConfig
    from seed_vit_small_ds import build_seed_model, compile_seed

    ds = load_cifar("cifar10", data_dir())
    n = args.steps * args.batch_size
    config = get_preset(args.preset, variant=args.variant)
    x, y = ds.x_train[:n].astype("float32"), ds.y_train[:n]

    def ours():
        timer = Timer(args.skip)
        model = build_vit(config, ds.num_classes)
        fit(model, ds.subset(train=n, test=0), TrainConfig(epochs=1, batch_size=args.batch_size,
                                                            validation_fraction=0.0, max_steps=args.steps),
            verbose=0, progress=lambda e: timer.mark(e.step) if isinstance(e, BatchEnd) else None)
        return timer.rate(args.batch_size), model.count_params()

    def seed():
        timer = Timer(args.skip)
        keras.utils.set_random_seed(0)
        model = compile_seed(build_seed_model(
            x, ds.num_classes, image_size=config.input_size, patch_size=config.patch_size,
            projection_dim=config.projection_dim, num_heads=config.num_heads, key_dim=config.key_dim,
            transformer_units=config.mlp_units, transformer_layers=config.num_layers,
            mlp_head_units=config.head_units, vanilla=args.variant == "vanilla"))
        model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=0,
                  callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: timer.mark(b + 1))])
        return timer.rate(args.batch_size), model.count_params()

    print(f"preset {args.preset} ({config.input_size} px, patch {config.patch_size}, {config.num_layers} blocks, "
          f"dim {config.projection_dim}), {args.variant}, batch {args.batch_size}, {args.steps} steps "
          f"(first {args.skip} skipped), {args.rounds} rounds", flush=True)
    rates: dict[str, list[float]] = {"ours": [], "seed": []}
    params = {}
    for r in range(args.rounds):
        order = (("ours", ours), ("seed", seed)) if r % 2 == 0 else (("seed", seed), ("ours", ours))
        for name, run in order:
            rate, params[name] = run()
            rates[name].append(rate)
        print(f"round {r + 1} ({order[0][0]} first): seed {rates['seed'][-1]:6.1f}, ours {rates['ours'][-1]:6.1f} "
              f"images/s, ratio {rates['ours'][-1] / rates['seed'][-1]:.2f}", flush=True)
    ratios = [o / s for o, s in zip(rates["ours"], rates["seed"], strict=True)]
    print(f"seed loop (keras.io vit_small_ds): {statistics.median(rates['seed']):7.1f} images/s (median)   "
          f"params {params['seed']:,}")
    print(f"our loop (explorer.training.fitting.fit):     {statistics.median(rates['ours']):7.1f} images/s (median)   "
          f"params {params['ours']:,}")
    print(f"ratio ours / seed = {statistics.median(ratios):.2f} (median of {len(ratios)} rounds: "
          f"{', '.join(f'{q:.2f}' for q in ratios)})  (goal >= 1.2)")


if __name__ == "__main__":
    main()
