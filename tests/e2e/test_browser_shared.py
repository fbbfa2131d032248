"""A shared app (a public Space) with two visitors in two Chromium browser contexts, each with its own
localStorage and so its own visitor id: the second waits in the queue with its place shown (kept across a
reload), a page reloaded mid-run follows its visitor's run (and only theirs), and each lists only its own
runs, across reloads."""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from pathlib import Path

import pytest
from PIL import Image

from explorer.checkpoints.finetuned import REFUSED
from tests.helpers import ROOT, pair_folder, scaled, start_app, stop

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]
# Imported here, not at the top: a machine without playwright still collects the suite.
expect = pytest.importorskip("playwright.sync_api").expect
SCRATCH = "(a new model from scratch)"
STORAGE_KEY = "spt-lsa-explorer-visitor"
WIDTH = 1280
DOC_SHOT = ROOT / "docs" / "shared-queue.png"
RUN = 300_000  # ms: a training worker's start or a short run on a loaded 2-core machine
UI = 60_000  # ms: a click's answer while visitor 1's run takes both cores of a slow host
SAVED = re.compile(r"finetuned/[0-9a-f]+/\S+?(?=[`,\s]|$)")
# Run in every page before Gradio's own scripts: counts the events the page sent (queue/join) and those
# that came back (process_completed on its queue/data stream), so a test knows when a page has settled.
COUNT_EVENTS = r"""
(() => {
  const seen = window.__gradioEvents = {joined: 0, completed: 0};
  const fetch = window.fetch;
  window.fetch = async (input, init) => {
    const url = String(typeof input === "string" || input instanceof URL ? input : input.url);
    if (url.includes("/queue/join")) seen.joined += 1;
    const response = await fetch(input, init);
    if (!url.includes("/queue/data") || !response.body) return response;
    const [mine, theirs] = response.body.tee();
    (async () => {
      const reader = theirs.getReader(), text = new TextDecoder();
      let rest = "";
      for (;;) {
        const {done, value} = await reader.read();
        if (done) break;
        const lines = (rest + text.decode(value, {stream: true})).split("\n");
        rest = lines.pop();
        seen.completed += lines.filter((l) => /"msg":\s*"process_completed"/.test(l)).length;
      }
    })().catch(() => {});  // Gradio aborts the stream once its events are done
    return new Response(mine, {status: response.status, statusText: response.statusText, headers: response.headers});
  };
})();
"""
SETTLED = "() => { const e = window.__gradioEvents; return e && e.joined > 0 && e.completed >= e.joined; }"


@pytest.fixture(scope="module")
def shared_app(tmp_path_factory, tiny_checkpoints, data_dir):
    root = pair_folder(tmp_path_factory.mktemp("browser-shared") / "checkpoints", tiny_checkpoints)
    home = tmp_path_factory.mktemp("home")
    proc, url, log = start_app(root, data_dir=data_dir, timeout=300, env_extra={
        "EXPLORER_SHARED": "1", "EXPLORER_MAX_QUEUE": "2", "EXPLORER_BROWSER_SECRET": "test-secret",
        "HOME": str(home), "HF_HOME": str(home / "hf")})
    yield url, root, log
    stop(proc)


def open_finetune(page, url=None):
    """Opens (or reloads) the app, and its Fine-tune tab once the page's load events (the visitor's id and
    lists among them) have come back."""
    page.goto(url) if url else page.reload()
    page.wait_for_function(SETTLED, timeout=scaled(120_000))
    assert page.evaluate(f"() => localStorage.getItem('{STORAGE_KEY}')")
    page.get_by_role("tab", name="Fine-tune").click()
    page.wait_for_selector("#ft-start", timeout=scaled(60_000))


def dropdown(page, label):
    box = page.locator(f'input[aria-label="{label}"]')
    return box, page.locator(f'#{box.get_attribute("aria-controls")}')


def choose(page, label, value):
    box, listbox = dropdown(page, label)
    box.click()
    listbox.locator(f'li[aria-label="{value}"]').click()
    expect(box).to_have_value(value, timeout=scaled(UI))


def options(page, label) -> list[str]:
    """The choices a dropdown offers, as its open list shows them."""
    box, listbox = dropdown(page, label)
    box.click()
    listbox.wait_for(state="attached", timeout=scaled(UI))
    names = [li.get_attribute("aria-label") for li in listbox.locator("li[role=option]").all()]
    page.keyboard.press("Escape")
    box.blur()
    return names


