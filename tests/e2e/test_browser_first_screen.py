"""The first screen in a real browser, on the shipped checkpoints: at 800 px the first answer (Compare's verdict)
is on it, at 1280 px the examples; the image's file name is never cut; the paper-scale button fills both slots
and their cards at either width."""

from __future__ import annotations

import pytest

from tests.e2e.pages import slot_value, visit
from tests.helpers import scaled, serving, shipped_copy

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]
pytest.importorskip("playwright")  # a machine without playwright still collects the suite

HEIGHT = 1000  # the window's height: the first screen

# Where an element is on the page (its top and bottom from the page's top, before any scrolling).
BOX = """(selector) => { const r = document.querySelector(selector).getBoundingClientRect();
    return {top: r.top + window.scrollY, bottom: r.bottom + window.scrollY}; }"""

# The file name's parts as drawn: each within the upload box, none cut (no ellipsis, nothing hidden).
NAME_SHOWN = """() => [...document.querySelectorAll('#upload td.filename span')].map((s) => {
    const box = document.querySelector('#upload').getBoundingClientRect(), r = s.getBoundingClientRect();
    return {text: s.innerText, cut: s.scrollWidth > s.clientWidth + 1 && getComputedStyle(s).display !== 'inline',
            inside: r.left >= box.left - 1 && r.right <= box.right + 1,
            ellipsis: getComputedStyle(s).textOverflow === 'ellipsis' && getComputedStyle(s).overflow === 'hidden'};
})"""


def test_at_800_px_the_first_answer_is_on_the_first_screen(browser, shipped_app):
    page = visit(browser, shipped_app[0], 800, height=HEIGHT)
    try:
        verdict = page.evaluate(BOX, "#verdict")
        first_line = verdict["top"] + 30  # "✔ both say cat" or "✘ they disagree: ..."
        assert first_line <= HEIGHT, verdict
        # Everything still there: the upload, the preview, the examples, the test samples, both slots.
        for selector in ("#upload", "#upload-own", "#preview", "#examples", "#sample", "#card-a", "#card-b"):
            assert page.locator(selector).is_visible(), selector
        # The upload beside the preview, and neither wider than the window.
        upload, preview = (page.locator(s).bounding_box() for s in ("#upload", "#preview"))
        assert upload["x"] + upload["width"] <= preview["x"] and preview["x"] + preview["width"] <= 800
    finally:
        page.close()


@pytest.fixture(scope="module")
def bare_app(tmp_path_factory):
    """The shipped checkpoints as a stranger's Space serves them: no data folder and an empty Keras cache (the
    bundled test images only: an empty data folder, as the app would look beside itself), the first visit's own
    pair (the paper-scale one)."""
    home = tmp_path_factory.mktemp("no-data-home")
    with serving(shipped_copy(tmp_path_factory.mktemp("no-data")), None, timeout=300, first_visit=None,
                 env_extra={"KERAS_HOME": str(home / ".keras"), "HOME": str(home),
                            "EXPLORER_DATA_DIR": str(home)}) as served:
        yield served


@pytest.mark.parametrize("width", [800, 1280])
def test_with_no_data_folder_the_first_answer_the_input_and_the_tabs_are_on_a_laptops_first_screen(browser, bare_app,
                                                                                                    width):
    """Issue #83 item 10: an 857 px high window (a laptop's browser) holds the verdict's first line, the row of
    tabs and the input picture's top, with the bundled sample's note as a visitor with no data folder sees it."""
    height = 857
    page = visit(browser, bare_app[0], width, height=height)
    try:
        page.wait_for_function("() => /both say|disagree/.test(document.querySelector('#verdict').innerText)",
                               timeout=scaled(90_000))
        assert "bundled" in page.inner_text("#image-col"), "not the bundled sample's note: is a data folder here?"
        verdict, tabs, preview = (page.evaluate(BOX, s) for s in ("#verdict", "[role=tablist]", "#preview"))
        assert verdict["top"] + 30 <= height, verdict
        assert tabs["bottom"] <= height, tabs
        assert preview["top"] + 60 <= height, preview
        # Each slot's label whole ("paper scale · SPT + LSA · 45,000 images"), not cut short by an ellipsis.
        cut = page.evaluate("() => [...document.querySelectorAll('#slots-row input')]"
                            ".filter((i) => i.scrollWidth > i.clientWidth).map((i) => i.value)")
        assert not cut, cut
    finally:
        page.close()


