"""The Fine-tune tab's help states the recipe's numbers from the constants the recipe uses."""

from __future__ import annotations

import dataclasses

import pytest

from explorer.core.formatting import rate
from explorer.finetune.queue import QueuePlace
from explorer.finetune.state import RunStatus
from explorer.training.recipe import FINE_TUNE
from explorer.ui.finetune_text import help_text, wait_bar


def test_rate_is_written_as_people_write_it():
    assert [rate(x) for x in (5e-4, 1e-4, 1e-3, 0.05, 0.1, 0.0)] == ["5e-4", "1e-4", "1e-3", "0.05", "0.1", "0"]


def test_the_help_follows_the_recipes_constants(monkeypatch):
    text = help_text("here", 30, 5000)
    assert "5e-4, or\n1e-4 for classes the base knows" in text and "500 steps" in text and "4,000 images" in text
    assert "over\n1 standard error" in text and "Limits here: 30 epochs,\n5,000 images." in text
    from explorer.ui import finetune_text
    assert finetune_text.FINE_TUNE is FINE_TUNE
    monkeypatch.setattr(finetune_text, "FINE_TUNE", dataclasses.replace(FINE_TUNE, target_steps=750, margin_z=1.5))
    text = help_text("here", 30, 5000)
    assert "750 steps" in text and "over\n1.5 standard error" in text


@pytest.mark.parametrize("value", [FINE_TUNE.learning_rate, FINE_TUNE.learning_rate_known])
def test_the_rates_round_trip(value):
    assert float(rate(value)) == value


def test_the_run_status_says_which_model_was_kept_and_why():
    from explorer.core.card import Epoch, Metrics, Training
    from explorer.finetune.state import MemberState, RunState
    from explorer.ui.finetune_text import run_status
    member = MemberState("A", "A: cifar10-vanilla", step=90, total_steps=90, checkpoint="/runs/a",
                         metrics=Metrics(test_top1=0.8), history=[Epoch.from_json({"epoch": 0, "head": "base rows"})],
                         training=Training(images_per_second=100.0, kept_model="the base's rows",
                                           decision="Kept the base model's own answers: no fine-tuned epoch of 3 "
                                                    "scored above it on the 8 held-out validation images.",
                                           decision_detail="How the start was chosen: rows 60.0 %, probe 55.0 %"))
    text = run_status(RunState(status=RunStatus.DONE, members=[member], description="fine-tune"), "/runs")
    assert "kept: the base's rows" in text
    # The verdict in words on its own line; the numbers behind it one click away (a <details> block).
    assert ("A: cifar10-vanilla: Kept the base model's own answers: no fine-tuned epoch of 3 scored above it "
            "on the 8 held-out validation images.<details><summary>") in text
    assert "rows 60.0 %, probe 55.0 %</details>" in text


def test_a_run_being_cancelled_says_so_until_it_has_stopped():
    """After Cancel the run's headline (and its bar's line) says "cancelling", not "training A", and the
    Cancel button's answer is the run's own Cancelling line; once stopped, "cancelled"."""
    from explorer.core.protocol import Phase
    from explorer.finetune.state import CancelAnswer, MemberState, RunState
    from explorer.ui.finetune_text import CANCEL_ANSWERS, headline, run_bar, run_status
    member = MemberState("A", "A: cifar10-vanilla", step=10, total_steps=90, phase=Phase.TRAINING)
    state = RunState(status=RunStatus.TRAINING, device="CPU", members=[member], description="fine-tune")
    assert headline(state) == "**training** A"
    assert run_status(state, "/runs", now=0.0).startswith("**training** A · 46.0 % · ")  # 0.4 + 0.54 * 10/90
    assert "training A · 40.0 %" in run_bar(state, 0.4)
    state.cancelling = True
    assert headline(state) == "**cancelling** the run"
    assert CANCEL_ANSWERS[CancelAnswer.CANCELLING] in run_status(state, "/runs")
    # no percentage while it stops, in the line or on the bar (which keeps the fill it had reached)
    assert run_status(state, "/runs", now=0.0).startswith("**cancelling** the run · fine-tune · ")
    bar = run_bar(state, 0.4)
    assert "cancelling the run</div>" in bar and "%</div>" not in bar and 'aria-valuenow="40.0"' in bar
    state.status = RunStatus.CANCELLED
    assert headline(state) == "**cancelled**"
    assert CANCEL_ANSWERS[CancelAnswer.CANCELLING] not in run_status(state, "/runs")


def test_a_waiting_starts_bar_fills_with_its_wait_and_is_empty_without_an_estimate():
    """The run's box while a Start waits: the share of its wait behind it (waited / (waited + what is left)), its
    place and how long it has waited; no value at all (an empty bar) until there is an estimate."""
    half = wait_bar(QueuePlace(2, 3, 150.0, 50.0))
    assert 'aria-valuenow="25.0"' in half and "width: 25.0%" in half
    assert "waiting for your turn · 2 of 3 in the queue · 50 s so far" in half
    unknown = wait_bar(QueuePlace(1, 1, None, 120.0))
    assert "aria-valuenow" not in unknown and "width: 0.0%" in unknown and "2 min so far" in unknown
    assert 'aria-valuenow="100.0"' in wait_bar(QueuePlace(1, 1, 0.0, 30.0))  # its turn is due
    assert "aria-valuenow" not in wait_bar(QueuePlace(1, 1, 0.0, 0.0))  # nothing to go by yet
