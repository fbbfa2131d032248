"""The CPU-seconds of each test, whatever processes it starts (apps, workers, Chromium), as a pytest plugin:
the cgroup the run is in is read before and after each test (cgroup v1's `cpuacct.usage`), so a fixture's setup
counts to the first test that uses it and its teardown to the last. The run must be alone in that cgroup.

    mkdir /sys/fs/cgroup/cpuacct/suite && echo $$ > /sys/fs/cgroup/cpuacct/suite/tasks   # as root, then:
    CPU_CGROUP=/sys/fs/cgroup/cpuacct/suite PYTHONPATH=bench python -m pytest -m "slow or e2e" -p suite_cpu
    python bench/suite_cpu.py suite_cpu.json         # the modules and the 40 costliest tests

Writes CPU_ROWS (default suite_cpu.json): {"total_cpu": seconds, "rows": [{"id", "cpu", "wall"}, ...]}.
docs/development.md has what it measured."""

from __future__ import annotations

import collections
import json
import os
import sys
import time

import pytest

ROWS: list[dict] = []


def pytest_configure(config):
    cgroup = os.environ.get("CPU_CGROUP", "")
    if not os.path.isfile(os.path.join(cgroup, "cpuacct.usage")):
        raise pytest.UsageError(f"suite_cpu: CPU_CGROUP={cgroup!r} is not a cgroup v1 cpuacct folder holding this "
                                "run (see bench/suite_cpu.py's docstring)")


def _usage() -> float:
    with open(os.path.join(os.environ["CPU_CGROUP"], "cpuacct.usage")) as f:
        return int(f.read()) / 1e9


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = _usage(), time.monotonic()
    yield
    ROWS.append({"id": item.nodeid, "cpu": round(_usage() - cpu, 2), "wall": round(time.monotonic() - wall, 2)})


def pytest_sessionfinish(session, exitstatus):
    if ROWS:
        with open(os.environ.get("CPU_ROWS", "suite_cpu.json"), "w") as f:
            json.dump({"total_cpu": round(sum(r["cpu"] for r in ROWS), 1), "rows": ROWS}, f, indent=0)


def report(path: str, top: int = 40) -> None:
    with open(path) as f:
        rows = json.load(f)["rows"]
    print(f"{sum(r['cpu'] for r in rows):.0f} CPU-seconds, {sum(r['wall'] for r in rows):.0f} s, {len(rows)} tests")
    modules = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        m = modules[r["id"].split("::")[0]]
        m[0], m[1], m[2] = m[0] + r["cpu"], m[1] + r["wall"], m[2] + 1
    for name, (cpu, wall, n) in sorted(modules.items(), key=lambda kv: -kv[1][0]):
        print(f"{cpu:7.1f} {wall:7.1f} {n:3d} {name}")
    for r in sorted(rows, key=lambda r: -r["cpu"])[:top]:
        print(f"{r['cpu']:7.1f} {r['wall']:7.1f} {r['id']}")


if __name__ == "__main__":
    report(sys.argv[1] if len(sys.argv) > 1 else "suite_cpu.json")
