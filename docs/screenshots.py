"""Retakes the README's screenshots from the real app on the shipped checkpoints.

    python docs/screenshots.py         # writes docs/first-visit.png, patches.png, tau.png, compare.png,
                                       # screenshot.png, whatif.png, evidence.png, trust.png and finetune.png,
                                       # and an 800 px window's first-visit-800.png, patches-800.png,
                                       # tau-800.png, attention-800.png, evidence-800.png, trust-800.png,
                                       # finetune-800.png
    python docs/screenshots.py trust   # only docs/trust.png and trust-800.png (a few minutes)
    python docs/screenshots.py finetune  # only docs/finetune.png, finetune-800.png and the own-class shots
                                         # (one pair fine-tune)
    python docs/screenshots.py first   # only docs/first-visit.png and first-visit-800.png

Launches `python app.py` on 127.0.0.1 (offline, with no data folder and an empty Keras cache, as a Space runs
it: its test samples are the bundled 1,000; the fine-tune's zip is drawn from the CIFAR folder), drives
Debian's headless Chromium with Playwright (apt-get install chromium), captures a
first visit (the bundled example the page opens with, at 1280 and 800 px) with its Patches and Tau tabs,
uploads CIFAR-10 test image 13 (a bird, from the bundled sample) at 128 px, and captures the Compare tab and
the Attention tab with the bottom-right patch as the query, then the LSA switches with A's tau at a quarter
and B's diagonal mask off; the Trust tab with the whole-set report on the first 1,000 test images, the
confusion cell of A's cats taken for dogs and the shipped corruption and faithfulness tables. Then it fine-
tunes both models on a zip of ten CIFAR-100 superclasses (bench/finetune_quality.py's "new" task of draw 0,
classes neither model has seen; from the CIFAR folder) with the default recipe, and captures the Fine-tune tab
once the pair run is done (the app works on copies of the checkpoints, so the run's results are not left in
checkpoints/); then that pair of classes of its own in the slots: Compare on a sample of the images its fine-tune
held out (own-compare.png, own-compare-800.png), Trust's report on them (own-trust.png, own-trust-800.png) and,
when a model kept its start in a second run on 100 of the zip's images, the run's curves (curves-kept-start.png,
curves-kept-start-800.png). The Patches, Tau, Attention, Evidence,
Trust and Fine-tune tabs are also taken in an 800 px window (the same page, narrowed), below the image column.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from explorer.checkpoints.store import list_checkpoints, read_card  # noqa: E402
from explorer.data.datasets import sample_set  # noqa: E402
from explorer.model.config import ViTConfig  # noqa: E402
from tests.e2e.test_browser import UPLOAD  # noqa: E402
from tests.helpers import CHROMIUM, FLAGS, start_app  # noqa: E402

DONE = "() => /both say|disagree/.test((document.querySelector('#verdict') || {}).innerText || '')"


def narrow_shot(page, name: str) -> None:
    """The page as it is, in an 800 px window (the whole page), then back at 1280 px."""
    page.set_viewport_size({"width": 800, "height": 1000})
    page.wait_for_timeout(2000)
    page.screenshot(path=str(ROOT / "docs" / name), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.wait_for_timeout(1000)


def trust_shots(page) -> None:
    """The Trust tab on the shipped pair as it arrives: the verdict and the shipped faithfulness and corruption
    tables without a click, the whole-set report on the first 1,000 test images (computed as the tab opens),
    and A's cat-as-dog cell opened."""
    page.get_by_role("tab", name="Trust").click()
    for summary in ("#trust-faithfulness-summary", "#trust-corruptions-summary"):
        page.wait_for_function(f"() => /shipped/.test((document.querySelector('{summary}') || {{}}).innerText || '')",
                               timeout=120_000)
    page.wait_for_function("() => /only B on/.test((document.querySelector('#trust-summary') || {}).innerText"
                           " || '')", timeout=300_000)
    page.click("#trust-ca [data-testid='cell-3-6']")  # row cat, column dog (the first column names the row)
    page.wait_for_function("() => document.querySelectorAll('#trust-cell img').length > 0", timeout=60_000)
    page.wait_for_timeout(2000)
    page.screenshot(path=str(ROOT / "docs" / "trust.png"), full_page=True)
    narrow_shot(page, "trust-800.png")


