"""A fine-tune in a real browser, on the tiny pair: a status line and a progress bar that stay readable, the
page following its slots when the run ends, a run whose page closed told on the next page once.
(A run of the shipped models, its phases, counter and report: tests/e2e/test_browser_views.py.)"""

from __future__ import annotations

import re
import time

import pytest

from tests.e2e.pages import (
    UPLOAD,
    class_zip_of,
    open_tab,
    visit,
)
from tests.helpers import scaled, tiny_pair_served

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]
pytest.importorskip("playwright")  # a machine without playwright still collects the suite


# An app of this module's own: its fine-tunes add models to the lists every later visitor sees.
@pytest.fixture(scope="module")
def tiny_pair_app(tmp_path_factory, tiny_checkpoints, data_dir):
    with tiny_pair_served(tmp_path_factory, tiny_checkpoints, data_dir) as served:
        yield served


RUN_TINY = 300_000  # ms: a training worker's start and a short pair run on a loaded 2-core machine


# Every 25 ms, what slot A shows beside what its card says: the two must change together.
WATCH_SLOT = """() => {
    window.__slotSamples = [];
    window.__slotWatch = setInterval(() => {
        const box = document.querySelector('input[aria-label="Model A"]');
        const card = document.querySelector('#card-a');
        window.__slotSamples.push([box ? box.value : '', card ? card.innerText : '']);
    }, 25);
}"""


# Every 100 ms during a run: whether the run's progress bar shows in its own box, and whether anything of it
# or of Gradio's progress (shown while a Start reads its data) lies over the status line.
WATCH_PROGRESS = """() => {
    window.__progress = {own: 0, overStatus: 0, statusText: 0};
    const visible = (e) => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);
                             return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.opacity !== '0'; };
    const overlaps = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
    window.__progressWatch = setInterval(() => {
        const status = document.querySelector('#ft-status');
        if (!status) return;
        const box = status.getBoundingClientRect();
        const marks = [...document.querySelectorAll(
            '.ft-bar, .ft-bar-text, .progress-text, .eta-bar, .progress-level, .meta-text')]
            .filter(visible);
        if (marks.some((m) => m.closest('#ft-progress'))) window.__progress.own += 1;
        if (marks.some((m) => overlaps(m.getBoundingClientRect(), box))) window.__progress.overStatus += 1;
        if (/step \\d+\\/\\d+/.test(status.innerText)) window.__progress.statusText += 1;
    }, 100);
}"""


