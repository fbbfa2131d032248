"""A real `python app.py` on 127.0.0.1, serving tiny checkpoints trained in the session."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(checkpoints, env_extra=None, timeout=120, data_dir=None):
    """`python app.py` on a free port; with `data_dir` its CIFAR comes from there ($EXPLORER_DATA_DIR)."""
    port = free_port()
    data = {"EXPLORER_DATA_DIR": str(data_dir)} if data_dir else {}
    # The tester's own MCP settings never decide what is tested (the MCP server is on by default).
    inherited = {k: v for k, v in os.environ.items() if k not in ("GRADIO_MCP_SERVER", "EXPLORER_MCP")}
    env = {**inherited, "EXPLORER_CHECKPOINTS": str(checkpoints), **data,
           "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1", "PYTHONUNBUFFERED": "1",
           "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", **(env_extra or {})}
    log = open(checkpoints.parent / f"app-{port}.log", "w")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"app exited with {proc.returncode}: {open(log.name).read()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return proc, url, log.name
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"app did not answer within {timeout} s: {open(log.name).read()[-3000:]}")


@pytest.fixture(scope="session")
def app_checkpoints(tmp_path_factory, tiny_checkpoints):
    root = tmp_path_factory.mktemp("app") / "checkpoints"
    root.mkdir()
    for variant, path in tiny_checkpoints.items():
        shutil.copytree(path, root / f"cifar10-{variant}")
    return root


@pytest.fixture(scope="session")
def app_url(app_checkpoints, data_dir):
    proc, url, _ = start_app(app_checkpoints, data_dir=data_dir)
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


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
