"""A link to a view in a real browser (Gradio's deep link, "Copy a link to this view"): a new page opened from
it has the same models in the slots, the same image and the same tab open, and answers for those models, both
for what it shows and for what the visitor does next."""

from __future__ import annotations

import time

import pytest
from PIL import Image

from tests.e2e.pages import choose, open_tab, slot_value, visit
from tests.helpers import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]
pytest.importorskip("playwright")  # a machine without playwright still collects the suite

UPLOAD = "input[type=file]:has(+ #upload-own)"
MODEL = "cifar10-lsa"  # in both slots: the same model gives both the same top-5, which the page's defaults do not
# Both slots' top-5 shown (no progress in them), the same for both, and not `before`'s.
SETTLED = """(before) => {
    const top = (tag) => (document.querySelector('#label-' + tag) || {innerText: ''}).innerText
        .replace('Model ' + tag.toUpperCase(), '').split(/\\s+/).join(' ').trim();
    const a = top('a'), b = top('b');
    return a.length > 6 && a === b && !/queue|\\d\\.\\ds/.test(a) && a !== before;
}"""

# Both slots' top-5 are `shown` (which settles after the transient answers a page shows as it redraws).
SHOWN = """(shown) => ['a', 'b'].every((tag) => (document.querySelector('#label-' + tag) || {innerText: ''}).innerText
    .replace('Model ' + tag.toUpperCase(), '').split(/\\s+/).join(' ').trim() === shown)"""


def put(page, label, ref):
    box = page.locator(f'input[aria-label="{label}"]')
    box.fill(ref)
    box.press("Enter")


def labels(page) -> str:
    """Model B's top-5 as words (the same on any layout)."""
    return " ".join(page.inner_text("#label-b").replace("Model B", "").split())


def copied_link(page, timeout: float = 30) -> str:
    """Clicks "Copy a link to this view" and returns the link it copies. The clipboard is the browser's, not
    the page's: it still holds an earlier test's link until the click's copy lands, so it is emptied first."""
    page.evaluate("() => navigator.clipboard.writeText('')")
    page.get_by_role("button", name="Copy a link to this view").click()
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = page.evaluate("() => navigator.clipboard.readText()")
        if "deep_link=" in text:
            return text
        time.sleep(0.3)
    raise AssertionError("the button put no link on the clipboard")


def test_a_link_reopens_the_models_the_image_and_the_tab(browser, shipped_app, tmp_path):
    from explorer.data.datasets import sample_set
    cifar10 = sample_set()
    page = visit(browser, shipped_app[0], 1280, height=1000)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    other = None
    try:
        first = labels(page)
        put(page, "Model A", MODEL)
        put(page, "Model B", MODEL)
        page.wait_for_function(f"() => ['#card-a', '#card-b'].every((c) => "
                               f"document.querySelector(c).innerText.includes('{MODEL}'))", timeout=scaled(60_000))
        page.wait_for_function(SETTLED, arg=first, timeout=scaled(60_000))  # the page's image, under the new models
        before = labels(page)
        image = tmp_path / "my-horse.png"  # test image 13 is a bird, 7 a horse
        Image.fromarray(cifar10.x_test[7]).resize((96, 96)).save(image)
        page.set_input_files(UPLOAD, str(image))
        page.wait_for_function(SETTLED, arg=before, timeout=scaled(60_000))
        shown = labels(page)
        open_tab(page, "Attention")
        page.wait_for_function("() => /not measured yet/.test(document.querySelector('#attn-faithfulness')"
                               ".innerText)", timeout=scaled(60_000))

        link = copied_link(page)

        other = browser.new_page(viewport={"width": 1280, "height": 1000})
        other.goto(link)
        other.wait_for_function(f"() => ['#card-a', '#card-b'].every((c) => (document.querySelector(c) || "
                                f"{{innerText: ''}}).innerText.includes('{MODEL}'))", timeout=scaled(90_000))
        other.wait_for_function("() => [...document.querySelectorAll('[role=tab]')].some((t) => "
                                "t.innerText.trim() === 'Attention' && t.getAttribute('aria-selected') === 'true')",
                                timeout=scaled(60_000))
        for slot in ("Model A", "Model B"):
            assert (other.locator(f'input[aria-label="{slot}"]').input_value()
                    == page.locator(f'input[aria-label="{slot}"]').input_value())
        assert "my-horse" in page.inner_text("#upload"), page.inner_text("#upload")
        assert "my-horse" in other.inner_text("#upload"), other.inner_text("#upload")
        assert "not measured yet" in other.inner_text("#attn-faithfulness")
        # Compare answers for the link's models on the link's image: page 1's top-5, the same in both slots.
        open_tab(other, "Compare")
        other.wait_for_function(SHOWN, arg=shown, timeout=scaled(60_000))

        # What the visitor does next is answered for the link's models too (both slots: one top-5).
        second = tmp_path / "a-bird.png"
        Image.fromarray(cifar10.x_test[13]).resize((96, 96)).save(second)
        other.set_input_files(UPLOAD, str(second))
        other.wait_for_function(SETTLED, arg=shown, timeout=scaled(60_000))
        # The first page is untouched by the second.
        assert labels(page) == shown
    finally:
        page.close()
        if other is not None:
            other.close()