def test_a_fine_tune_keeps_status_and_progress_readable_and_the_page_follows_its_slots(
        tiny_page, tiny_pair_app, cifar10, tmp_path):
    """A pair run on three classes: progress beside the status (never over it); when it ends the slots and
    their cards change in the same moment; no top-5 for three classes and the small splits named; the
    Tau tab lists only what the slots hold (and the shipped LSA model); a reload lists the new runs."""
    data = class_zip_of(tmp_path / "three.zip", cifar10, ["cat", "dog", "ship"], 20)
    tiny_page.get_by_role("tab", name="Fine-tune").click()
    tiny_page.wait_for_selector("#ft-start", timeout=scaled(60_000))
    tiny_page.locator("#ft-zip input[type=file]").set_input_files(data)
    tiny_page.wait_for_function("() => /three.zip/.test(document.querySelector('#ft-zip').innerText)",
                                timeout=scaled(30_000))
    tiny_page.get_by_label("name (optional)").fill("e2e40")
    tiny_page.get_by_label("name (optional)").press("Tab")
    tiny_page.evaluate(WATCH_SLOT)
    tiny_page.evaluate(WATCH_PROGRESS)
    tiny_page.click("#ft-start")
    tiny_page.wait_for_function("() => /Saved as/.test((document.querySelector('#ft-status') || {}).innerText || '')",
                           timeout=scaled(RUN_TINY))
    tiny_page.wait_for_function("() => /e2e40-A/.test(document.querySelector('#card-a').innerText)",
                                timeout=scaled(30_000))
    tiny_page.wait_for_timeout(1500)
    progress = tiny_page.evaluate("() => { clearInterval(window.__progressWatch); return window.__progress; }")
    samples = tiny_page.evaluate("() => { clearInterval(window.__slotWatch); return window.__slotSamples; }")
    assert progress["own"] > 0 and progress["statusText"] > 0, progress  # both were there, both readable
    assert progress["overStatus"] == 0, progress
    final = samples[-1][0]
    assert "e2e40-A" in samples[-1][1], samples[-1]
    stale = [s for s in samples if s[0] == final and "e2e40-A" not in s[1]]
    assert not stale, f"the slot showed the new model while its card showed the old one: {stale[:3]}"

    status = tiny_page.inner_text("#ft-status")
    assert re.search(r"test: \d+ images, each worth [\d.]+ points", status), status
    assert re.search(r"validation: \d+ images?, each worth [\d.]+ points", status), status
    assert "top-5" not in tiny_page.inner_text("#card-a") + tiny_page.inner_text("#card-b")
    headers = tiny_page.locator("table thead").all_inner_texts()
    assert any("test top-1" in h for h in headers) and not any("test top-5" in h for h in headers), headers

    # The Tau tab: B's new model while it is in the slot; gone once the slot holds another.
    tiny_page.get_by_role("tab", name="Tau").click()
    tiny_page.wait_for_function("() => /e2e40-B/.test(document.querySelector('#tau-table').innerText)",
                                timeout=scaled(60_000))
    box = tiny_page.locator('input[aria-label="Model B"]')
    box.fill("cifar10-spt_lsa")
    box.press("Enter")
    tiny_page.wait_for_function("() => !/e2e40-B/.test(document.querySelector('#card-b').innerText)",
                                timeout=scaled(60_000))
    tiny_page.wait_for_function("() => !/e2e40-B/.test(document.querySelector('#tau-table').innerText)"
                           " && /shipped · SPT \\+ LSA/.test(document.querySelector('#tau-table').innerText)",
                           timeout=scaled(60_000))

    # A reload lists the runs at once, in the slots and ready to download.
    tiny_page.reload()
    tiny_page.wait_for_selector(UPLOAD, state="attached", timeout=scaled(60_000))
    tiny_page.get_by_role("tab", name="Fine-tune").click()
    mine = tiny_page.locator('input[aria-label="fine-tuned checkpoints"]')
    tiny_page.wait_for_function("() => /e2e40-[AB]/.test(document.querySelector("
                           "'input[aria-label=\"fine-tuned checkpoints\"]').value)", timeout=scaled(30_000))
    assert re.search(r"finetuned/e2e40-[AB]", mine.input_value())
    box = tiny_page.locator('input[aria-label="Model B"]')
    box.click()
    listbox = tiny_page.locator(f'#{box.get_attribute("aria-controls")}')
    listbox.wait_for(state="attached", timeout=10_000)
    assert any("e2e40-B" in (li.get_attribute("aria-label") or "") for li in listbox.locator("li").all())
    tiny_page.keyboard.press("Escape")
    tiny_page.click("#ft-download")
    tiny_page.wait_for_function("() => /e2e40/.test(document.querySelector('body').innerText)"
                           " && document.querySelector('a[download]')", timeout=scaled(60_000))


def test_a_run_whose_page_closed_mid_run_shows_how_it_ended_on_the_next_page_once(
        browser, tiny_pair_app, cifar10, tmp_path):
    """A run is not tied to its page: closed mid-run, the run goes on and saves its models; the next page the
    visitor opens shows its end as the closed page would have (the report, the new models in the slots), and
    the page after that starts as every page does."""
    url, root = tiny_pair_app
    data = class_zip_of(tmp_path / "four.zip", cifar10, ["cat", "dog", "ship", "frog"], 20)
    page = visit(browser, url, 1280, height=1000)
    open_tab(page, "Fine-tune")
    page.wait_for_selector("#ft-start", timeout=scaled(60_000))
    page.locator("#ft-zip input[type=file]").set_input_files(data)
    page.wait_for_function("() => /four.zip/.test(document.querySelector('#ft-zip').innerText)", timeout=scaled(30_000))
    page.get_by_label("name (optional)").fill("away")
    page.get_by_label("name (optional)").press("Tab")
    page.click("#ft-start")
    page.wait_for_function("() => /step \\d+\\/\\d+/.test(document.querySelector('#ft-status').innerText)",
                           timeout=scaled(RUN_TINY))
    page.close()
    saved = [root / "finetuned" / f"away-{tag}" for tag in "AB"]
    deadline = time.monotonic() + RUN_TINY / 1000
    while not all(f.is_dir() for f in saved) and time.monotonic() < deadline:
        time.sleep(1)
    assert all(f.is_dir() for f in saved), f"the run did not save {saved} after its page closed"

    again = visit(browser, url, 1280, height=1000)
    try:
        open_tab(again, "Fine-tune")
        again.wait_for_function("() => /Saved as/.test(document.querySelector('#ft-status').innerText)",
                                timeout=scaled(60_000))
        again.wait_for_function("() => /away-A/.test(document.querySelector('#card-a').innerText)"
                                " && /away-B/.test(document.querySelector('#card-b').innerText)",
                                timeout=scaled(60_000))
        again.wait_for_selector("#ft-results table thead", timeout=scaled(30_000))
        assert "four" in again.inner_text("#ft-status")
    finally:
        again.close()
    third = visit(browser, url, 1280)
    try:
        open_tab(third, "Fine-tune")
        third.wait_for_timeout(2000)
        assert third.inner_text("#ft-status") == "No run yet."
    finally:
        third.close()