def wait_listed(page, label, ref, timeout=60.0) -> list[str]:
    """A dropdown's choices once they include `ref` (an event may still be on its way), or as they are."""
    deadline = time.monotonic() + timeout
    while ref not in (names := options(page, label)) and time.monotonic() < deadline:
        page.wait_for_timeout(500)
    return names


def fill_form(page, data, epochs, lr, batch, images, name=""):
    page.locator(f'[data-testid="{data}-radio-label"]').click()
    for label, value in (("epochs (0 = auto)", epochs), ("learning rate (0 = auto)", lr),
                         ("batch size (0 = auto)", batch), ("training images (0 = all)", images)):
        field = page.locator(f'input[aria-label="{label}"]')
        field.fill(str(value))
        field.press("Tab")
    if name:
        page.get_by_label("name (optional)").fill(name)
        page.get_by_label("name (optional)").press("Tab")


def wait_status(page, pattern: str, timeout=None) -> str:
    """The status line's own text (not Gradio's overlay over its block) once it matches `pattern`."""
    page.wait_for_function(
        "(p) => new RegExp(p).test((document.querySelector('#ft-status') || {}).innerText || '')",
        arg=pattern, timeout=scaled(RUN) if timeout is None else timeout)
    return page.inner_text("#ft-status")


def shot_waiting(page, path: Path) -> None:
    """The tab bar down to the status line, the page's full width: what a waiting visitor reads."""
    top = page.evaluate("() => document.querySelector('[role=tablist]').getBoundingClientRect().top + scrollY")
    bottom = page.evaluate("() => document.querySelector('#ft-status').getBoundingClientRect().bottom + scrollY")
    page.screenshot(path=str(path), full_page=True,
                    clip={"x": 0, "y": max(0, top - 8), "width": WIDTH, "height": bottom - top + 16})


