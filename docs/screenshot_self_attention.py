"""Draws docs/self-attention.png: the paper-scale ViT's first layer beside SPT + LSA's, every head from one query
patch of one CIFAR-10 test image, as the Attention tab draws them (each head's distance and self-attention on its
tile, the most local head framed green, the most self-attending blue). No browser: the tab's own functions.

    python docs/screenshot_self_attention.py [--index 3] [--query 16 16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PAIR = ("paper/cifar10-vanilla", "paper/cifar10-spt_lsa")


def main(argv=None) -> None:
    from PIL import Image

    from explorer.analysis import render
    from explorer.app.attention import HEAD_ALL, analyze_pair, side_by_side_pictures
    from explorer.app.models import ModelStore
    from explorer.app.results import ResultCache
    from explorer.data.datasets import sample_set

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=int, default=3, help="the CIFAR-10 test image (of the bundled sample)")
    parser.add_argument("--query", type=float, nargs=2, default=(16.0, 16.0), help="the query pixel y x (of 32)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "self-attention.png"))
    args = parser.parse_args(argv)
    sample = sample_set()
    image = sample.x_test[args.index]
    store = ModelStore(ROOT / "checkpoints")
    models = [store.get(ref) for ref in PAIR]
    views = analyze_pair(models, ResultCache(), image, image, [0, 0], HEAD_ALL, tuple(args.query), parts=("focus",))
    vit = views[0]["view"].marks
    name = sample.class_names[int(sample.y_test[args.index])]
    title = (f"CIFAR-10 test image {args.index} ({name}), query patch row {views[0]['view'].query[0]}, col "
             f"{views[0]['view'].query[1]}: layer 0 of each. The ViT's head {vit.most_self} gives its own patch "
             f"{100 * vit.self_share[vit.most_self]:.0f} % (even: 1.6 %); LSA's mask forbids it.")
    picture = render.label_image(side_by_side_pictures(views, ("focus",))["focus"], title)
    Image.fromarray(picture).save(args.out, optimize=True)
    print(f"wrote {args.out}: {picture.shape[1]}x{picture.shape[0]}")


if __name__ == "__main__":
    main()
