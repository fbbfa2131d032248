"""A real `python app.py` on 127.0.0.1: serving tiny checkpoints trained in the session (app_url), the tiny
pair as the 45,000-image pair (tiny_pair_app) or copies of the shipped checkpoints (shipped_app).

Each app is one for the end-to-end tests (package-scoped: stopped once they end, before the slow tests outside
tests/e2e run), shared by every module that only reads what it serves: an app takes about 11 CPU-seconds to start
and more to warm its caches, which a slow host pays once instead of once a module.
A module whose tests change what an app serves (a fine-tune adds models to every visitor's lists) starts its
own: `tiny_pair_served` and `shipped_served` in a module-scoped fixture of the same name. The shared ones serve
no fine-tune, so they start no fine-tuning worker in advance (start_app's `prewarm`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.pages import UPLOAD
from tests.helpers import (
    CHROMIUM,
    FLAGS,
    CalmBrowser,
    pair_folder,
    scaled,
    shipped_served,
    start_app,
    stop,
    tiny_pair_served,
)


@pytest.fixture(scope="package")
def app_checkpoints(tmp_path_factory, tiny_checkpoints):
    return pair_folder(tmp_path_factory.mktemp("app") / "checkpoints", tiny_checkpoints)


@pytest.fixture(scope="package")
def app_url(app_checkpoints, data_dir):
    proc, url, _ = start_app(app_checkpoints, data_dir=data_dir)
    yield url
    stop(proc)


@pytest.fixture(scope="package")
def client(app_url):
    from gradio_client import Client
    return Client(app_url, verbose=False)


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium under Playwright, one per test module, its pages calmed (CalmBrowser)."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium chromium-driver)")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield CalmBrowser(browser)
        browser.close()


@pytest.fixture(scope="package")
def tiny_pair_app(tmp_path_factory, tiny_checkpoints, data_dir):
    with tiny_pair_served(tmp_path_factory, tiny_checkpoints, data_dir, prewarm=False) as served:
        yield served


@pytest.fixture(scope="package")
def shipped_app(tmp_path_factory, data_dir):
    with shipped_served(tmp_path_factory, data_dir, prewarm=False) as served:
        yield served


@pytest.fixture
def tiny_page(browser, tiny_pair_app):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(tiny_pair_app[0])
    page.wait_for_selector(UPLOAD, state="attached", timeout=scaled(60_000))
    page.wait_for_function("() => /both say|disagree/.test((document.querySelector('#verdict') || {}).innerText"
                           " || '')", timeout=scaled(60_000))
    yield page
    page.close()
