"""A real `python app.py` on 127.0.0.1, serving tiny checkpoints trained in the session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import CHROMIUM, FLAGS, pair_folder, start_app, stop


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
