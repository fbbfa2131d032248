"""What an app nobody uses costs, and what the idle queue's slower polling (explorer.ui.gradio_patches
install_idle_queue) costs a request: `python app.py` as it runs, against the same app with Gradio's own
polling (every 1 ms for events, 10 ms for progress), taking turns. For each: the CPU the app's process takes
while idle (no page open), then the time of a cheap queued request (/models) through one gradio_client.

    python bench/idle_app.py [--rounds 2] [--idle-s 30] [--requests 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from _common import launch_app, percentile, proc_stat

# The same app with Gradio 6.31's own idle polling: the patch reads its constants when a queue is made.
GRADIO_OWN = ("import runpy, explorer.ui.gradio_patches as g; "
              "g.IDLE_QUEUE_POLL, g.IDLE_PROGRESS_POLL = g.GRADIO_IDLE_POLLS; "
              "runpy.run_path('app.py', run_name='__main__')")
SETTINGS = {"the app (20 / 100 ms)": None, "Gradio's own (1 / 10 ms)": [sys.executable, "-c", GRADIO_OWN]}


def measure(command, idle_s: float, requests: int) -> tuple[float, list[float]]:
    from gradio_client import Client
    proc, url, _ = launch_app(command=command)
    try:
        client = Client(url, verbose=False)
        client.predict(api_name="/models")  # warm: the first request pays for imports
        time.sleep(5)
        start, t0 = proc_stat(proc.pid)[1], time.perf_counter()
        time.sleep(idle_s)
        idle = (proc_stat(proc.pid)[1] - start) / (time.perf_counter() - t0)
        times = []
        for _ in range(requests):
            t = time.perf_counter()
            client.predict(api_name="/models")
            times.append(time.perf_counter() - t)
        client.close()
        return idle, times
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--idle-s", type=float, default=30.0)
    p.add_argument("--requests", type=int, default=40)
    args = p.parse_args()
    idle = {name: [] for name in SETTINGS}
    times = {name: [] for name in SETTINGS}
    for r in range(args.rounds):
        order = list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1]  # taking turns to go first
        for name in order:
            i, t = measure(SETTINGS[name], args.idle_s, args.requests)
            idle[name].append(i)
            times[name] += t
            print(f"round {r + 1}, {name}: idle {100 * i:.2f} % of a CPU; /models p50 {percentile(t, 50):.1f} ms",
                  flush=True)
    ours, theirs = SETTINGS
    print(f"\nidle CPU: {100 * statistics.median(idle[ours]):.2f} % vs {100 * statistics.median(idle[theirs]):.2f} % "
          f"of a CPU: ratio {statistics.median(idle[ours]) / statistics.median(idle[theirs]):.2f} (goal <= 0.5)")
    for q in (50, 95):
        a, b = percentile(times[ours], q), percentile(times[theirs], q)
        print(f"/models p{q}: {a:.1f} vs {b:.1f} ms: {a - b:+.1f} ms (goal <= +20 ms)")


if __name__ == "__main__":
    main()
