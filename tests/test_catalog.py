"""The slots' lists grouped and labelled from the cards, the study's pair at each training-set size, the
2x2 ablation's pairs and the `models` tool's listing."""

from __future__ import annotations

from explorer.checkpoints.catalog import (
    HUB_NOTE,
    ablation_pairs,
    grouped,
    label,
    listed_model,
    model_list,
    paper_pair,
    study_pairs,
)
from explorer.core.card import Card, Data, Training


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
    # The shipped 2x2 by variant and size (display only: the reference stays the value).
    assert labels["cifar10-vanilla"] == "shipped · ViT · 45,000 images"
    assert labels["cifar10-lsa"] == "shipped · LSA alone · 45,000 images"
    assert label("cifar100-spt", card("spt", 45000, "cifar100")) == "shipped · SPT alone · 45,000 images · cifar100"
    assert label("old-lsa", card("lsa", 45000)) == "old-lsa"  # not named as a shipped model: its name
    assert labels["study/cifar10-1000-spt_lsa"] == "small data · 1,000 images · SPT + LSA"
    assert labels["finetuned/me/run-A"] == "fine-tuned · run-A"
    assert label("study/broken", None) == "study/broken"  # an unreadable card: its name, as the slot says why


def test_per_head_variants_have_labels_of_their_own_and_stay_out_of_the_pairs():
    per_head = {f"study/cifar10-1000-{v}_head": Card(variant=v, config={"tau_mode": "head"},
                                                     dataset=Data(name="cifar10", train_images=1000))
                for v in ("lsa", "spt_lsa")}
    refs, cards = REFS + sorted(per_head), {**CARDS, **per_head}
    labels = dict((r, lab) for lab, r in grouped(refs, cards))
    assert labels["study/cifar10-1000-spt_lsa_head"] == "small data · 1,000 images · SPT + LSA · tau per head"
    assert labels["study/cifar10-1000-lsa_head"] == "small data · 1,000 images · LSA alone · tau per head"
    assert study_pairs(refs, cards)[1000] == ("study/cifar10-1000-vanilla", "study/cifar10-1000-spt_lsa")


def test_recipe_models_name_their_recipe_and_stay_out_of_the_pairs():
    """The study's paper-recipe and CutMix-only models (issue 54): a label that names the recipe, listed
    after the light models of their size, never paired with the light study's ViT."""
    def trained(variant, recipe, tau_mode="layer"):
        return Card(variant=variant, config={"tau_mode": tau_mode}, dataset=Data(name="cifar10", train_images=1000),
                    training=Training(recipe=recipe))
    extra = {"study/cifar10-1000-vanilla-paper": trained("vanilla", {"name": "paper", "cutmix_alpha": 1.0,
                                                                     "mixup_alpha": 1.0}),
             "study/cifar10-1000-spt_lsa_head-paper": trained("spt_lsa", {"name": "paper"}, "head"),
             "study/cifar10-1000-vanilla-cutmix": trained("vanilla", {"name": None, "cutmix_alpha": 1.0})}
    refs, cards = REFS + sorted(extra), {**CARDS, **extra}
    out = grouped(refs, cards)
    labels = dict((r, lab) for lab, r in out)
    assert labels["study/cifar10-1000-vanilla-paper"] == "small data · 1,000 images · ViT · paper recipe"
    assert labels["study/cifar10-1000-spt_lsa_head-paper"] == \
        "small data · 1,000 images · SPT + LSA · tau per head · paper recipe"
    assert labels["study/cifar10-1000-vanilla-cutmix"] == "small data · 1,000 images · ViT · light recipe + CutMix"
    assert len(set(labels.values())) == len(labels)
    order = [r for _, r in out]
    assert order.index("study/cifar10-1000-spt_lsa") < order.index("study/cifar10-1000-vanilla-cutmix") \
        < order.index("study/cifar10-1000-vanilla-paper") < order.index("study/cifar10-2500-vanilla")
    assert study_pairs(refs, cards)[1000] == ("study/cifar10-1000-vanilla", "study/cifar10-1000-spt_lsa")


def test_every_shipped_model_is_listed_under_a_label_of_its_own():
    """The slots' lists over the real checkpoints folder: one label per model, so each can be chosen."""
    from pathlib import Path

    from explorer.checkpoints.store import list_checkpoints, read_card
    root = Path(__file__).resolve().parents[1] / "checkpoints"
    refs = [str(p.relative_to(root)) for p in list_checkpoints(root)]
    out = grouped(refs, {r: read_card(root / r) for r in refs})
    labels = [lab for lab, _ in out]
    assert len(out) == len(refs) >= 18
    assert len(set(labels)) == len(labels), sorted(lab for lab in labels if labels.count(lab) > 1)


def test_pairs_by_size_need_both_models():
    assert study_pairs(REFS, CARDS) == {
        1000: ("study/cifar10-1000-vanilla", "study/cifar10-1000-spt_lsa"),
        2500: ("study/cifar10-2500-vanilla", "study/cifar10-2500-spt_lsa"),
        45000: ("cifar10-vanilla", "cifar10-spt_lsa")}  # 5,000 has no SPT + LSA model; fine-tuned runs never


