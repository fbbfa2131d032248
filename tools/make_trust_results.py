"""Computes the Trust tab's shipped results for the shipped pair (cifar10-vanilla as A, cifar10-spt_lsa as B)
on the bundled 1,000 CIFAR-10 test images, once, and writes them beside the code:

    python tools/make_trust_results.py corruptions    # explorer/shipped/corruptions.json
    python tools/make_trust_results.py faithfulness   # explorer/shipped/faithfulness.json

Each file records the weights' SHA-256 of both models: the app shows it only for those exact models.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PAIR = ("cifar10-vanilla", "cifar10-spt_lsa")


def _pair():
    from explorer.analysis.corruptions import weights_digest
    from explorer.checkpoints.store import load_checkpoint
    folders = [ROOT / "checkpoints" / name for name in PAIR]
    return [load_checkpoint(f) for f in folders], [weights_digest(f) for f in folders]


def corruptions() -> None:
    from explorer.analysis import corruptions as cc
    from explorer.data.datasets import sample_set
    loaded, digests = _pair()
    sample = sample_set()
    began = time.perf_counter()
    table = cc.corruption_table([m for m, _ in loaded], sample.x_test, sample.y_test,
                                f"cifar10 test images 0-{len(sample.y_test) - 1} (the bundled sample)",
                                names=list(PAIR), progress=lambda f, m: print(f"{f:5.0%} {m}", flush=True))
    table.weights = digests
    cc.SHIPPED.parent.mkdir(exist_ok=True)
    cc.SHIPPED.write_text(json.dumps(table.to_json(), indent=1) + "\n")
    print(f"wrote {cc.SHIPPED} in {time.perf_counter() - began:.0f} s")


def faithfulness() -> None:
    from explorer.analysis import faithfulness as ff
    from explorer.data.datasets import sample_set
    loaded, digests = _pair()
    sample = sample_set()
    report = ff.faithfulness_report([(m, c) for m, c in loaded], sample.x_test, names=list(PAIR),
                                    progress=lambda f, m: print(f"{f:5.0%} {m}", flush=True))
    report.weights = digests
    ff.SHIPPED.parent.mkdir(exist_ok=True)
    ff.SHIPPED.write_text(json.dumps(report.to_json(), indent=1) + "\n")
    print(f"wrote {ff.SHIPPED}")


if __name__ == "__main__":
    {"corruptions": corruptions, "faithfulness": faithfulness}[sys.argv[1]]()
