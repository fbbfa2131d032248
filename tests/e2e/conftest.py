"""A real `python app.py` on 127.0.0.1: serving tiny checkpoints trained in the session (app_url, for the
session), the tiny pair as the 45,000-image pair (tiny_pair_app) or copies of the shipped checkpoints
(shipped_app), each of those two once per module that asks for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.pages import UPLOAD
from tests.helpers import CHROMIUM, FLAGS, pair_folder, scaled, shipped_copy, start_app, stop


@pytest.fixture(scope="session")
def app_checkpoints(tmp_path_factory, tiny_checkpoints):
    return pair_folder(tmp_path_factory.mktemp("app") / "checkpoints", tiny_checkpoints)


@pytest.fixture(scope="session")
def app_url(app_checkpoints, data_dir):
    proc, url, _ = start_app(app_checkpoints, data_dir=data_dir)
    yield url
    stop(proc)


@pytest.fixture(scope="session")
def client(app_url):
    from gradio_client import Client
    return Client(app_url, verbose=False)


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium under Playwright, one per test module."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium chromium-driver)")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def tiny_pair_app(tmp_path_factory, tiny_checkpoints, data_dir):
    """The app with the tiny pair as the 45,000-image pair (as the shipped pair is)."""
    root = pair_folder(tmp_path_factory.mktemp("first-hour") / "checkpoints", tiny_checkpoints,
                       dataset={"train_images": 45000})
    proc, url, _ = start_app(root, data_dir=data_dir, timeout=300)
    yield url, root
    stop(proc)


@pytest.fixture(scope="module")
def shipped_app(tmp_path_factory, data_dir):
    """The app on copies of the shipped checkpoints, the small-data study's included."""
    root = shipped_copy(tmp_path_factory.mktemp("second-pass"))
    proc, url, _ = start_app(root, data_dir=data_dir, timeout=300)
    yield url, root
    stop(proc)


@pytest.fixture
def tiny_page(browser, tiny_pair_app):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(tiny_pair_app[0])
    page.wait_for_selector(UPLOAD, state="attached", timeout=scaled(60_000))
    page.wait_for_function("() => /both say|disagree/.test((document.querySelector('#verdict') || {}).innerText"
                           " || '')", timeout=scaled(60_000))
    yield page
    page.close()
