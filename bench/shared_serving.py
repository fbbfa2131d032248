"""Serving comes first on a shared instance: one visitor's Compare while another visitor's pair run trains.

Launches `python app.py` in shared mode (EXPLORER_SHARED=1) on the shipped pair and, through gradio_client,
in one run:
1. visitor X's Compare, one new image after another (no cached result), with nothing else going on;
2. visitor Y's pair fine-tune (slots A and B, the default recipe) on a zip of bundled CIFAR-10 test images,
   once to warm the worker (its first run compiles the steps), then again alone: its wall time;
3. the same run again, while X keeps comparing: X's Compare p95 over the requests made while it trained,
   and the run's wall time (so "run slowdown" compares two warm runs).

    python bench/shared_serving.py [--images 300] [--priority idle]

`--priority` is the worker's CPU priority (EXPLORER_WORKER_PRIORITY: idle, a niceness, normal). Last line:
`compare p95 idle <ms> ms, while training <ms> ms, ratio <x>, run slowdown <x>`.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import threading
import time
import zipfile

from _common import launch_app, percentile

A, B = "cifar10-vanilla", "cifar10-spt_lsa"
PAIR, ZIP = "A and B (the two slots)", "zip of class folders"
CLASSES = ("cat", "dog", "ship")


def images():
    from explorer.data.datasets import sample_set
    return sample_set()


def class_zip(path: str, n: int) -> str:
    """A zip of `n` bundled test images of three classes, one folder each."""
    from PIL import Image
    ds = images()
    with zipfile.ZipFile(path, "w") as z:
        for c in CLASSES:
            index = [i for i, y in enumerate(ds.y_test) if ds.class_names[y] == c][:n // len(CLASSES)]
            for i in index:
                buffer = io.BytesIO()
                Image.fromarray(ds.x_test[i]).save(buffer, format="PNG")
                z.writestr(f"mine/{c}/{i}.png", buffer.getvalue())
    return path


def compare_files(folder: str, count: int) -> list[str]:
    from PIL import Image
    ds = images()
    paths = []
    for i in range(count):  # each a new image: no cached result
        path = os.path.join(folder, f"compare-{i}.png")
        Image.fromarray(ds.x_test[(i * 7) % len(ds.x_test)]).resize((64, 64)).save(path)
        paths.append(path)
    return paths


def visitor(url):
    from gradio_client import Client
    client = Client(url, verbose=False, ssl_verify=False)
    client.predict(None, api_name="/visitor")
    return client


class Comparer(threading.Thread):
    """Visitor X: Compare on one new image after another until stopped; (start, seconds) per request."""

    def __init__(self, client, files, pause=0.1):
        super().__init__(daemon=True)
        self.client, self.files, self.pause = client, files, pause
        self.times, self.stop = [], threading.Event()

    def run(self):
        from gradio_client import handle_file
        i = 0
        while not self.stop.is_set():
            began = time.perf_counter()
            self.client.predict(handle_file(self.files[i % len(self.files)]), A, B, api_name="/compare")
            self.times.append((began, time.perf_counter() - began))
            i += 1
            time.sleep(self.pause)


def pair_run(client, data, name):
    """Visitor Y's pair run: (wall seconds from Start to done, when training began, when it ended)."""
    from gradio_client import handle_file
    began = time.perf_counter()
    job = client.submit(PAIR, "tiny", "spt_lsa", ZIP, handle_file(data), 0, 0, 0, 0, False, name, A, B,
                        api_name="/finetune")
    training = None
    while not job.done():
        outputs = job.outputs()
        if training is None and outputs and "**training**" in outputs[-1][0]:
            training = time.perf_counter()
        time.sleep(0.2)
    status = job.result()[0]
    if "**done**" not in status:
        raise RuntimeError(f"the run did not finish: {status[:500]}")
    return time.perf_counter() - began, training or began, time.perf_counter()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=300, help="images in the fine-tuning zip")
    p.add_argument("--idle", type=int, default=60, help="Compare requests with nothing else going on")
    p.add_argument("--priority", default="idle", help="the worker's CPU priority (EXPLORER_WORKER_PRIORITY)")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="shared-serving-")
    checkpoints = os.path.join(tmp, "checkpoints")
    import shutil

    from _common import ROOT
    for name in (A, B):
        shutil.copytree(ROOT / "checkpoints" / name, os.path.join(checkpoints, name))
    os.environ.update(EXPLORER_SHARED="1", EXPLORER_WORKER_PRIORITY=args.priority)
    proc, url, _ = launch_app(checkpoints)
    try:
        data = class_zip(os.path.join(tmp, "three.zip"), args.images)
        files = compare_files(tmp, 400)
        from gradio_client import handle_file
        x, y = visitor(url), visitor(url)
        for f in files[:3]:  # warm-up
            x.predict(handle_file(f), A, B, api_name="/compare")
        idle = []
        for f in files[3:3 + args.idle]:
            began = time.perf_counter()
            x.predict(handle_file(f), A, B, api_name="/compare")
            idle.append(time.perf_counter() - began)
            time.sleep(0.1)
        warming, _, _ = pair_run(y, data, "warm-up")  # the worker's first run compiles: not what is compared
        alone, _, _ = pair_run(y, data, "alone")
        busy = Comparer(x, files[3 + args.idle:])
        busy.start()
        loaded, began, ended = pair_run(y, data, "loaded")
        busy.stop.set()
        busy.join()
        during = [t for start, t in busy.times if began <= start and start + t <= ended]
        p_idle, p_busy = percentile(idle, 95), percentile(during, 95)
        print(f"worker priority {args.priority}; {len(idle)} idle Compares, {len(during)} while training")
        print(f"pair run first (compiling) {warming:.1f} s, then alone {alone:.1f} s, with another visitor "
              f"comparing {loaded:.1f} s")
        print(f"compare p50 idle {percentile(idle, 50):.0f} ms, "
              f"while training {percentile(during, 50):.0f} ms")
        print(f"compare p95 idle {p_idle:.0f} ms, while training {p_busy:.0f} ms, ratio {p_busy / p_idle:.2f}, "
              f"run slowdown {loaded / alone:.2f}")
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
