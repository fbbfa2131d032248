"""The typed card: every card written so far reads and writes back as the same JSON, old cards load, and a
card built with keywords writes what its writers always wrote."""

from __future__ import annotations

import json

import pytest

from explorer.checkpoints.model_card import model_card
from explorer.core.card import CARD, Card, Data, Epoch, Lineage, Metrics, Source, Start, Training
from tests.helpers import ROOT

# The shipped checkpoints' cards, the ablation's stages and the small-data study's records (indent 1).
SHIPPED = sorted(ROOT.glob(f"checkpoints/**/{CARD}")) + sorted(ROOT.glob(f"ablation/*/{CARD}"))
RECORDS = sorted(ROOT.glob("study/cards/*.json"))


def test_there_are_cards_to_read():
    assert len(SHIPPED) >= 10 and len(RECORDS) >= 10


@pytest.mark.parametrize("path", SHIPPED + RECORDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_card_written_so_far_reads_and_writes_back_as_the_same_json(path):
    text = path.read_text()
    data = json.loads(text)
    card = Card.from_json(data)
    assert card.to_json() == data
    indent = 1 if path in RECORDS else 2
    assert json.dumps(card.to_json(), indent=indent) == text  # the same keys in the same order, too
    assert Card.from_json(card.to_json()) == card


def test_a_shipped_card_reads_as_typed_sections():
    card = Card.from_json(json.loads((ROOT / "checkpoints" / "cifar10-spt_lsa" / CARD).read_text()))
    assert card.variant == "spt_lsa" and card.dataset.name == "cifar10" and len(card.class_names) == 10
    assert isinstance(card.metrics, Metrics) and 0 < card.metrics.test_top1 < 1
    assert isinstance(card.history[0], Epoch) and card.history[-1].epoch == card.training.epochs
    assert isinstance(card.training, Training) and card.training.recipe["batch_size"] > 0
    assert isinstance(card.base, Lineage) and card.base.continued is True
    assert card.source is None and card.run is None


OLD = {"variant": "lsa", "preset": "cifar-small", "config": {"image_size": 32},
       "dataset": {"name": "cifar10", "num_classes": 10},
       "class_names": ["a", "b"], "metrics": {"top1": 0.5},
       "history": [{"epoch": 1, "loss": 2.0, "tau": [[1.0, 2.0]]}],
       "training": {"epochs": 1, "recipe": {"epochs": 1, "batch_size": 8}},
       "format": "explorer-vit-checkpoint", "format_version": 1, "name": "old", "parameters": 12,
       "versions": {"keras": "3.0"}, "created": "2024-01-01T00:00:00+00:00",
       "someday": {"a field": "no section knows"}}


def test_an_old_card_without_the_newer_fields_loads_with_defaults_and_writes_back_unchanged():
    card = Card.from_json(OLD)
    assert card.base is None and card.source is None and card.training.stages == []
    assert card.training.start is None and card.training.timing is None and card.history[0].stage is None
    assert card.metrics.test_top1 is None and card.dataset.train_images is None
    assert card.extra == {"someday": {"a field": "no section knows"}}
    assert card.to_json() == OLD and list(card.to_json()) == list(OLD)
    readme = model_card(card)  # the model card of an old card: what it has, nothing it lacks
    assert "# old" in readme and "| epochs | 1 |" in readme and "## Fine-tuning" not in readme


def test_a_field_set_on_a_card_that_lacked_it_is_written_after_its_keys():
    card = Card.from_json(OLD)
    card.metrics.test_top1 = 0.75
    card.run = Card.from_json({"run": {"id": "r", "owner": None, "ended": 1.0}}).run
    data = card.to_json()
    assert data["metrics"] == {"top1": 0.5, "test_top1": 0.75}
    assert list(data)[-2:] == ["someday", "run"] and data["run"] == {"id": "r", "owner": None, "ended": 1.0}
    assert "| test top-1 | 75.00 % |" in model_card(card)


def test_a_card_built_with_keywords_writes_what_the_trainer_wrote():
    training = {"epochs": 1, "planned_epochs": 1, "steps": 4, "wall_time_s": 1.5, "images_per_second": None,
                "train_images": 20, "batch_size": 8, "start": None, "kept_epoch": 1, "validation_images": 4,
                "device": "CPU", "devices": 1, "recipe": {"epochs": 1}, "timing": {"compiled": True}}
    card = Card(variant="spt", preset=None, config={"image_size": 32},
                dataset=Data(name="mine", num_classes=2, source="mine.zip", train_images=20, validation_images=4,
                             test_images=0, note=None),
                class_names=["a", "b"], metrics=Metrics.from_json({"top1": 0.5}),
                history=[Epoch.from_json({"epoch": 1, "time_s": 0.5})], training=Training.from_json(training),
                base=Lineage(name=None, source="base-folder"))
    assert card.to_json() == {
        "variant": "spt", "preset": None, "config": {"image_size": 32},
        "dataset": {"name": "mine", "num_classes": 2, "source": "mine.zip", "train_images": 20,
                    "validation_images": 4, "test_images": 0, "note": None},
        "class_names": ["a", "b"], "metrics": {"top1": 0.5}, "history": [{"epoch": 1, "time_s": 0.5}],
        "training": training, "base": {"name": None, "source": "base-folder"}}
    assert list(card.to_json()["dataset"]) == ["name", "num_classes", "source", "train_images",
                                               "validation_images", "test_images", "note"]


def test_a_card_built_with_keywords_writes_what_the_converter_wrote():
    # explorer.convert's card: empty metrics, history and training, no base, and where the model came from.
    card = Card(variant="spt_lsa", preset="keras-io", config={"image_size": 32},
                dataset=Data(name="unknown", num_classes=3, note="converted"), class_names=["a", "b", "c"],
                source=Source(kind="keras-io-example", source="/x/model", revision=None, format="keras3-archive",
                              mapped=["tokenizer"], dropped=[], tau=[1.0], class_names_assumed=False,
                              class_names_from="labels.txt"))
    assert card.to_json() == {
        "variant": "spt_lsa", "preset": "keras-io", "config": {"image_size": 32},
        "dataset": {"name": "unknown", "num_classes": 3, "note": "converted"}, "class_names": ["a", "b", "c"],
        "metrics": {}, "history": [], "training": {}, "base": None,
        "source": {"kind": "keras-io-example", "source": "/x/model", "revision": None, "format": "keras3-archive",
                   "mapped": ["tokenizer"], "dropped": [], "tau": [1.0], "class_names_assumed": False,
                   "class_names_from": "labels.txt"}}
    assert "## Source" in model_card(card) and "- tokenizer" in model_card(card)


def test_model_card_sections():
    card = Card.from_json({
        "variant": "spt_lsa", "preset": "tiny", "config": {"image_size": 16}, "name": "ft",
        "dataset": {"name": "pets", "num_classes": 2, "note": "a zip"}, "class_names": ["cat", "dog"],
        "metrics": {"test_top1": 0.9, "test_top5": 1.0}, "parameters": 1234,
        "history": [{"epoch": 1, "loss": 0.5, "learning_rate": 0.001, "tau": [[2.0, 2.5]]}],
        "training": {"epochs": 1, "planned_epochs": 1, "batch_size": 8, "kept_epoch": 0, "device": "CPU",
                     "images_per_second": 50.0, "start": {"head": "base rows", "val_top1": 0.8},
                     "recipe": {"learning_rate": 0.001, "weight_decay": 0.05, "keep_best": True}},
        "base": {"name": "cifar10-spt_lsa", "source": "checkpoints/cifar10-spt_lsa"}})
    readme = model_card(card)
    assert readme.startswith("---\nlibrary_name: keras") and "      value: 0.9000" in readme
    assert "| dataset | pets (2 classes) |" in readme and "| data note | a zip |" in readme
    assert "| test top-1 | 90.00 % |" in readme and "| parameters | 1234 |" in readme
    assert ("Fine-tuned from `cifar10-spt_lsa`. The classifier head started from base rows (validation top-1 "
            "80.0 % before any step); then the whole model trained for 1 epochs of batch 8") in readme
    assert "the epoch kept, by validation top-1, was 0 (the starting head)." in readme
    assert "| 1 | 0.5000 | – | – | 1.00e-03 | 2.000, 2.500 |" in readme
    assert "16 px square" in readme and "`your-name/ft@<revision>`" in readme
    assert "## Training stages" not in readme and "## Source" not in readme


def test_start_and_sections_left_out_read_as_none():
    assert Training.from_json({"start": {"head": "new"}}).start == Start(head="new")
    assert Card().to_json()["base"] is None and "source" not in Card().to_json()