def test_two_browsers_queue_and_each_lists_only_its_own_runs(shared_app, browser, tmp_path):
    url, root, log = shared_app
    one = browser.new_context(viewport={"width": WIDTH, "height": 1000})
    two = browser.new_context(viewport={"width": WIDTH, "height": 1000})
    for context in (one, two):
        context.add_init_script(COUNT_EVENTS)
    try:
        # Visitor 1 starts a long pair fine-tune (A and B, the default) and it trains.
        p1 = one.new_page()
        open_finetune(p1, url)
        assert "A shared instance" in p1.inner_text("#shared-note")
        # Batch 1: minutes of steps on a fast host (at batch 4 a 1,750 images/s host ended it in 72 s), so that it
        # lasts through every step below; it is cancelled then.
        fill_form(p1, "cifar10", 30, 0.001, 1, 2048)
        p1.click("#ft-start")
        status = wait_status(p1, r"(^|\n)training [AB] · ")  # the headline: what the run is doing
        assert "starts by itself" not in status  # visitor 1 never waited

        # Visitor 2, another browser (its own localStorage), starts a short run: it waits, first of one.
        p2 = two.new_page()
        open_finetune(p2, url)
        choose(p2, "fine-tune", SCRATCH)
        choose(p2, "preset (new model)", "tiny")
        choose(p2, "variant (new model)", "vanilla")
        fill_form(p2, "cifar10", 1, 0.001, 32, 128, name="visitor-two")
        p2.click("#ft-start")
        waiting = wait_status(p2, r"waiting · ", timeout=scaled(120_000))
        assert "another visitor's run is going on" in waiting
        assert "your place in the queue: 1 of 1" in waiting, waiting
        p2.wait_for_timeout(1500)  # a refresh or two of the line before its picture
        # the run's box above the line says how far the wait has come, not an empty gap
        assert "waiting for your turn · 1 of 1 in the queue" in p2.inner_text("#ft-progress")
        shot = tmp_path / "shared-queue.png"
        shot_waiting(p2, shot)
        assert Image.open(shot).size[0] == WIDTH
        if not DOC_SHOT.exists():  # docs/deploy.md's picture; delete it to take a new one
            shutil.copy(shot, DOC_SHOT)
        assert re.search(r"(^|\n)training [AB] · ", p1.inner_text("#ft-status"))  # visitor 1's run went on meanwhile

        # Visitor 1 reloads its page mid-run: the run goes on and the new page follows it (a run is not tied
        # to its page), its Cancel still visitor 1's; a second tab of visitor 2 (who waits behind it) shows
        # visitor 2's place, nothing of visitor 1's run, and visitor 2's reloaded page keeps the place.
        p1.reload()
        p1.get_by_role("tab", name="Fine-tune").click(timeout=scaled(UI))
        first = re.search(r"step (\d+)/", wait_status(p1, r"(^|\n)training [AB] · (.|\n)*step \d+/",
                                                      timeout=scaled(UI)))
        p1.wait_for_function("(n) => { const m = /step (\\d+)\\//.exec(document.querySelector('#ft-status').innerText);"
                             " return m && Number(m[1]) !== n; }", arg=int(first.group(1)),
                             timeout=scaled(UI))  # it moves
        # (Not open_finetune: a page that takes up a wait has an event going on, so its events never settle.)
        p2b = two.new_page()
        p2b.goto(url)
        p2b.get_by_role("tab", name="Fine-tune").click(timeout=scaled(UI))
        assert "your place in the queue: 1 of 1" in wait_status(p2b, r"waiting · ", timeout=scaled(UI))
        assert "training" not in p2b.inner_text("#ft-status")
        p2b.close()
        p2.reload()
        p2.get_by_role("tab", name="Fine-tune").click(timeout=scaled(UI))
        assert "your place in the queue: 1 of 1" in wait_status(p2, r"waiting · ", timeout=scaled(UI))

        # Visitor 1 cancels its run from the reloaded page: visitor 2's starts by itself and is saved under its
        # own folder.
        p1.click("#ft-cancel")
        # The run's own headline, not the Cancel button's answer ("Cancelling", as the run's line says while the
        # worker stops, up to its grace period).
        assert "ancelled" in wait_status(p1, r"^cancelled · ", timeout=scaled(120_000))
        done = wait_status(p2, r"Saved as|the run failed")
        assert "Saved as" in done, done
        saved = SAVED.findall(done)
        assert len(saved) == 1 and saved[0].endswith("/visitor-two"), done
        mine = saved[0]
        assert (root / mine).is_dir()
        assert [p.name for p in (root / "finetuned").glob("*/*") if p.is_dir()] == ["visitor-two"]
        listed = f"fine-tuned · {mine.rsplit('/', 1)[1]}"  # the slots list runs by name (explorer.checkpoints.catalog)
        assert listed in wait_listed(p2, "Model A", listed)
        assert mine in wait_listed(p2, "your fine-tuned checkpoints", mine)
        p2.screenshot(path=str(tmp_path / "finetune-done.png"), full_page=True)
        assert Image.open(tmp_path / "finetune-done.png").size[0] == WIDTH

        # Visitor 2 reloads (same browser, same id): its run is still listed.
        open_finetune(p2)
        assert listed in options(p2, "Model A")
        assert options(p2, "your fine-tuned checkpoints") == [mine]

        # Visitor 1 reloads: the shipped checkpoints only, and visitor 2's run by its name is refused.
        open_finetune(p1)
        listed = options(p1, "Model A")
        assert "shipped · ViT · 192 images" in listed and mine not in listed  # the shipped models, by their labels
        assert options(p1, "your fine-tuned checkpoints") == []
        box, _ = dropdown(p1, "Model A")
        box.fill(mine)
        box.press("Enter")
        p1.wait_for_function("(t) => document.body.innerText.includes(t)", arg=REFUSED[:40], timeout=scaled(60_000))
        p1.wait_for_function("(t) => !document.querySelector(\"input[aria-label='Model A']\").value.includes(t)",
                             arg=mine, timeout=scaled(UI))  # the slot goes back to the model it held
    except Exception:
        for i, c in enumerate((one, two), 1):
            for page in c.pages:
                with contextlib.suppress(Exception):
                    print(f"visitor {i}:", page.evaluate("() => window.__gradioEvents"))
                    page.screenshot(path=str(tmp_path / f"failure-visitor{i}.png"), full_page=True)
        print(Path(log).read_text()[-4000:])
        raise
    finally:
        one.close()
        two.close()
