"""What the page answers about an image, in a real browser: an upload says how the models saw it (and a first
analysis is not called cached), a broken image gets one message and clears every answer about the previous
one, and both what-if factors start at the learned tau."""

from __future__ import annotations

import re

import pytest
from PIL import Image

from explorer.ui.context import UNREADABLE
from tests.e2e.pages import (
    MESSAGES,
    UPLOAD,
    open_tab,
    visit,
)
from tests.helpers import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]
pytest.importorskip("playwright")  # a machine without playwright still collects the suite

def test_an_upload_says_how_the_models_saw_it_and_a_first_analysis_is_not_called_cached(tiny_page, cifar10, tmp_path):
    image = tmp_path / "wide.png"
    Image.fromarray(cifar10.x_test[21]).resize((500, 300)).save(image)
    tiny_page.set_input_files(UPLOAD, str(image))
    tiny_page.wait_for_function("() => /500x300/.test(document.querySelector('#verdict').innerText)",
                                timeout=scaled(30_000))
    verdict = tiny_page.inner_text("#verdict")
    assert "squashed to 32x32" in verdict and "aspect ratio" in verdict, verdict
    assert "cached" not in verdict and re.search(r"Time: A \d+ ms · B \d+ ms", verdict), verdict
    # A 32x32 image is what the models take: nothing to say.
    square = tmp_path / "square.png"
    Image.fromarray(cifar10.x_test[22]).save(square)
    tiny_page.set_input_files(UPLOAD, str(square))
    tiny_page.wait_for_function("() => !/500x300/.test(document.querySelector('#verdict').innerText)"
                           " && /both say|disagree/.test(document.querySelector('#verdict').innerText)",
                           timeout=scaled(30_000))
    assert "squashed" not in tiny_page.inner_text("#verdict")


def test_a_broken_image_gets_one_message_and_clears_every_answer_about_the_previous_one(browser, shipped_app, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not an image at all" * 50)
    page = visit(browser, shipped_app[0], 1280, height=1000)
    try:
        assert re.search(r"both say|disagree", page.inner_text("#verdict"))
        open_tab(page, "Attention")
        page.wait_for_function("() => /Query patch/.test(document.querySelector('#attn-caption').innerText)",
                               timeout=scaled(60_000))
        open_tab(page, "Compare")
        page.set_input_files(UPLOAD, str(broken))
        page.wait_for_function("() => /⚠/.test(document.body.innerText)", timeout=scaled(30_000))
        page.wait_for_timeout(5000)  # every tab has had its turn at the new image
        toasts = page.locator(".toast-body").all_inner_texts()
        assert toasts == [], f"{len(toasts)} toasts for one bad image: {toasts}"
        notes = page.evaluate(MESSAGES, "⚠")
        assert len(notes) == 1 and "broken.png" in notes[0], notes
        # No answer about the previous image: the verdict only says why there is none.
        assert page.inner_text("#verdict").strip() == UNREADABLE.strip("_"), page.inner_text("#verdict")
        assert not page.locator("#label-a .confidence-set, #label-a [data-testid='label-output-value']").count() \
            or "bird" not in page.inner_text("#label-a")
        open_tab(page, "Attention")
        page.wait_for_timeout(1000)
        assert page.inner_text("#attn-caption").strip() == UNREADABLE.strip("_")
        badges = [e for e in page.locator(".error").all() if e.is_visible()]
        assert not badges, [b.inner_text() for b in badges]
    finally:
        page.close()


def test_both_what_if_factors_start_at_the_learned_tau(tiny_page):
    tiny_page.get_by_role("tab", name="Attention").click()
    tiny_page.get_by_text("LSA switches: what if").click()
    for slot in ("a", "b"):
        box = tiny_page.locator(f"#wi-factor-{slot} input")
        box.wait_for(timeout=scaled(30_000))
        assert box.input_value() == "1× (as learned)"