def test_at_1280_px_the_examples_are_on_the_first_screen_and_the_file_name_is_whole(browser, shipped_app):
    page = visit(browser, shipped_app[0], 1280, height=HEIGHT)
    try:
        examples = page.evaluate(BOX, "#examples")
        assert examples["bottom"] <= HEIGHT, examples
        parts = page.evaluate(NAME_SHOWN)
        assert "".join(p["text"] for p in parts).replace(" ", "").endswith(".png"), parts
        assert all(p["inside"] and not p["cut"] and not p["ellipsis"] for p in parts), parts
    finally:
        page.close()


@pytest.mark.parametrize("width", [1280, 800])
def test_the_paper_scale_button_fills_both_slots_and_their_cards(browser, shipped_app, width):
    page = visit(browser, shipped_app[0], width, height=HEIGHT)
    try:
        button = page.locator("#paper-pair-btn")
        assert button.bounding_box()["y"] + button.bounding_box()["height"] <= HEIGHT
        button.click()
        page.wait_for_function("() => /paper\\/cifar10-vanilla/.test(document.querySelector('#card-a').innerText) && "
                               "/paper\\/cifar10-spt_lsa/.test(document.querySelector('#card-b').innerText)",
                               timeout=scaled(90_000))
        assert slot_value(page, "Model A") == "paper scale · ViT · 45,000 images"
        assert slot_value(page, "Model B") == "paper scale · SPT + LSA · 45,000 images"
        card_a, card_b = page.inner_text("#card-a"), page.inner_text("#card-b")
        assert "paper scale · ViT · 45,000 images" in card_a and "vanilla" in card_a and "85.0 %" in card_a, card_a
        assert "paper scale · SPT + LSA · 45,000 images" in card_b and "tau per head" in card_b \
            and "89.9 %" in card_b, card_b
        assert "⚠" not in card_a + card_b
        # The answers come for the new pair, under the new headings.
        page.wait_for_function("() => /both say|disagree/.test(document.querySelector('#verdict').innerText)",
                               timeout=scaled(90_000))
    finally:
        page.close()


@pytest.fixture(scope="module")
def default_app(tmp_path_factory, data_dir):
    """The app on copies of the shipped checkpoints with its own first-visit pair (no test pins it)."""
    from tests.helpers import shipped_copy, start_app, stop
    root = shipped_copy(tmp_path_factory.mktemp("first-visit"))
    proc, url, _ = start_app(root, data_dir=data_dir, timeout=300, first_visit=None, prewarm=False)
    yield url
    stop(proc)


@pytest.mark.parametrize("width", [1280, 800])
def test_a_first_visit_opens_on_the_paper_scale_pair_already_answered(browser, default_app, width):
    """The first visit's pair is the paper-scale one (chosen by bench/first_visit.py, docs/app.md): both slots
    hold it, both cards say it, and the first example is answered without a click."""
    page = visit(browser, default_app, width, height=HEIGHT)
    try:
        assert slot_value(page, "Model A").startswith("paper scale · ViT")
        assert slot_value(page, "Model B").startswith("paper scale · SPT + LSA")
        assert "85.0 %" in page.inner_text("#card-a") and "89.9 %" in page.inner_text("#card-b")
        assert page.evaluate(BOX, "#verdict")["top"] + 30 <= HEIGHT
        # Each slot's label ends before its list's arrow (cut with an ellipsis), never under it.
        under = page.evaluate(UNDER_THE_ARROW)
        assert len(under) == 2 and max(under) <= 0, f"a slot's label runs {max(under):.0f} px under its arrow"
    finally:
        page.close()


# How far each slot's text box reaches past the left edge of its list's arrow (px; 0 or less: it stops before).
UNDER_THE_ARROW = """() => [...document.querySelectorAll('#slots-row .secondary-wrap input')].map((input) => {
    const arrow = input.closest('.wrap').querySelector('.icon-wrap');
    const box = input.getBoundingClientRect();
    return box.right - parseFloat(getComputedStyle(input).paddingRight) - arrow.getBoundingClientRect().left;
})"""
