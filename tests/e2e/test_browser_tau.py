"""The Tau tab in a real browser with the paper-scale pair in the slots, at 1280 and 800 px: it names the two
slots' models only, says that A (a ViT) has no tau, shows B's tau per layer and head and over training
legibly, and nothing overflows the window. Takes docs/tau-paper.png and docs/tau-paper-800.png
(into docs/ with RETAKE_DOCS_PICTURES=1: tests.helpers.docs_picture)."""

from __future__ import annotations

import re

import pytest

from tests.e2e.pages import assert_tau_legible, choose, open_tab, visit
from tests.helpers import docs_picture, scaled

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]
pytest.importorskip("playwright")  # a machine without playwright still collects the suite

A, B = "paper/cifar10-vanilla", "paper/cifar10-spt_lsa"
LABELS = {A: "paper scale · ViT · 45,000 images", B: "paper scale · SPT + LSA · 45,000 images"}  # the slots' labels
NO_TAU = f"A: {LABELS[A]} is a ViT without LSA: it has no tau."


@pytest.mark.parametrize("width", [1280, 800])
def test_the_tau_tab_shows_the_paper_pair_by_slot(browser, shipped_app, width, tmp_path):
    page = visit(browser, shipped_app[0], width, height=1000)
    try:
        for slot, ref in (("Model A", A), ("Model B", B)):
            choose(page, slot, LABELS[ref])
            card = "#card-a" if slot == "Model A" else "#card-b"
            page.wait_for_function("([card, ref]) => document.querySelector(card).innerText.includes(ref)",
                                   arg=[card, ref], timeout=scaled(90_000))
        open_tab(page, "Tau")
        page.wait_for_function("(text) => (document.querySelector('#tau-note') || {innerText: ''}).innerText"
                               ".includes(text)", arg=NO_TAU, timeout=scaled(90_000))
        page.wait_for_function("() => document.querySelectorAll('#tau-table [role=row].virtual-row').length === 9",
                               timeout=scaled(60_000))
        note = page.inner_text("#tau-note")
        named = re.findall(r"\b(?:paper scale|shipped|small data|fine-tuned) · [^\n]*?(?= is | learns )", note)
        assert named == [LABELS[A], LABELS[B]], note  # the slots' models, and no other checkpoint
        models = page.eval_on_selector_all("#tau-table [role=gridcell][data-col='0']",
                                           "(cells) => cells.map((c) => c.innerText.trim())")
        assert set(models) == {f"B: {LABELS[B]}"}, models
        assert "learns one tau per head (9 layers × 12 heads)" in note and "over 100 epochs" in note
        assert_tau_legible(page)
        wide = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 0, f"the page is {wide} px wider than the window"
        page.wait_for_timeout(1500)
        panel = page.locator("[role=tabpanel]:visible").first
        name = "tau-paper.png" if width == 1280 else f"tau-paper-{width}.png"
        panel.screenshot(path=str(docs_picture(name, tmp_path)))
        if width == 1280:  # no LSA model in either slot: the note says so, and no table of headers alone
            assert page.locator("#tau-table").is_visible()
            choose(page, "Model B", LABELS[A])
            page.wait_for_function("() => /A = B/.test(document.querySelector('#tau-note').innerText)",
                                   timeout=scaled(60_000))
            assert not page.locator("#tau-table").is_visible()
    finally:
        page.close()
