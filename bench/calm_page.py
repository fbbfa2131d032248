"""What the browser tests' pages cost the host, as headless Chromium draws them (in software), with and without
tests.helpers.CALM_PAGE (a loop of animation frames held to 10 a second, no CSS transitions or animations):
the CPU of the browser's processes for a page of `python app.py` after its first answer, nobody touching it,
and for a page of a small Gradio app with one event of ten outputs pending (Gradio's status trackers redraw
their timers every frame), each setting in a fresh browser, taking turns.

    python bench/calm_page.py [--rounds 3] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from _common import launch_app, proc_stat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.pages import DONE  # noqa: E402  (the page has its first answer)
from tests.helpers import CALM_PAGE, CHROMIUM, FLAGS  # noqa: E402

SETTINGS = {"calm page": CALM_PAGE, "as Chromium draws": None}


def descendants_cpu_s(root: int, name: bytes = b"chrom") -> float:
    """CPU seconds (user + system) of the processes under `root` whose command line holds `name`."""
    parents, cpu = {}, {}
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            parents[pid], seconds = proc_stat(pid)
            if name in open(f"/proc/{pid}/cmdline", "rb").read():
                cpu[pid] = seconds
        except OSError:
            continue

    def under(pid):
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == root:
                return True
        return False
    return sum(s for pid, s in cpu.items() if under(pid))


def pending_app():
    """A page with one button whose event (ten outputs) stays pending until `release` is set."""
    import gradio as gr
    release = threading.Event()

    def slow():
        release.wait(120)
        return ["done"] * 10
    with gr.Blocks() as demo:
        outputs = [gr.Textbox(label=f"output {i}") for i in range(10)]
        gr.Button("Go", elem_id="go").click(slow, None, outputs, concurrency_limit=None)
    demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    return demo, release


def measure(playwright, script, url, seconds, pending=None) -> float:
    """The browser's CPU (a share of one CPU) over `seconds` on a page of `url`: idle after its first answer,
    or, with `pending` (the app's release event), while the Go button's event is pending."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        if script:
            page.add_init_script(script)
        page.goto(url)
        if pending is None:
            page.wait_for_function(DONE, timeout=180_000)
        else:
            pending.clear()
            page.click("#go")
        page.wait_for_timeout(2000)
        start, t0 = descendants_cpu_s(os.getpid()), time.perf_counter()
        page.wait_for_timeout(seconds * 1000)
        share = (descendants_cpu_s(os.getpid()) - start) / (time.perf_counter() - t0)
        if pending is not None:
            pending.set()
        return share
    finally:
        browser.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=10.0)
    args = p.parse_args()
    from playwright.sync_api import sync_playwright
    proc, url, _ = launch_app()
    demo, release = pending_app()
    views = {"the app's page, idle": (url, None), "one event of ten outputs pending": (demo.local_url, release)}
    seen = {(view, name): [] for view in views for name in SETTINGS}
    try:
        with sync_playwright() as playwright:
            for r in range(args.rounds):
                order = list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1]  # taking turns to go first
                for view, (where, pending) in views.items():
                    for name in order:
                        share = measure(playwright, SETTINGS[name], where, args.seconds, pending)
                        seen[view, name].append(share)
                        print(f"round {r + 1}, {view}, {name}: {share:.3f} of a CPU", flush=True)
    finally:
        release.set()
        demo.close()
        proc.terminate()
        proc.wait(timeout=30)
    calm, plain = SETTINGS
    print()
    for view in views:
        a, b = statistics.median(seen[view, calm]), statistics.median(seen[view, plain])
        print(f"{view}: {a:.3f} vs {b:.3f} of a CPU: ratio {a / b:.2f} (goal <= 0.5)")


if __name__ == "__main__":
    main()
