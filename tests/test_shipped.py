"""The checkpoints shipped in checkpoints/ (the pair, and the ablation's other two corners once trained):
present, small, complete cards, one recipe, and honest numbers."""

import dataclasses

import numpy as np
import pytest

from explorer.checkpoints.store import list_checkpoints, load_checkpoint
from explorer.model.config import ViTConfig
from explorer.model.models import tau_values
from explorer.training.recipe import TrainConfig
from tests.helpers import ROOT

SHIPPED = ROOT / "checkpoints"
PAIR = ("cifar10-vanilla", "cifar10-spt_lsa")
NAMES = sorted(p.name for p in list_checkpoints(SHIPPED) if p.parent == SHIPPED)  # not fine-tuned runs


@pytest.fixture(scope="module")
def shipped():
    return {name: load_checkpoint(SHIPPED / name) for name in NAMES}


def test_all_are_listed_and_small():
    assert set(PAIR) <= set(NAMES)
    for name in NAMES:
        size = sum(p.stat().st_size for p in (SHIPPED / name).rglob("*") if p.is_file())
        assert size <= 10 * 2**20, f"{name} is {size / 2**20:.1f} MiB"


def test_cards_are_complete(shipped):
    for name, (_model, card) in shipped.items():
        config = ViTConfig.from_dict(card.config)
        assert card.dataset.name == "cifar10" and "JPEG" in card.dataset.note
        assert card.dataset.test_images == 10000 and card.dataset.validation_images == 5000
        assert card.preset and card.variant == config.variant
        training = card.training
        assert training.epochs >= 1 and training.wall_time_s > 0 and training.images_per_second > 0
        for key in ("test_top1", "test_top5", "test_top1_flip", "check_top1"):
            assert 0 < getattr(card.metrics, key) <= 1, key
        assert len(card.history) == training.epochs
        for epoch in card.history:
            assert {"loss", "top1", "val_top1", "tau"} <= set(epoch.to_json())
            assert len(epoch.tau) == (config.num_layers if config.use_lsa else 0)
        readme = (SHIPPED / name / "README.md").read_text()
        assert readme.startswith("---") and "test top-1" in readme and "JPEG" in readme
        assert "## Training history" in readme
        assert sum(line.startswith("| ") and line[2:3].isdigit() for line in readme.splitlines()) == training.epochs


def recipe(stored: dict) -> dict:
    """A card's recipe with every field: cards written before a field existed (mixup, keep-best, ...)
    leave it out, and its default is what they ran."""
    return dataclasses.asdict(TrainConfig(**stored))


def test_same_recipe_only_the_variant_differs(shipped):
    _, vanilla = shipped["cifar10-vanilla"]
    assert vanilla.variant == "vanilla"
    for name, (_, other) in shipped.items():
        assert name == f"cifar10-{other.variant}"
        if other.variant != "vanilla":
            assert other.config["tau_mode"] == "layer"
        differ = {k for k in vanilla.config if vanilla.config[k] != other.config[k]}
        assert differ <= {"variant"}, name
        assert recipe(vanilla.training.recipe) == recipe(other.training.recipe), name
        assert vanilla.training.epochs == other.training.epochs, name
        stages = [[(s.epochs, recipe(s.recipe)) for s in card.training.stages]
                  for card in (vanilla, other)]
        assert stages[0] == stages[1], name
        assert [e.stage or 1 for e in vanilla.history] == [e.stage or 1 for e in other.history], name


def test_check_set_accuracy_matches_the_card_on_a_fresh_machine(shipped, no_data):
    # No data folder, nothing in the Keras cache, offline: the bundled sample holds the check set.
    for name, (_model, card) in shipped.items():
        assert_check_set(SHIPPED / name, card, no_data)


def assert_check_set(folder, card, no_data) -> None:
    """The checkpoint scores its card's check set (the first 200 test images) on the bundled sample."""
    from explorer.analysis.evaluate import evaluate
    assert card.metrics.check_set == "cifar10 test images 0-199", folder.name
    result = evaluate([str(folder)], data_dir=str(no_data), limit=200, store=False)[0]
    assert result.dataset.sample and result.metrics.count == 200
    assert abs(result.metrics.top1 - card.metrics.check_top1) <= 0.01, folder.name
    assert abs(result.metrics.top5 - card.metrics.check_top5) <= 0.01, folder.name


def test_tau_in_the_card_is_the_models_tau(shipped):
    lsa = {name: loaded for name, loaded in shipped.items() if ViTConfig.from_dict(loaded[1].config).use_lsa}
    assert "cifar10-spt_lsa" in lsa
    for name, (model, card) in lsa.items():
        np.testing.assert_allclose(card.history[-1].tau, tau_values(model), rtol=1e-6, err_msg=name)


STUDY = SHIPPED / "study"


@pytest.mark.slow
def test_the_small_data_checkpoints_answer_their_cards_check_set_on_a_fresh_machine(no_data):
    """Each kept checkpoint of the small-data study scores its card's check set (the first 200 test images,
    which the bundled sample holds) on a machine with no data. The grid's trial wrote the card's numbers:
    its test top-1 and top-5 on all 10,000 test images as it saved the model, the check set from the same
    file once kept (explorer/study/grid.py); `python -m explorer.evaluate --no-store
    --data-dir ../shared/data checkpoints/study/<name>` re-measures the whole test set (docs/train.md)."""
    from explorer.checkpoints.store import read_card
    kept = sorted(p for p in list_checkpoints(STUDY) if p.parent == STUDY)
    assert kept, "no study checkpoint is shipped"
    for folder in kept:
        card = read_card(folder)
        assert card.dataset.train_images < 45000 and card.metrics.test_count == 10000, folder.name
        assert_check_set(folder, card, no_data)
