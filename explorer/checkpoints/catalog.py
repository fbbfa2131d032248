"""The app's checkpoints as a visitor reads them: grouped and labelled for the model slots (the shipped
models, the paper-scale 2x2, the small-data study's pairs by training-set size, fine-tuned runs), the
study's pair at each size, the 2x2 ablation's pairs, and the `models` tool's listing. Reads cards only;
loads no model.
"""

from __future__ import annotations

from explorer.checkpoints.finetuned import FINETUNED
from explorer.core.card import Card
from explorer.model.ablation import NAMES, ORDER

STUDY = "study"  # checkpoints/study/: the small-data study's kept pairs and its results.csv
PAPER = "paper"  # checkpoints/paper/: the paper's 2x2 at its own scale (--preset paper --recipe paper, a GPU)
PAIR_VARIANTS = ("vanilla", "spt_lsa")
# The ablation's pairs, in the order a reader asks about them: the whole gain, each part, the parts apart.
ABLATION_PAIRS = [("vanilla", "spt_lsa"), ("vanilla", "spt"), ("vanilla", "lsa"), ("lsa", "spt"),
                  ("spt", "spt_lsa"), ("lsa", "spt_lsa")]
HUB_NOTE = ("any Hugging Face Hub id owner/name[@revision] of an explorer checkpoint, or of a model of the "
            "keras.io example vit_small_ds (converted on first use)")


def _images(card: Card | None) -> int | None:
    try:
        return int(card.dataset.train_images)
    except (AttributeError, TypeError, ValueError):
        return None


def _per_head(card: Card | None) -> bool:
    """Whether a model's LSA learns one temperature per head (the study's per-head variants)."""
    return card is not None and "lsa" in (card.variant or "") and (card.config or {}).get("tau_mode") == "head"


def study_recipe(card: Card | None) -> str | None:
    """The study's recipe a model trained under, when not the light one: "paper" (the authors' main.py
    recipe) or "cutmix" (the light recipe plus CutMix alone); None for the light recipe."""
    recipe = (card.training.recipe if card is not None else None) or {}
    if recipe.get("name"):
        return str(recipe["name"])
    if (recipe.get("cutmix_alpha") or 0) > 0 and not (recipe.get("mixup_alpha") or 0):
        return "cutmix"
    return None


RECIPE_LABELS = {"paper": "paper recipe", "cutmix": "light recipe + CutMix",
                 "paper-autoaugment": "paper recipe with AutoAugment"}


def _shipped(ref: str, card: Card | None) -> bool:
    """Whether `ref` is one of the shipped 2x2 (checkpoints/<dataset>-<variant>, named as its card says)."""
    return ("/" not in ref and card is not None and card.variant in ORDER and bool(card.dataset.name)
            and ref == f"{card.dataset.name}-{card.variant}")


def label(ref: str, card: Card | None) -> str:
    """What a slot shows for `ref` (display only: the slot's value stays `ref`): a shipped model of the 2x2
    by its variant and training-set size ("shipped · ViT · 45,000 images"), a study model by its training-set size and
    variant (and "tau per head" for the per-head ones, the recipe when not the light one), a fine-tuned run
    by its name."""
    parts = ref.split("/")
    if _shipped(ref, card):
        images = f" · {_images(card):,} images" if _images(card) else ""
        other = f" · {card.dataset.name}" if card.dataset.name != "cifar10" else ""  # CIFAR-10's, unless named
        return f"shipped · {NAMES[card.variant]}{images}{other}"
    if parts[0] == PAPER and card is not None and card.variant:
        images = f" · {_images(card):,} images" if _images(card) else ""
        recipe = study_recipe(card)  # the paper recipe is the group's own; another one is named
        tag = f" · {RECIPE_LABELS.get(recipe, recipe)}" if recipe not in (None, "paper") else ""
        return f"paper scale · {NAMES.get(card.variant, card.variant)}{images}{tag}"
    if parts[0] == STUDY and card is not None and _images(card) is not None:
        per_head = " · tau per head" if _per_head(card) else ""
        recipe = study_recipe(card)
        tag = f" · {RECIPE_LABELS.get(recipe, recipe)}" if recipe else ""
        return f"small data · {_images(card):,} images · {NAMES.get(card.variant, card.variant)}{per_head}{tag}"
    if parts[0] == FINETUNED:
        return f"fine-tuned · {parts[-1]}"
    return ref  # any other checkpoint, or one whose card cannot be read: its name


