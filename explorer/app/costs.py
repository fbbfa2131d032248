"""What a fine-tune will cost on this machine, said before its Start: the plan's estimate from the measured paces
(explorer.finetune.estimate), a measure asked of the worker where a pace is missing, and, when the run would be
long on a CPU, the faster choices: the shipped 0.2 M pair on the same data, or fewer epochs."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from explorer.finetune.estimate import Estimate, Needed, plan_work
from explorer.finetune.plan import Plan

# A run estimated longer than this on a CPU is offered the faster choices.
LONG_ON_CPU_S = 180.0
# How long the tab waits for a measure before it says the estimate comes later.
MEASURE_WAIT_S = 300.0


@dataclass(frozen=True)
class Cost:
    """A plan's cost as the tab says it: its estimate (None while measuring, or where none can be made), whether
    the worker is measuring for it, whether a run going on holds the measure back, and the faster choices
    when it is long on a CPU: the shipped pair's estimate on the same data, and fewer epochs with theirs."""

    estimate: Estimate | None
    measuring: bool = False
    held: bool = False
    shipped: Estimate | None = None
    fewer: tuple[int, Estimate] | None = None

    @property
    def final(self) -> bool:
        return not self.measuring


def fewer_epochs(plan: Plan, estimate_of: Callable[[Plan], Estimate | Needed | None],
                 within: float = LONG_ON_CPU_S) -> tuple[int, Estimate] | None:
    """The most epochs (fewer than the plan's) whose estimate is within `within` seconds, or 1 epoch when none
    is; None when the plan already has a single epoch."""
    epochs = plan_work(plan)[0].epochs
    best = None
    for k in range(epochs - 1, 0, -1):
        est = estimate_of(dataclasses.replace(plan, recipe={**plan.recipe, "epochs": k}))
        if not isinstance(est, Estimate):
            return None
        best = (k, est)
        if est.seconds <= within:
            break
    return best


def costs(plan: Plan, runner, on_cpu: bool, shipped_plan: Callable[[], Plan | None],
          wait_s: float = MEASURE_WAIT_S, poll_s: float = 0.5) -> Iterator[Cost]:
    """The plan's cost, as it becomes known: at once when this machine's paces cover it, else after the worker
    has measured what is missing (a Cost with `measuring` first); the last one is `final`. When it is long on a
    CPU, the shipped pair (`shipped_plan()`, None where it is the plan's own pair or not here) and fewer
    epochs come with it, measured the same way."""
    def estimate_of(p: Plan):
        return runner.paces.estimate(p, runner.supervisor.pid())

    plans = [plan]
    began = time.monotonic()
    while True:
        found = [estimate_of(p) for p in plans]
        if found[0] is None:  # a new model, a base whose card cannot be read
            yield Cost(None)
            return
        needed = [n for n in found if isinstance(n, Needed)]
        if not needed and len(plans) == 1 and on_cpu and found[0].seconds > LONG_ON_CPU_S:
            other = shipped_plan()
            if other is not None:
                plans.append(other)
                continue
        if not needed:
            break
        asked = all(runner.paces.measure(n, runner.send) for n in needed)
        if not asked or time.monotonic() - began > wait_s:  # a run going on: the measure waits for its end
            yield Cost(found[0] if isinstance(found[0], Estimate) else None, held=not asked)
            return
        yield Cost(found[0] if isinstance(found[0], Estimate) else None, measuring=True)
        time.sleep(poll_s)
    main = found[0]
    long = on_cpu and main.seconds > LONG_ON_CPU_S
    shipped = found[1] if len(found) > 1 and isinstance(found[1], Estimate) else None
    yield Cost(main, shipped=shipped if long else None, fewer=fewer_epochs(plan, estimate_of) if long else None)
