"""Debian's headless Chromium, driven by Playwright, against the launched app."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from PIL import Image

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium chromium-driver)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, app_url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(app_url)
    page.wait_for_selector("#upload input[type=file]", state="attached", timeout=60_000)
    yield page
    page.close()


def test_upload_compare_attention_screenshot(page, cifar10, tmp_path):
    classes = set(cifar10.class_names)
    image = tmp_path / "bird.png"  # test image 13 is a bird
    Image.fromarray(cifar10.x_test[13]).resize((128, 128)).save(image)
    page.set_input_files("#upload input[type=file]", str(image))
    page.wait_for_selector("#preview img", timeout=30_000)
    page.click("#compare-btn")
    page.wait_for_function(
        "() => document.querySelector('#verdict') && /both say|disagree/.test(document.querySelector('#verdict').innerText)",
        timeout=30_000)
    for slot in ("#label-a", "#label-b"):
        text = page.inner_text(slot)
        assert any(name in text for name in classes), text
        assert "%" in text
    assert "ms" in page.inner_text("#verdict") or "cached" in page.inner_text("#verdict")

    page.get_by_role("tab", name="Attention").click()
    page.click("#attn-btn")
    page.wait_for_function(
        "() => document.querySelector('#attn-caption') && /Query patch row/.test(document.querySelector('#attn-caption').innerText)",
        timeout=30_000)
    assert "LSA models never attend to the query patch itself" in page.inner_text("#attn-caption")
    picker = page.locator("#picker img").first
    picker.wait_for(timeout=30_000)
    box = picker.bounding_box()
    hint = page.locator("#picker-hint").bounding_box()  # above the picture, never over its top patches
    assert "Click a patch" in page.inner_text("#picker-hint") and hint["y"] + hint["height"] <= box["y"] + 1
    # The picture is centred in its box (object-fit: contain); click 40 % of its side right of and below
    # the centre: the bottom-right patch becomes the query.
    side = min(box["width"], box["height"])
    page.mouse.click(box["x"] + box["width"] / 2 + 0.4 * side, box["y"] + box["height"] / 2 + 0.4 * side)
    page.wait_for_function(
        "() => /row 3, col 3/.test(document.querySelector('#attn-caption').innerText)", timeout=30_000)
    # LSA switches: B's diagonal mask off, on the same page.
    page.locator("#what-if-btn").scroll_into_view_if_needed()
    page.locator("#wi-mask-b").get_by_text("off", exact=True).click()
    page.click("#what-if-btn")
    page.wait_for_function(
        "() => /diagonal mask off \\(learned: on\\)/.test(document.querySelector('#what-if-summary').innerText)",
        timeout=30_000)
    assert "sharpens attention" in page.inner_text("#what-if-text")
    shot = tmp_path / "attention.png"
    page.screenshot(path=str(shot), full_page=True)
    assert Image.open(shot).size[0] >= 1000
    if os.environ.get("EXPLORER_SCREENSHOT"):
        shutil.copy(shot, os.environ["EXPLORER_SCREENSHOT"])


def test_a_broken_upload_shows_a_message_and_the_app_keeps_serving(page, tmp_path, cifar10):
    bad = tmp_path / "not-really.png"
    bad.write_text("this is text, not a PNG")
    page.get_by_role("tab", name="Compare").click()
    page.set_input_files("#upload input[type=file]", str(bad))
    page.wait_for_function("() => /not an image PIL can read/.test(document.body.innerText)", timeout=30_000)
    page.goto(page.url)  # a fresh page: the same server answers the next upload
    good = tmp_path / "ok.png"
    Image.fromarray(cifar10.x_test[3]).save(good)
    page.set_input_files("#upload input[type=file]", str(good))
    page.wait_for_selector("#preview img", timeout=30_000)
    page.click("#compare-btn")
    page.wait_for_function(
        "() => /both say|disagree/.test(document.querySelector('#verdict').innerText)", timeout=30_000)
