"""Computes the Trust tab's shipped results for a pair on the bundled 1,000 CIFAR-10 test images, once, and
writes them beside the code: the shipped pair (cifar10-vanilla as A, cifar10-spt_lsa as B) or the paper-scale
pair (paper/cifar10-vanilla as A, paper/cifar10-spt_lsa as B):

    python tools/make_trust_results.py corruptions            # explorer/shipped/corruptions.json
    python tools/make_trust_results.py faithfulness           # explorer/shipped/faithfulness.json
    python tools/make_trust_results.py corruptions paper      # explorer/shipped/corruptions-paper.json
    python tools/make_trust_results.py faithfulness paper     # explorer/shipped/faithfulness-paper.json
    python tools/make_trust_results.py logits [paper]         # explorer/shipped/logits/<digest>.npz, each model

Each file records the weights' SHA-256 of both models (of its model, for logits): the app shows it only for
those exact models. The logits are what the Trust tab's whole-set report predicts as it opens (the bundled
sample's 1,000 test images, the first 1,000 of CIFAR-10's test set).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# A pair's name -> (its references in checkpoints/, A then B; the suffix of its files' names)
PAIRS = {"shipped": (("cifar10-vanilla", "cifar10-spt_lsa"), ""),
         "paper": (("paper/cifar10-vanilla", "paper/cifar10-spt_lsa"), "-paper")}


def _pair(which: str):
    from explorer.analysis.corruptions import weights_digest
    from explorer.checkpoints.store import load_checkpoint
    folders = [ROOT / "checkpoints" / name for name in PAIRS[which][0]]
    return [load_checkpoint(f) for f in folders], [weights_digest(f) for f in folders]


def _target(kind: str, which: str) -> Path:
    from explorer.analysis.corruptions import SHIPPED
    return SHIPPED.parent / f"{kind}{PAIRS[which][1]}.json"


def corruptions(which: str = "shipped") -> None:
    from explorer.analysis import corruptions as cc
    from explorer.data.datasets import sample_set
    loaded, digests = _pair(which)
    pair = PAIRS[which][0]
    sample = sample_set()
    began = time.perf_counter()
    table = cc.corruption_table([m for m, _ in loaded], sample.x_test, sample.y_test,
                                f"cifar10 test images 0-{len(sample.y_test) - 1} (the bundled sample)",
                                names=list(pair), progress=lambda f, m: print(f"{f:5.0%} {m}", flush=True))
    table.weights = digests
    target = _target("corruptions", which)
    target.write_text(json.dumps(table.to_json(), indent=1) + "\n")
    print(f"wrote {target} in {time.perf_counter() - began:.0f} s")


def faithfulness(which: str = "shipped") -> None:
    from explorer.analysis import faithfulness as ff
    from explorer.data.datasets import sample_set
    loaded, digests = _pair(which)
    pair = PAIRS[which][0]
    sample = sample_set()
    began = time.perf_counter()
    report = ff.faithfulness_report([(m, c) for m, c in loaded], sample.x_test, names=list(pair),
                                    progress=lambda f, m: print(f"{f:5.0%} {m}", flush=True))
    report.weights = digests
    target = _target("faithfulness", which)
    target.write_text(json.dumps(report.to_json(), indent=1) + "\n")
    print(f"wrote {target} in {time.perf_counter() - began:.0f} s")


def logits(which: str = "shipped") -> None:
    import numpy as np

    from explorer.analysis import trust
    from explorer.data.datasets import sample_set
    loaded, digests = _pair(which)
    data = trust.test_set(sample_set(), 1000)
    trust.SHIPPED_LOGITS.mkdir(exist_ok=True)
    for (model, card), digest in zip(loaded, digests, strict=True):
        began = time.perf_counter()
        out = trust.predict(model, data.images)
        target = trust.SHIPPED_LOGITS / f"{digest[:16]}.npz"
        np.savez_compressed(target, weights=digest, set_key=data.key, logits=out)
        print(f"wrote {target} ({card.name}, top-1 {np.mean(out.argmax(-1) == data.labels):.3f}) in "
              f"{time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    {"corruptions": corruptions, "faithfulness": faithfulness, "logits": logits}[sys.argv[1]](*sys.argv[2:3])
