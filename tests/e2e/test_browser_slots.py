"""The model slots in a real browser: every shipped model in the lists under a label of its own, a Hub id
that cannot load keeps its message until the visitor acts, and a first visit selects the training-set size
whose pair the slots hold."""

from __future__ import annotations

import pytest

from tests.e2e.pages import (
    choose,
    open_tab,
    open_why,
    slot_options,
    slot_value,
    visit,
)
from tests.helpers import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]
pytest.importorskip("playwright")  # a machine without playwright still collects the suite

def test_every_shipped_model_is_in_the_slot_lists_under_a_label_of_its_own(browser, shipped_app):
    page = visit(browser, shipped_app[0], 1280, height=1000)
    try:
        options = slot_options(page, "Model B")
        assert len(options) == len(set(options)), sorted(o for o in options if options.count(o) > 1)
        heads = [o for o in options if "tau per head" in o]
        # Every per-head checkpoint the app was given (the study's SPT + LSA and LSA alone at 1,000 and 2,500
        # images, and those of other recipes as the grid keeps them), each listed once.
        shipped = [c for c in (shipped_app[1] / "study").iterdir()
                   if "_head" in c.name and (c / "explorer.json").is_file()]
        assert len(heads) == len(shipped) >= 4, (options, shipped)
        assert {"small data · 1,000 images · SPT + LSA · tau per head",
                "small data · 2,500 images · LSA alone · tau per head"} <= set(heads), heads
        choose(page, "Model B", "small data · 1,000 images · SPT + LSA · tau per head")
        page.wait_for_function("() => /cifar10-1000-spt_lsa_head/.test(document.querySelector('#card-b').innerText)",
                               timeout=scaled(60_000))
        assert "tau per head" in page.inner_text("#card-b")
        assert page.locator('input[aria-label="Model B"]').input_value() == (
            "small data · 1,000 images · SPT + LSA · tau per head")
        # The tab that reports the per-head models puts one in slot B.
        open_tab(page, "Small data")
        open_why(page, shipped_app[1])
        reported = slot_options(page, "put one of these models in slot B")
        assert "small data · 2,500 images · LSA alone · tau per head" in reported, reported
        choose(page, "put one of these models in slot B", "small data · 2,500 images · LSA alone · tau per head")
        page.wait_for_function("() => /cifar10-2500-lsa_head/.test(document.querySelector('#card-b').innerText)",
                               timeout=scaled(60_000))
    finally:
        page.close()


def test_a_hub_id_that_cannot_load_keeps_its_message_until_the_visitor_acts(tiny_page):
    before = slot_value(tiny_page, "Model A")
    box = tiny_page.locator('input[aria-label="Model A"]')
    box.fill("nobody/not-cached")
    box.press("Enter")
    tiny_page.wait_for_function("() => /could not load 'nobody\\/not-cached'/.test("
                           "document.querySelector('#card-a').innerText)", timeout=scaled(30_000))
    tiny_page.wait_for_function("(v) => document.querySelector('input[aria-label=\"Model A\"]').value === v",
                           arg=before, timeout=scaled(30_000))  # the slot keeps its model ...
    tiny_page.wait_for_timeout(4000)
    card = tiny_page.inner_text("#card-a")  # ... and the message stays, beside that model's card
    assert "could not load 'nobody/not-cached'" in card and "· vanilla ·" in card, card
    assert slot_value(tiny_page, "Model A") == before


def test_a_first_visit_selects_the_size_whose_pair_the_slots_hold(tiny_page):
    tiny_page.get_by_role("tab", name="Small data").click()
    checked = tiny_page.locator("#data-size input:checked")
    checked.wait_for(state="attached", timeout=scaled(30_000))
    assert checked.count() == 1
    assert tiny_page.locator("#data-size label:has(input:checked)").inner_text().strip() == "45,000"
