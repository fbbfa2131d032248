"""Helpers shared by the benchmark scripts (not a test)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def data_dir() -> str:
    return os.environ.get("EXPLORER_DATA_DIR", str(ROOT.parent / "shared" / "data"))


def image_files(count: int, name: str = "cifar10-test-{i:05d}.png") -> list[str]:
    """The first `count` CIFAR-10 test images as PNG files in a new temporary folder (what a client uploads)."""
    import tempfile

    from PIL import Image

    from explorer.data.datasets import load_cifar
    folder = Path(tempfile.mkdtemp())
    files = []
    for i, x in enumerate(load_cifar("cifar10", data_dir()).x_test[:count]):
        files.append(str(folder / name.format(i=i)))
        Image.fromarray(x).save(files[-1])
    return files


def percentile(values, q) -> float:
    import numpy as np
    return float(np.percentile(np.asarray(values) * 1000.0, q))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_app(checkpoints: str | None = None, timeout: float = 180.0, command: list[str] | None = None):
    """Starts `python app.py` (or `command`, run the same way) on a free port; returns (process, url, seconds
    until it answered)."""
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "EXPLORER_DATA_DIR": data_dir()}
    if checkpoints:
        env["EXPLORER_CHECKPOINTS"] = checkpoints
    start = time.perf_counter()
    proc = subprocess.Popen(command or [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    while time.perf_counter() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1)
            return proc, url, time.perf_counter() - start
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("app.py did not answer in time")


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def proc_stat(pid: int) -> tuple[int, float]:
    """A process's parent and CPU seconds so far (user + system), from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