def own_shots(page) -> None:
    """The fine-tuned pair (classes of its own) that the fine-tune left in the slots: Compare on a test sample
    drawn from the images its fine-tune held out, and Trust's report on them, at 1280 and 800 px. Then the same
    zip again on 100 of its images (8 validation images), where fine-tuning is rarely clearly better than the
    start: when a model kept its start, the run's curves saying so (curves-kept-start.png, -800)."""
    page.get_by_role("tab", name="Compare").click()
    page.click("#sample")
    page.wait_for_function("() => /held-out/.test((document.querySelector('#truth') || {}).innerText || '')",
                           timeout=60_000)
    page.wait_for_function("() => /True label/.test((document.querySelector('#verdict') || {}).innerText || '')",
                           timeout=60_000)
    page.wait_for_timeout(2000)
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=str(ROOT / "docs" / "own-compare.png"))
    page.set_viewport_size({"width": 800, "height": 1000})
    page.wait_for_timeout(2000)
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=str(ROOT / "docs" / "own-compare-800.png"))
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.get_by_role("tab", name="Trust").click()
    page.wait_for_function("() => /held-out[^]*only B on/.test((document.querySelector('#trust-summary') || {})"
                           ".innerText || '')", timeout=300_000)
    page.wait_for_function("() => document.querySelectorAll('#trust-confusion img').length === 1", timeout=60_000)
    page.wait_for_timeout(2000)
    page.screenshot(path=str(ROOT / "docs" / "own-trust.png"), full_page=True)
    narrow_shot(page, "own-trust-800.png")

    page.get_by_role("tab", name="Fine-tune").click()
    page.get_by_label("training images (0 = all)").fill("100")
    page.wait_for_timeout(1000)
    page.click("#ft-start")
    page.wait_for_timeout(3000)
    page.wait_for_function("() => /Saved as|failed/.test((document.querySelector('#ft-status') || {})"
                           ".innerText || '')", timeout=600_000)
    page.wait_for_timeout(3000)
    status = page.inner_text("#ft-status")
    if status.count("Kept ") > status.count("Kept the fine-tuned model") + status.count("Kept epoch"):
        curves = page.locator("#ft-curves")
        curves.scroll_into_view_if_needed()
        curves.screenshot(path=str(ROOT / "docs" / "curves-kept-start.png"))
        page.set_viewport_size({"width": 800, "height": 1000})
        page.wait_for_timeout(2000)
        curves.scroll_into_view_if_needed()
        curves.screenshot(path=str(ROOT / "docs" / "curves-kept-start-800.png"))
        page.set_viewport_size({"width": 1280, "height": 1000})
    else:
        print("neither model kept its start on 100 images: no curves-kept-start.png", file=sys.stderr)


def bare(work: Path) -> dict:
    """start_app's settings for an app as a visitor or a Space runs it: no data folder beside it and an empty
    Keras cache (its test samples the bundled 1,000 images)."""
    (work / "no-data").mkdir(exist_ok=True)
    (work / "keras-home").mkdir(exist_ok=True)
    return {"data_dir": work / "no-data", "env_extra": {"KERAS_HOME": str(work / "keras-home")}}


def first_visit_shots(browser, checkpoints: Path) -> None:
    """A first visit as a visitor sees it, on the app's own first pair (the paper-scale one), at 1280 and 800
    px: the first example already analysed."""
    proc, url, _ = start_app(checkpoints, first_visit=None, **bare(checkpoints.parent))
    try:
        for width, name in ((800, "first-visit-800.png"), (1280, "first-visit.png")):
            page = browser.new_page(viewport={"width": width, "height": 1000})
            page.goto(url)
            page.wait_for_function(DONE, timeout=90_000)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(ROOT / "docs" / name))
            page.close()
    finally:
        proc.terminate()


