"""Takes the README's screenshots of the Small data tab (docs/small-data.png, small-data-800.png and
small-data-pair.png).

    python docs/screenshot_study.py   # needs Debian's chromium (apt-get install chromium)

Launches `python app.py` on a copy of the shipped checkpoints (the study's included), opens the Small data
tab at 1280 and 800 px, then picks the smallest training-set size and captures the Compare tab with that
size's pair in the slots.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import CHROMIUM, FLAGS, start_app  # noqa: E402

DONE = "() => /both say|disagree/.test((document.querySelector('#verdict') || {}).innerText || '')"


def main() -> int:
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="screenshot-study-"))
    shutil.copytree(ROOT / "checkpoints", work / "checkpoints",
                    ignore=shutil.ignore_patterns(".hub-cache", ".browser-secret", "runs"))
    proc, url, log = start_app(work / "checkpoints")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            for width, name in ((800, "small-data-800.png"), (1280, "small-data.png")):
                page = browser.new_page(viewport={"width": width, "height": 1000})
                page.goto(url)
                page.wait_for_function(DONE, timeout=120_000)
                tab = page.get_by_role("tab", name="Small data")
                if tab.is_visible():
                    tab.click()
                else:  # a narrow window folds the last tabs into Gradio's "…" menu
                    page.locator("button[aria-label='More tabs']").click()
                    page.locator(".overflow-dropdown button", has_text="Small data").click()
                page.wait_for_selector("#data-size-tables", timeout=30_000)
                page.wait_for_timeout(2500)
                page.screenshot(path=str(ROOT / "docs" / name), full_page=True)
            # Put the smallest size's pair in the slots and show them on the Compare tab.
            choice = page.locator("#data-size label").first
            size = choice.inner_text().strip()
            before = page.locator("#verdict").inner_text()
            choice.click()
            page.wait_for_function("(t) => document.querySelector('#verdict').innerText !== t", arg=before,
                                   timeout=180_000)
            page.wait_for_timeout(2000)
            page.get_by_role("tab", name="Compare").click()
            page.wait_for_timeout(1500)
            page.screenshot(path=str(ROOT / "docs" / "small-data-pair.png"))
            print(f"the {size}-image pair in the slots")
            browser.close()
    except Exception:
        print(f"the app's log: {log}", file=sys.stderr)
        raise
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    shutil.rmtree(work, ignore_errors=True)
    for name in ("small-data.png", "small-data-800.png", "small-data-pair.png"):
        print(ROOT / "docs" / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
