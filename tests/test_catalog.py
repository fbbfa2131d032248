"""The slots' lists grouped and labelled from the cards, and the study's pair at each training-set size."""

from __future__ import annotations

from explorer.card import Card, Data
from explorer.catalog import grouped, label, study_pairs


def card(variant: str, n: int, dataset: str = "cifar10") -> Card:
    return Card(variant=variant, dataset=Data(name=dataset, train_images=n))


REFS = ["study/cifar10-2500-spt_lsa", "cifar10-vanilla", "finetuned/me/run-A", "study/cifar10-1000-vanilla",
        "cifar10-spt_lsa", "study/cifar10-1000-spt_lsa", "cifar10-lsa", "study/cifar10-2500-vanilla",
        "study/cifar10-5000-vanilla"]
CARDS = {"cifar10-vanilla": card("vanilla", 45000), "cifar10-spt_lsa": card("spt_lsa", 45000),
         "cifar10-lsa": card("lsa", 45000), "finetuned/me/run-A": card("vanilla", 300, "mine"),
         **{r: card(r.rsplit("-", 1)[1], int(r.split("-")[1])) for r in REFS if r.startswith("study/")}}


def test_the_lists_are_grouped_and_labelled():
    out = grouped(REFS, CARDS)
    assert [r for _, r in out] == ["cifar10-lsa", "cifar10-spt_lsa", "cifar10-vanilla",
                                   "study/cifar10-1000-vanilla", "study/cifar10-1000-spt_lsa",
                                   "study/cifar10-2500-vanilla", "study/cifar10-2500-spt_lsa",
                                   "study/cifar10-5000-vanilla", "finetuned/me/run-A"]
    labels = dict((r, lab) for lab, r in out)
    assert labels["cifar10-vanilla"] == "cifar10-vanilla"
    assert labels["study/cifar10-1000-spt_lsa"] == "small data · 1,000 images · SPT + LSA"
    assert labels["finetuned/me/run-A"] == "fine-tuned · run-A"
    assert label("study/broken", None) == "study/broken"  # an unreadable card: its name, as the slot says why


def test_pairs_by_size_need_both_models():
    assert study_pairs(REFS, CARDS) == {
        1000: ("study/cifar10-1000-vanilla", "study/cifar10-1000-spt_lsa"),
        2500: ("study/cifar10-2500-vanilla", "study/cifar10-2500-spt_lsa"),
        45000: ("cifar10-vanilla", "cifar10-spt_lsa")}  # 5,000 has no SPT + LSA model; fine-tuned runs never