def grouped(refs: list[str], cards: dict[str, Card | None]) -> list[tuple[str, str]]:
    """(label, ref) for the slots' lists: the shipped models first, then the paper-scale 2x2 (in the
    ablation's order), the study's by size and variant (ViT before SPT + LSA), then fine-tuned runs; each
    group in a stable order."""
    def key(ref: str):
        head = ref.split("/")[0]
        card = cards.get(ref)
        variant = (card or Card()).variant
        if head == PAPER:
            return (1, 0, "", ORDER.index(variant) if variant in ORDER else len(ORDER), ref)
        if head == STUDY:
            order = PAIR_VARIANTS.index(variant) if variant in PAIR_VARIANTS else len(PAIR_VARIANTS)
            return (2, _images(card) or 0, study_recipe(card) or "", order, ref)
        return (3 if head == FINETUNED else 0, 0, "", 0, ref)
    return [(label(r, cards.get(r)), r) for r in sorted(refs, key=key)]


def study_pairs(refs: list[str], cards: dict[str, Card | None]) -> dict[int, tuple[str, str]]:
    """Training-set size -> (ViT, SPT + LSA) references, for every size where the study kept both, and the
    shipped full-data pair (named <dataset>-vanilla and <dataset>-spt_lsa) at its size. The pairs are the
    study's per-layer models: its per-head variants are listed in the slots, never paired here."""
    found: dict[int, dict[str, str]] = {}
    for ref in refs:
        card = cards.get(ref) or Card()
        variant, n = card.variant, _images(card)
        head = ref.split("/")[0]
        if variant not in PAIR_VARIANTS or n is None or head == FINETUNED or _per_head(card) \
                or study_recipe(card) is not None:
            continue
        shipped = "/" not in ref and ref == f"{card.dataset.name}-{variant}"
        if head == STUDY or shipped:
            found.setdefault(n, {})[variant] = ref
    return {n: (v["vanilla"], v["spt_lsa"]) for n, v in sorted(found.items()) if set(v) == set(PAIR_VARIANTS)}


def paper_pair(cards: dict[str, Card | None]) -> tuple[str, str] | None:
    """The paper-scale (ViT, SPT + LSA) references (checkpoints/paper/, trained under the paper's recipe),
    when both are here; else None."""
    found = {}
    for ref, card in sorted(cards.items()):
        card = card or Card()
        if ref.split("/")[0] == PAPER and card.variant in PAIR_VARIANTS and study_recipe(card) in (None, "paper"):
            found.setdefault(card.variant, ref)
    return (found["vanilla"], found["spt_lsa"]) if set(found) == set(PAIR_VARIANTS) else None


def ablation_pairs(cards: dict[str, Card | None], ref_b: str | None) -> list[tuple[str, str, str]]:
    """(label, A, B) for each pair of the 2x2 ablation among `cards` (the app's own checkpoints, fine-tuned
    runs left out) of slot B's dataset: one per variant, the one named <dataset>-<variant> when there are
    several; none below three variants."""
    dataset = (cards.get(ref_b) or Card()).dataset.name
    if dataset is None:
        return []
    by_variant: dict[str, str] = {}
    for ref, card in cards.items():
        card = card or Card()
        variant = card.variant
        if card.dataset.name != dataset or variant not in ORDER:
            continue
        if variant not in by_variant or ref == f"{dataset}-{variant}":
            by_variant[variant] = ref
    if len(by_variant) < 3:
        return []
    return [(f"{NAMES[a]} | {NAMES[b]}", by_variant[a], by_variant[b]) for a, b in ABLATION_PAIRS
            if a in by_variant and b in by_variant]


def listed_model(label: str, ref: str, card: Card | None, loaded: bool) -> dict:
    """One model as the `models` tool lists it: its reference and slot label, and what its card says."""
    card = card or Card()
    metrics, dataset = card.metrics, card.dataset
    return {"ref": ref, "label": label, "variant": card.variant, "dataset": dataset.name,
            "train_images": dataset.train_images, "test_top1": metrics.test_top1,
            "test_top5": metrics.test_top5, "epochs": card.training.epochs, "loaded": loaded}


def model_list(listed: list[dict], loaded_from_hub: list[str], page_default: tuple[str | None, str | None]) -> dict:
    """The `models` tool's answer: the models listed (`listed_model`), the Hub models loaded, the pair the
    page starts with, and what else a slot takes."""
    a, b = page_default
    return {"models": listed, "loaded_from_hub": loaded_from_hub, "page_default": {"ref_a": a, "ref_b": b},
            "also": HUB_NOTE}
