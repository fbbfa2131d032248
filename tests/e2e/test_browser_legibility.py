"""Pictures and tables that stay legible in a real browser at 800 and 1280 px: the attention and tau plots and
the tau table, the Small data figures and the shift strip."""

from __future__ import annotations

import pytest

from tests.e2e.pages import SHOWN_SCALE, assert_tau_legible, choose, open_tab, visit
from tests.helpers import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]
pytest.importorskip("playwright")  # a machine without playwright still collects the suite

@pytest.mark.parametrize("width", [800, 1280])
def test_attention_and_tau_plots_and_the_tau_table_stay_legible(browser, shipped_app, width):
    page = visit(browser, shipped_app[0], width, height=1000)
    try:
        choose(page, "Model B", "small data · 1,000 images · SPT + LSA · tau per head")  # tau per head: long rows
        page.wait_for_function("() => /spt_lsa_head/.test(document.querySelector('#card-b').innerText)",
                               timeout=scaled(60_000))
        open_tab(page, "Attention")
        plots = "#locality-plots img"
        page.locator("#locality-plots").scroll_into_view_if_needed()
        page.wait_for_function(f"(s) => ({SHOWN_SCALE})(s).length === 2", arg=plots, timeout=scaled(60_000))
        scales = page.evaluate(SHOWN_SCALE, plots)
        assert min(scales) >= 0.75, f"the locality plots are shown at {[f'{s:.0%}' for s in scales]}"
        open_tab(page, "Tau")
        page.wait_for_function("() => /1,000 images · SPT \\+ LSA · tau per head/.test("
                               "document.querySelector('#tau-table').innerText)",
                               timeout=scaled(60_000))
        assert_tau_legible(page)
    finally:
        page.close()


def test_at_800_px_the_small_data_figures_and_the_shift_strip_keep_their_type_near_its_size(browser, tiny_pair_app):
    page = browser.new_page(viewport={"width": 800, "height": 900})
    try:
        page.goto(tiny_pair_app[0])
        page.wait_for_function("() => /both say|disagree/.test((document.querySelector('#verdict') || {})"
                               ".innerText || '')", timeout=scaled(60_000))
        open_tab(page, "Evidence")
        page.locator("#shift-strip").scroll_into_view_if_needed()  # its picture loads lazily, once near the window
        page.wait_for_selector("#shift-strip img", timeout=scaled(60_000))
        page.locator("#shift-strip img").scroll_into_view_if_needed()
        page.wait_for_function(f"() => ({SHOWN_SCALE})('#shift-strip img').length === 1", timeout=scaled(30_000))
        (strip,) = page.evaluate(SHOWN_SCALE, "#shift-strip img")
        assert strip >= 0.75, f"the shift strip is shown at {strip:.0%} of its size"
        open_tab(page, "Small data")
        figures = "#data-size-curve img, #data-size-gap img"
        page.wait_for_function(f"(s) => ({SHOWN_SCALE})(s).length >= 2", arg=figures, timeout=scaled(30_000))
        scales = page.evaluate(SHOWN_SCALE, figures)
        assert min(scales) >= 0.75, f"the Small data figures are shown at {[f'{s:.0%}' for s in scales]}"
    finally:
        page.close()
