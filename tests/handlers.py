"""The app's handlers as the page wires them, for the tests that call them without a server (test_ui*.py),
and the fine-tune form those tests fill. Their AppState (`ex`) and image (`image_file`) are conftest's
module fixtures: each test file gets its own."""

from __future__ import annotations

from types import SimpleNamespace

from explorer.ui import AppState
from explorer.ui.attention import AttentionTab
from explorer.ui.compare import CompareTab
from explorer.ui.evidence import EvidenceTab
from explorer.ui.finetune import PAIR, FinetuneTab
from explorer.ui.images import ImagesColumn
from explorer.ui.patches import PatchesTab
from explorer.ui.shell import Slots
from explorer.ui.tau import TauTab
from explorer.ui.what_if import WhatIfTab

A, B = "cifar10-vanilla", "cifar10-spt_lsa"  # the pair's names in pair_folder

# Each AppState's handlers, built once, keyed by the AppState itself (an id() could name a later AppState
# once the first is gone).
_UI: dict[AppState, SimpleNamespace] = {}


def ui(ex: AppState) -> SimpleNamespace:
    """Every tab's handlers on `ex`, as the page wires them."""
    if ex not in _UI:
        finetune = FinetuneTab(ex)
        _UI[ex] = SimpleNamespace(slots=Slots(ex, finetune), images=ImagesColumn(ex), compare=CompareTab(ex),
                                  patches=PatchesTab(ex), attention=AttentionTab(ex), what_if=WhatIfTab(ex),
                                  tau=TauTab(ex), finetune=finetune, evidence=EvidenceTab(ex))
    return _UI[ex]


def fine_tune_form(**changes) -> dict:
    """The Fine-tune tab's form as its Start sends it: a pair fine-tune of slots A and B on 256 CIFAR-10
    images for one epoch, with `changes` applied."""
    form = dict(what=PAIR, preset="tiny", variant="spt_lsa", data="cifar10", zip_file=None, epochs=1, lr=1e-3,
                batch_size=32, images=256, freeze=False, name="", ref_a=A, ref_b=B)
    form.update(changes)
    return form