# Each slot's top-5 as words, both given (the answers of the link's models, on the link's image).
BOTH = """([a, b]) => ['a', 'b'].map((tag) => (document.querySelector('#label-' + tag) || {innerText: ''}).innerText
    .replace('Model ' + tag.toUpperCase(), '').split(/\\s+/).join(' ').trim()).join('|') === a + '|' + b"""


def shown(page) -> str:
    """What a page's slots and cards hold (a failure's message)."""
    cards = page.evaluate("() => ['#card-a', '#card-b'].map((c) => (document.querySelector(c) || "
                          "{innerText: '(none)'}).innerText.split('\\n').slice(0, 3).join(' / '))")
    return f"slots {[slot_value(page, 'Model A'), slot_value(page, 'Model B')]}, cards {cards}"


def top5(page, tag: str) -> str:
    return " ".join(page.inner_text(f"#label-{tag}").replace(f"Model {tag.upper()}", "").split())


def test_a_link_reopens_a_pair_that_is_not_the_lists_first_on_another_tab(browser, shipped_app, tmp_path):
    """Issue: a link reopened both slots on the list's first model (cifar10-lsa), whatever they held: Gradio
    saved the slots' values under new ids once the page had updated their choices (gradio_patches)."""
    from explorer.data.datasets import sample_set
    page = visit(browser, shipped_app[0], 1280, height=1000)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    other = None
    try:
        page.click("#paper-pair-btn")
        page.wait_for_function("() => /paper\\/cifar10-vanilla/.test(document.querySelector('#card-a').innerText) && "
                               "/paper\\/cifar10-spt_lsa/.test(document.querySelector('#card-b').innerText)",
                               timeout=scaled(90_000))
        choose(page, "Model B", "shipped · SPT alone · 45,000 images")
        page.wait_for_function("() => /cifar10-spt\\b/.test(document.querySelector('#card-b').innerText)",
                               timeout=scaled(60_000))
        image = tmp_path / "my-ship.png"
        Image.fromarray(sample_set().x_test[1]).save(image)
        page.set_input_files(UPLOAD, str(image))
        page.wait_for_function("() => /my-ship/.test(document.querySelector('#upload').innerText)",
                               timeout=scaled(30_000))
        page.wait_for_function("() => /both say|disagree/.test(document.querySelector('#verdict').innerText)",
                               timeout=scaled(60_000))
        page.wait_for_timeout(2000)  # the last answers in
        answers = [top5(page, "a"), top5(page, "b")]
        slots = [slot_value(page, "Model A"), slot_value(page, "Model B")]
        assert slots == ["paper scale · ViT · 45,000 images", "shipped · SPT alone · 45,000 images"], slots
        open_tab(page, "Tau")
        page.wait_for_function("() => /paper scale · ViT · 45,000 images is a ViT/.test("
                               "document.querySelector('#tau-note').innerText)",
                               timeout=scaled(60_000))

        link = copied_link(page)
        other = browser.new_page(viewport={"width": 1280, "height": 1000})
        other.goto(link)
        try:
            other.wait_for_function("() => /paper\\/cifar10-vanilla/.test((document.querySelector('#card-a') || "
                                    "{innerText: ''}).innerText) && /cifar10-spt\\b/.test((document.querySelector("
                                    "'#card-b') || {innerText: ''}).innerText)", timeout=scaled(90_000))
        except Exception as error:
            raise AssertionError(f"the link {link} opened {shown(other)}, not {slots}") from error
        other.wait_for_function("() => [...document.querySelectorAll('[role=tab]')].some((t) => "
                                "t.innerText.trim() === 'Tau' && t.getAttribute('aria-selected') === 'true')",
                                timeout=scaled(60_000))
        assert [slot_value(other, "Model A"), slot_value(other, "Model B")] == slots
        assert "my-ship" in other.inner_text("#upload"), other.inner_text("#upload")
        open_tab(other, "Compare")
        other.wait_for_function(BOTH, arg=answers, timeout=scaled(90_000))
    finally:
        page.close()
        if other is not None:
            other.close()
