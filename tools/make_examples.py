"""Writes the examples a first visit sees (explorer/examples/): test images from the bundled sample, one per
case of the first visit's pair (EXPLORER_MODEL_A / _B, by default the paper-scale pair: A = paper/cifar10-vanilla,
B = paper/cifar10-spt_lsa): only B right, only A right, both right, both wrong, each of a different class, the
ones each model is most sure of in its case.

    python tools/make_examples.py

The first is the one the page opens with, already analysed. Files are named like test samples
(`cifar10-test-00042-cat.png`), so the app knows their true label.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (case, how many): the order the examples are shown in.
PLAN = [("b", 1), ("both", 2), ("a", 1), ("neither", 1)]


def main() -> int:
    from PIL import Image

    from explorer.checkpoints.store import load_checkpoint
    from explorer.core.settings import Settings
    from explorer.data.datasets import sample_set
    from explorer.data.samples import EXAMPLES_DIR
    from explorer.model.predict import predict_logits
    settings = Settings.from_env()
    ds = sample_set()
    probs = []
    for name in (settings.model_a, settings.model_b):
        model, _ = load_checkpoint(ROOT / "checkpoints" / name)
        logits = predict_logits(model, ds.x_test)
        e = np.exp(logits - logits.max(-1, keepdims=True))
        probs.append(e / e.sum(-1, keepdims=True))
    pa, pb, y = probs[0].argmax(-1), probs[1].argmax(-1), ds.y_test
    right_a, right_b = pa == y, pb == y
    cases = {"b": ~right_a & right_b, "a": right_a & ~right_b, "both": right_a & right_b,
             "neither": ~right_a & ~right_b}
    # How sure the model(s) are of their answers in that case: a clear example of each.
    sure = {"b": probs[1].max(-1), "a": probs[0].max(-1),
            "both": np.minimum(probs[0].max(-1), probs[1].max(-1)), "neither": probs[1].max(-1)}
    EXAMPLES_DIR.mkdir(exist_ok=True)
    for old in EXAMPLES_DIR.glob("*.png"):
        old.unlink()
    used_classes, entries = set(), []
    for case, count in PLAN:
        for i in np.argsort(-sure[case]):
            if count == 0:
                break
            if not cases[case][i] or y[i] in used_classes:
                continue
            label = ds.class_names[y[i]]
            file = f"cifar10-test-{i:05d}-{label}.png"
            Image.fromarray(ds.x_test[i]).save(EXAMPLES_DIR / file)
            entries.append({"file": file, "label": label, "case": case, "a": ds.class_names[pa[i]],
                            "b": ds.class_names[pb[i]]})
            used_classes.add(y[i])
            count -= 1
    (EXAMPLES_DIR / "examples.json").write_text(json.dumps(entries, indent=1) + "\n")
    for e in entries:
        print(f"{e['file']:<32} {e['case']:<8} A {e['a']:<11} B {e['b']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
