"""The app's checkpoints as a visitor reads them: grouped and labelled for the model slots (the shipped
models, the small-data study's pairs by training-set size, fine-tuned runs), and the study's pair at each
size. Reads cards only; loads no model.
"""

from __future__ import annotations

from explorer.ablation import NAMES
from explorer.card import Card
from explorer.shared import FINETUNED

STUDY = "study"  # checkpoints/study/: the small-data study's kept pairs and its results.csv
PAIR_VARIANTS = ("vanilla", "spt_lsa")


def _images(card: Card | None) -> int | None:
    try:
        return int(card.dataset.train_images)
    except (AttributeError, TypeError, ValueError):
        return None


def label(ref: str, card: Card | None) -> str:
    """What a slot shows for `ref`: shipped names as they are, a study model by its training-set size and
    variant, a fine-tuned run by its name."""
    parts = ref.split("/")
    if parts[0] == STUDY and card is not None and _images(card) is not None:
        return f"small data · {_images(card):,} images · {NAMES.get(card.variant, card.variant)}"
    if parts[0] == FINETUNED:
        return f"fine-tuned · {parts[-1]}"
    return ref


def grouped(refs: list[str], cards: dict[str, Card | None]) -> list[tuple[str, str]]:
    """(label, ref) for the slots' lists: the shipped models first, then the study's by size and variant
    (ViT before SPT + LSA), then fine-tuned runs; each group in a stable order."""
    def key(ref: str):
        head = ref.split("/")[0]
        card = cards.get(ref)
        if head == STUDY:
            variant = (card or Card()).variant
            order = PAIR_VARIANTS.index(variant) if variant in PAIR_VARIANTS else len(PAIR_VARIANTS)
            return (1, _images(card) or 0, order, ref)
        return (2 if head == FINETUNED else 0, 0, 0, ref)
    return [(label(r, cards.get(r)), r) for r in sorted(refs, key=key)]


def study_pairs(refs: list[str], cards: dict[str, Card | None]) -> dict[int, tuple[str, str]]:
    """Training-set size -> (ViT, SPT + LSA) references, for every size where the study kept both, and the
    shipped full-data pair (named <dataset>-vanilla and <dataset>-spt_lsa) at its size."""
    found: dict[int, dict[str, str]] = {}
    for ref in refs:
        card = cards.get(ref) or Card()
        variant, n = card.variant, _images(card)
        head = ref.split("/")[0]
        if variant not in PAIR_VARIANTS or n is None or head == FINETUNED:
            continue
        shipped = "/" not in ref and ref == f"{card.dataset.name}-{variant}"
        if head == STUDY or shipped:
            found.setdefault(n, {})[variant] = ref
    return {n: (v["vanilla"], v["spt_lsa"]) for n, v in sorted(found.items()) if set(v) == set(PAIR_VARIANTS)}