def main(only: str | None = None) -> int:
    if only not in (None, "trust", "finetune", "first"):
        print(f"unknown part {only!r}: give first, trust, finetune or nothing (all)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="screenshots-"))
    image = work / "bird.png"
    Image.fromarray(sample_set().x_test[13]).resize((128, 128)).save(image)
    for folder in list_checkpoints(ROOT / "checkpoints"):  # every shipped one (the ablation's too), no runs
        if folder.parent == ROOT / "checkpoints":
            shutil.copytree(folder, work / "checkpoints" / folder.name)
    shutil.copytree(ROOT / "checkpoints" / "paper", work / "checkpoints" / "paper")  # the first visit's pair
    sys.path.insert(0, str(ROOT / "bench"))
    from _common import data_dir
    from finetune_quality import draw_zips
    new_task = draw_zips(work, Path(data_dir()), 0)["new"] if only in (None, "finetune") else None
    if only in (None, "first"):
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            first_visit_shots(browser, work / "checkpoints")
            browser.close()
        if only == "first":
            print("wrote docs/first-visit.png, first-visit-800.png")
            return 0
    # The other shots on the shipped 0.2 M pair, as their words say (a bird, the cat-as-dog cell, ...).
    proc, url, log = start_app(work / "checkpoints", **bare(work))  # its log goes to `work`, kept if anything fails
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(url)
            page.wait_for_function(DONE, timeout=60_000)
            page.wait_for_timeout(1500)
            if only is None:
                page.get_by_role("tab", name="Patches").click()
                page.wait_for_timeout(1500)
                page.screenshot(path=str(ROOT / "docs" / "patches.png"))
                narrow_shot(page, "patches-800.png")
                page.get_by_role("tab", name="Tau").click()
                page.wait_for_timeout(1500)
                page.screenshot(path=str(ROOT / "docs" / "tau.png"))
                narrow_shot(page, "tau-800.png")
                page.get_by_role("tab", name="Compare").click()
                page.wait_for_selector(UPLOAD, state="attached", timeout=60_000)
                page.set_input_files(UPLOAD, str(image))
                page.wait_for_selector("#preview img", timeout=30_000)
                page.wait_for_function("() => /bird/.test(document.querySelector('#verdict').innerText)",
                                       timeout=60_000)
                page.wait_for_timeout(1000)
                page.screenshot(path=str(ROOT / "docs" / "compare.png"))

                page.get_by_role("tab", name="Attention").click()
                picker = page.locator("#picker img").first
                picker.wait_for(timeout=30_000)
                picker.scroll_into_view_if_needed()  # the button below it may have scrolled it away
                box = picker.bounding_box()
                side = min(box["width"], box["height"])
                page.mouse.click(box["x"] + box["width"] / 2 + 0.4 * side, box["y"] + box["height"] / 2 + 0.4 * side)
                last = ViTConfig.from_dict(read_card(ROOT / "checkpoints" / "cifar10-spt_lsa").config).grid_size - 1
                page.wait_for_function(
                    f"() => /row {last}, col {last}/.test("
                    "(document.querySelector('#attn-caption') || {}).innerText || '')",
                    timeout=60_000)
                page.wait_for_timeout(2000)
                page.screenshot(path=str(ROOT / "docs" / "screenshot.png"), full_page=True)
                narrow_shot(page, "attention-800.png")

                page.get_by_text("LSA switches: what if").click()
                page.locator("#what-if-btn").scroll_into_view_if_needed()
                page.locator("#wi-factor-a input").click()
                page.get_by_role("option", name="¼×").click()
                page.locator("#wi-mask-b").get_by_text("off", exact=True).click()
                page.click("#what-if-btn")
                page.wait_for_function(
                    "() => /τ × 0.25/.test((document.querySelector('#what-if-summary') || {}).innerText || '')",
                    timeout=60_000)
                page.wait_for_timeout(2000)
                section = page.locator("#what-if-text").locator("xpath=ancestor::div[contains(@class, 'block')][1]")
                section.screenshot(path=str(ROOT / "docs" / "whatif.png"))

                page.get_by_role("tab", name="Evidence").click()
                page.click("#robustness-btn")
                page.wait_for_function(
                    "() => /keeps/.test((document.querySelector('#robustness-summary') || {}).innerText || '')",
                    timeout=300_000)
                page.wait_for_timeout(2000)
                page.screenshot(path=str(ROOT / "docs" / "evidence.png"), full_page=True)
                narrow_shot(page, "evidence-800.png")

            if only in (None, "trust"):
                trust_shots(page)
            if only in (None, "finetune"):
                page.get_by_role("tab", name="Fine-tune").click()
                page.set_input_files("#ft-zip input[type=file]", str(new_task))
                page.wait_for_timeout(2000)
                page.click("#ft-start")
                page.wait_for_function("() => /Saved as|failed/.test((document.querySelector('#ft-status') || {})"
                                       ".innerText || '')", timeout=600_000)
                page.wait_for_timeout(3000)
                page.screenshot(path=str(ROOT / "docs" / "finetune.png"), full_page=True)
                narrow_shot(page, "finetune-800.png")
                own_shots(page)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)
    shutil.rmtree(work)
    if only in ("trust", "finetune"):
        print(f"wrote docs/{only}.png and {only}-800.png" + (" and the own-class shots" if only == "finetune" else ""))
        return 0
    print("wrote docs/first-visit.png, first-visit-800.png, patches.png, patches-800.png, tau.png, tau-800.png, "
          "compare.png, screenshot.png, attention-800.png, whatif.png, evidence.png, evidence-800.png, "
          "trust.png, trust-800.png, finetune.png, finetune-800.png and the own-class shots")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