def test_ablation_pairs_take_one_model_per_variant_of_slot_bs_dataset():
    cards = {"cifar10-vanilla": card("vanilla", 45000), "cifar10-spt_lsa": card("spt_lsa", 45000),
             "old-lsa": card("lsa", 45000), "cifar10-lsa": card("lsa", 45000), "cifar10-spt": card("spt", 45000),
             "cifar100-vanilla": card("vanilla", 45000, "cifar100"), "cifar10-broken": None}
    pairs = ablation_pairs(cards, "cifar10-spt_lsa")
    # the reader's order; of two LSA models the one named <dataset>-lsa, whichever came first
    assert pairs == [("ViT | SPT + LSA", "cifar10-vanilla", "cifar10-spt_lsa"),
                     ("ViT | SPT alone", "cifar10-vanilla", "cifar10-spt"),
                     ("ViT | LSA alone", "cifar10-vanilla", "cifar10-lsa"),
                     ("LSA alone | SPT alone", "cifar10-lsa", "cifar10-spt"),
                     ("SPT alone | SPT + LSA", "cifar10-spt", "cifar10-spt_lsa"),
                     ("LSA alone | SPT + LSA", "cifar10-lsa", "cifar10-spt_lsa")]
    without_spt = {ref: c for ref, c in cards.items() if ref != "cifar10-spt"}
    assert [p[0] for p in ablation_pairs(without_spt, "cifar10-vanilla")] == [
        "ViT | SPT + LSA", "ViT | LSA alone", "LSA alone | SPT + LSA"]
    assert ablation_pairs(cards, "cifar100-vanilla") == []  # one variant of CIFAR-100: no ablation
    assert ablation_pairs(cards, "cifar10-broken") == ablation_pairs(cards, None) == []  # B's dataset unknown


def test_the_models_tool_lists_each_model_as_its_card_says():
    full = Card.from_json({**card("spt_lsa", 45000).to_json(), "metrics": {"test_top1": 0.8, "test_top5": 0.99},
                           "training": {"epochs": 9}})
    assert listed_model("cifar10-spt_lsa", "cifar10-spt_lsa", full, True) == {
        "ref": "cifar10-spt_lsa", "label": "cifar10-spt_lsa", "variant": "spt_lsa", "dataset": "cifar10",
        "train_images": 45000, "test_top1": 0.8, "test_top5": 0.99, "epochs": 9, "loaded": True}
    unreadable = listed_model("x", "x", None, False)
    assert unreadable["ref"] == "x" and unreadable["loaded"] is False
    assert all(unreadable[k] is None for k in ("variant", "dataset", "train_images", "test_top1", "epochs"))
    answer = model_list([unreadable], ["owner/name"], ("cifar10-vanilla", None))
    assert answer == {"models": [unreadable], "loaded_from_hub": ["owner/name"],
                      "page_default": {"ref_a": "cifar10-vanilla", "ref_b": None}, "also": HUB_NOTE}
    assert "Hugging Face Hub id" in HUB_NOTE


def test_paper_scale_models_are_a_group_of_their_own():
    """The paper's 2x2 at its own scale (checkpoints/paper/, issue 55): after the shipped models and before
    the study's, in the ablation's order, labelled as such; never one of the study's pairs, and the 2x2's
    pairs keep the shipped models of those names."""
    def paper(variant, recipe="paper"):
        return Card(variant=variant, dataset=Data(name="cifar10", train_images=45000),
                    training=Training(recipe={"name": recipe, "cutmix_alpha": 1.0, "mixup_alpha": 1.0}))
    extra = {f"paper/cifar10-{v}": paper(v) for v in ("spt_lsa", "vanilla", "lsa")}
    extra["paper/cifar10-vanilla-autoaugment"] = paper("vanilla", "paper-autoaugment")
    refs, cards = REFS + sorted(extra), {**CARDS, **extra}
    out = grouped(refs, cards)
    order = [r for _, r in out]
    assert order[:4] == ["cifar10-lsa", "cifar10-spt_lsa", "cifar10-vanilla", "paper/cifar10-vanilla"]
    assert order[4:7] == ["paper/cifar10-vanilla-autoaugment", "paper/cifar10-lsa", "paper/cifar10-spt_lsa"]
    labels = dict((r, lab) for lab, r in out)
    assert labels["paper/cifar10-vanilla"] == "paper scale · ViT · 45,000 images"
    # a model of the other paper-scale recipe says which (the two ViTs would read alike)
    assert labels["paper/cifar10-vanilla-autoaugment"] == ("paper scale · ViT · 45,000 images · paper recipe with "
                                                           "AutoAugment")
    assert labels["paper/cifar10-spt_lsa"] == "paper scale · SPT + LSA · 45,000 images"
    assert len(set(labels.values())) == len(labels)
    assert study_pairs(refs, cards) == study_pairs(REFS, CARDS)
    pairs = ablation_pairs(cards, "cifar10-spt_lsa")
    assert ("ViT | SPT + LSA", "cifar10-vanilla", "cifar10-spt_lsa") in pairs
    assert not any(ref.startswith("paper/") for _, a, b in pairs for ref in (a, b))
    # the paper-scale pair: the paper recipe's ViT and SPT + LSA, never the AutoAugment one's, nor a small model
    assert paper_pair(cards) == ("paper/cifar10-vanilla", "paper/cifar10-spt_lsa")
    assert paper_pair({**CARDS, "paper/cifar10-vanilla-autoaugment": extra["paper/cifar10-vanilla-autoaugment"],
                       "paper/cifar10-spt_lsa": extra["paper/cifar10-spt_lsa"]}) is None
    assert paper_pair(CARDS) is None
