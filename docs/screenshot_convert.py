"""Takes the README's screenshot of a keras.io example model in the app (docs/converted.png and
docs/converted-tau.png).

    python docs/screenshot_convert.py   # needs tf-keras (requirements-test.txt) and Debian's chromium

Builds a model with the 2022 keras.io example's code at its default hyper-parameters (SPT/LSA, 72 px,
8 blocks, 100 classes: 21.8 M parameters) with tf-keras, in its own process, with random weights (no
trained Keras 2 model can be downloaded here), and saves it as the example did, a SavedModel; serves it as a
Hub repo from 127.0.0.1 (tests/hub_server.py); launches `python app.py` on the shipped checkpoints with
that Hub as its endpoint; types the repo's id into slot B, uploads CIFAR-10 test image 13 (a bird, from
the bundled sample) and captures the page, then the Tau tab's plots (the fixture sets the temperatures away
from their initial value, growing with depth).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from explorer.checkpoints.store import list_checkpoints  # noqa: E402
from explorer.data.datasets import sample_set  # noqa: E402
from tests.e2e.test_browser import UPLOAD  # noqa: E402
from tests.helpers import CHROMIUM, FLAGS, start_app  # noqa: E402
from tests.hub_server import FakeHub  # noqa: E402

REPO = "your-name/vit_small_ds-keras2"


def main() -> int:
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="screenshot-convert-"))
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update(TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, str(ROOT / "tests" / "fixtures" / "make_keras2_example.py"), str(work / "keras2"),
                    json.dumps([{"name": "default"}])], env=env, check=True)
    files = {str(p.relative_to(work / "keras2" / "default")): p.read_bytes()
             for p in sorted((work / "keras2" / "default").rglob("*")) if p.is_file()}
    hub = FakeHub()
    hub.add_repo(REPO, {"7" * 40: {**files, "README.md": b"# vit_small_ds\n"}})
    hub.start()
    image = work / "bird.png"
    Image.fromarray(sample_set().x_test[13]).resize((128, 128)).save(image)
    for folder in list_checkpoints(ROOT / "checkpoints"):  # every shipped one, no runs
        if folder.parent == ROOT / "checkpoints":
            shutil.copytree(folder, work / "checkpoints" / folder.name)
    proc, url, log = start_app(work / "checkpoints", env_extra={
        "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": hub.url, "HF_HOME": str(work / "hf"), "NO_PROXY": "127.0.0.1",
        "HF_TOKEN": ""})
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(url)
            page.wait_for_function("() => /both say|disagree/.test((document.querySelector('#verdict') || {})"
                                   ".innerText || '')", timeout=120_000)
            box = page.locator('input[aria-label="Model B"]')
            box.fill(REPO)
            box.press("Enter")
            page.wait_for_function("() => document.body.innerText.includes('From the keras.io example')",
                                   timeout=300_000)
            page.wait_for_timeout(3000)
            before = page.locator("#verdict").inner_text()
            page.set_input_files(UPLOAD, str(image))
            page.wait_for_selector("#preview img", timeout=30_000)
            page.wait_for_function("(t) => document.querySelector('#verdict').innerText !== t", arg=before,
                                   timeout=120_000)
            page.wait_for_timeout(2000)
            page.screenshot(path=str(ROOT / "docs" / "converted.png"))
            page.get_by_role("tab", name="Tau").click()
            page.wait_for_function("() => document.body.innerText.includes('your-name-vit_small_ds-keras2')",
                                   timeout=120_000)
            page.wait_for_timeout(2000)
            page.locator("#tau-plots").screenshot(path=str(ROOT / "docs" / "converted-tau.png"))
            browser.close()
    except Exception:
        print(Path(log).read_text()[-4000:])
        raise
    finally:
        proc.terminate()
        proc.wait(10)
        hub.stop()
    shutil.rmtree(work)
    print("wrote docs/converted.png and docs/converted-tau.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
