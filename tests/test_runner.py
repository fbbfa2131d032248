"""Fine-tune runs in a worker process through the app's runner (explorer.finetune.runner): pair runs, cancel,
failure, a worker without its app, the phases a run reports."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from explorer.app.costs import costs
from explorer.checkpoints.store import list_checkpoints, load_checkpoint
from explorer.core.protocol import BatchEnd, MemberStarted, Phase, PhaseBegun, Started
from explorer.data.folders import read_image_zip
from explorer.finetune.estimate import Needed, architecture, plan_work
from explorer.finetune.plan import Base, plan_job
from explorer.finetune.queue import Busy
from explorer.finetune.report import report
from explorer.finetune.runner import FineTuneRunner
from explorer.finetune.state import Estimate, RunStatus, apply_event
from explorer.model.predict import predict_logits
from explorer.training.recipe import TrainConfig
from explorer.training.tuning import fine_tune, fine_tune_recipe
from tests.helpers import ROOT, class_zip, pick, plan_members, worker_pid


@pytest.fixture
def out(tmp_path):
    return tmp_path / "finetuned"


def _no_leftovers(out: Path):
    return not out.exists() or not [p for p in out.iterdir() if p.name.startswith(".")]


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "EXPLORER_TRAIN_BACKEND": "tensorflow"}


@pytest.mark.slow
def test_a_pair_run_writes_two_loadable_checkpoints_from_one_split(tiny_checkpoints, cifar10, out):
    plan = plan_job(plan_members(tiny_checkpoints, "A", "B"), cifar10.subset(train=160, test=40, seed=2),
                    epochs=2, name="pair")
    runner = FineTuneRunner(out, environ=_env())
    # Before Start, as the tab says it: both architectures are new here, so the worker measures them first.
    assert isinstance(runner.paces.estimate(plan, None), Needed)
    said = list(costs(plan, runner, on_cpu=False, shipped_plan=lambda: None))
    assert said[0].measuring and said[-1].final and isinstance(planned := said[-1].estimate, Estimate)
    assert planned.measured == "measure" and planned.start_s == 0.0
    assert all(m.seconds > 0 for m in planned.members) and runner.paces.book.start_s() > 0
    runner.start(plan)
    with pytest.raises(Busy, match="already going on"):
        runner.start(plan)
    runner.wait(300)
    s = runner.snapshot()
    assert s.status == RunStatus.DONE, s.error
    assert s.device == "CPU" and s.backend == "tensorflow"
    assert s.planned == planned  # each model's work counted before Start is what the worker ran
    for m, w in zip(s.members, plan_work(plan), strict=True):
        t = m.training
        assert (t.steps, t.batch_size, t.train_images, t.validation_images, len(m.predictions)) == (
            w.steps, w.batch, w.fit, w.validation, w.test)
    after = runner.paces.estimate(plan, runner.supervisor.pid())  # the run's own pace now
    bases = plan_members(tiny_checkpoints, "A", "B")
    paces = [runner.paces.book.pace(architecture(b.card)) for b in bases]
    assert {p.measured for p in paces} == {"run"} and after.start_s == 0.0
    for m, w, pace, cost in zip(s.members, plan_work(plan), paces, after.members, strict=True):
        t = m.training  # the book now holds each run's own step pace, and the worker has that step compiled
        assert pace.step_s == round(max(t.timing.steps_s - t.timing.first_step_s, 1e-6) / (t.steps - 1)
                                    / t.batch_size, 6)
        assert (cost.training_s, cost.after_s) == pytest.approx(w.seconds(pace, compiled=True))
    cards = [load_checkpoint(m.checkpoint)[1] for m in s.members]
    assert [Path(m.checkpoint).name for m in s.members] == ["pair-A", "pair-B"]
    assert [c.variant for c in cards] == ["vanilla", "spt_lsa"]
    for card in cards:  # one split: the same images in both
        assert (card.dataset.train_images, card.dataset.validation_images,
                card.dataset.test_images) == (144, 16, 40)
        assert card.training.device == "CPU" and card.training.images_per_second > 0
    for m in s.members:
        assert [e.epoch for e in m.history] == [0, 1, 2] and len(m.predictions) == 40
        model, _ = load_checkpoint(m.checkpoint)
        logits = predict_logits(model, plan.dataset.x_test)
        assert logits.argmax(-1).tolist() == m.predictions
    rep = report(s.members, plan.dataset.y_test, plan.dataset.class_names)
    differ = [i for i in range(40) if s.members[0].predictions[i] != s.members[1].predictions[i]]
    assert rep.disagree == differ and len(rep.rows) == 2 and len(rep.per_class) == 10
    assert rep.per_class_columns == ["class", "A top-1", "B top-1", "B − A (points)"]
    assert [row[1] for row in rep.rows] == [f"{100 * m.metrics.test_top1:.1f} %" for m in s.members]
    assert _no_leftovers(out)


@pytest.mark.slow
def test_cancel_kills_the_worker_at_once_and_saves_nothing(tiny_checkpoints, cifar10, out):
    plan = plan_job(plan_members(tiny_checkpoints, "A", "B"), cifar10.subset(train=2000, test=40, seed=2), epochs=30,
                    name="cancelled")
    runner = FineTuneRunner(out, environ=_env())
    runner.start(plan)
    deadline = time.time() + 120
    while time.time() < deadline and not runner.snapshot().members[0].step:
        time.sleep(0.1)
    assert runner.snapshot().members[0].step > 0
    began = time.time()
    assert runner.cancel_as() == "cancelling"  # the worker stops it; the run's state says when
    # a progress line still in the pipe after the kill (a race seen in CI) does not undo the cancel
    apply_event(runner._state, BatchEnd(1, 2, 0, 1.0, 0.1, member=0))
    runner.wait(30)
    assert time.time() - began < 10
    s = runner.snapshot()
    assert s.status == RunStatus.CANCELLED and not s.running and s.error is None
    assert list_checkpoints(out) == [] and _no_leftovers(out)
    assert runner.cancel_as() == "none"


@pytest.mark.slow
def test_a_crashed_or_failing_worker_is_reported_and_saves_nothing(tiny_checkpoints, cifar10, out, tmp_path):
    import shutil
    runner = FineTuneRunner(out, environ=_env())
    # Killed from outside (the kernel's OOM killer, say) in the middle of a pair run:
    plan = plan_job(plan_members(tiny_checkpoints, "A", "B"), cifar10.subset(train=2000, test=40, seed=2), epochs=30)
    runner.start(plan)
    deadline = time.time() + 120
    while time.time() < deadline and not runner.snapshot().members[0].step:
        time.sleep(0.1)
    os.kill(worker_pid(runner), signal.SIGKILL)
    runner.wait(30)
    s = runner.snapshot()
    assert s.status == RunStatus.FAILED and "killed by signal 9" in s.error
    assert list_checkpoints(out) == [] and _no_leftovers(out)
    # A base checkpoint that broke after the app loaded it: the worker's own error comes back.
    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoints["spt_lsa"], broken)
    plan = plan_job([Base("B", "B: broken", str(broken), load_checkpoint(broken)[1])],
                    cifar10.subset(train=64, test=16), epochs=1)
    (broken / "model.weights.h5").write_bytes(b"not an h5 file")
    runner.start(plan)
    runner.wait(120)
    s = runner.snapshot()
    assert s.status == RunStatus.FAILED and "cannot load the model" in s.error
    assert list_checkpoints(out) == [] and _no_leftovers(out)


@pytest.mark.slow
def test_the_cli_with_only_base_and_dataset_runs_the_default_recipe(tiny_checkpoints, cifar10, tmp_path, capsys):
    from explorer.train import main
    x, y = pick(cifar10, ["cat", "dog", "ship"], 20)
    data = class_zip(tmp_path / "mine.zip", x, y, ["cat", "dog", "ship"])
    assert main(["--base", str(tiny_checkpoints["spt_lsa"]), "--dataset", str(data), "--out", str(tmp_path / "out"),
                 "--name", "cli", "--verbose", "0"]) == 0
    card = load_checkpoint(tmp_path / "out" / "cli")[1]
    n = card.dataset.train_images + card.dataset.validation_images
    expected = fine_tune_recipe(n, known_classes=True)  # cat, dog and ship are the base's classes
    assert card.training.recipe == expected.__dict__
    # the base's rows for cat, dog and ship, or the linear probe where it did better on the validation split
    head = card.training.start.head
    assert (head == "base rows" or head.startswith("linear probe")) and card.training.kept_epoch is not None
    assert "recipe: 30 epochs of batch 16, learning rate 0.0001, head auto" in capsys.readouterr().out
    assert "## Fine-tuning" in (tmp_path / "out" / "cli" / "README.md").read_text()


@pytest.mark.slow
def test_a_worker_whose_app_died_stops_on_its_own(tiny_checkpoints, cifar10, tmp_path):
    """No orphan keeps training when the app is killed without cancelling."""
    import subprocess
    import sys

    from explorer.finetune.jobfolder import write_job
    plan = plan_job(plan_members(tiny_checkpoints, "A"), cifar10.subset(train=2000, test=40, seed=2), epochs=30)
    job = tmp_path / "job"
    write_job(plan, job)
    app = subprocess.Popen(["bash", "-c", f"{sys.executable} -m explorer.finetune {job} >{tmp_path}/events 2>/dev/null "
                                          f"& echo $!; wait"], stdout=subprocess.PIPE, env=_env(), cwd=ROOT)
    worker = int(app.stdout.readline())
    events = tmp_path / "events"  # created by the shell once the worker starts

    def training():
        return events.exists() and '"kind": "batch"' in events.read_text()

    deadline = time.time() + 120
    while time.time() < deadline and not training():
        time.sleep(0.2)
    assert training(), "the worker never started training"
    app.kill()
    app.wait()
    deadline = time.time() + 15
    while time.time() < deadline and Path(f"/proc/{worker}").exists() and \
            Path(f"/proc/{worker}/stat").read_text().split()[2] != "Z":
        time.sleep(0.2)
    alive = Path(f"/proc/{worker}").exists() and Path(f"/proc/{worker}/stat").read_text().split()[2] != "Z"
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive, "the worker kept training after its app was gone"
    assert not (job / "staging").exists() or not any((job / "staging").iterdir())


def test_a_run_that_ended_keeps_its_final_state_after_the_next_one_starts(tmp_path):
    """A queued Start can replace the runner's state the moment a run ends: the visitor whose run it was
    still reads how it ended (cancelled, done), by its run id, not the next visitor's run."""
    from explorer.finetune.state import ENDED_KEPT, RunState
    runner = FineTuneRunner(tmp_path, environ=_env())
    runner._state = RunState(status=RunStatus.TRAINING, run_id=1, owner="x")
    runner._finish(RunStatus.CANCELLED)
    runner._state = RunState(status=RunStatus.STARTING, run_id=2, owner="y")
    ended, going = runner.snapshot(1), runner.snapshot(2)
    assert (ended.run_id, ended.status, ended.running, ended.owner) == (1, RunStatus.CANCELLED, False, "x")
    assert (going.run_id, going.status, runner.snapshot().run_id) == (2, RunStatus.STARTING, 2)
    for run_id in range(2, 3 + ENDED_KEPT):
        runner._state = RunState(status=RunStatus.TRAINING, run_id=run_id)
        runner._finish(RunStatus.DONE)
    assert runner.snapshot(1).run_id != 1 and runner.snapshot(2 + ENDED_KEPT).status == RunStatus.DONE  # bounded


@pytest.mark.usefixtures("eager_steps")
def test_a_fine_tune_tells_each_phase_and_the_status_line_says_it(tmp_path, cifar10, tiny_checkpoints):
    """Every phase of a model's fine-tune reaches `progress` in order, and the status line's headline says
    what the run is doing at each event (never a bare "step 0/0" before the first step)."""
    from dataclasses import replace

    from explorer.finetune.follow import run_fraction
    from explorer.finetune.state import MemberState, RunState
    from explorer.ui.finetune_text import run_status
    x, y = pick(cifar10, ["cat", "dog", "ship"], 12)
    ds = read_image_zip(class_zip(tmp_path / "three.zip", x, y, ["cat", "dog", "ship"]))
    events = []
    fine_tune(tiny_checkpoints["vanilla"], ds, TrainConfig(epochs=1, batch_size=8), tmp_path / "out", "phases",
              verbose=0, progress=events.append)
    kinds = [e.phase if isinstance(e, PhaseBegun) else e.KIND for e in events]
    first_batch = kinds.index("batch")
    assert kinds[:first_batch] == ["choosing the head", "epoch", "compiling"], kinds
    assert [k for k in kinds[first_batch:] if k not in ("batch", "epoch")] == ["evaluating", "evaluating", "saving"]

    s = RunState(status=RunStatus.STARTING, description="fine-tune", started=1.0,
                 members=[MemberState("A", "A: tiny-vanilla"), MemberState("B", "B: tiny-spt_lsa")])
    said = [run_status(s, tmp_path).split("\n")[0]]
    apply_event(s, Started("CPU", "jax"))
    for event in [MemberStarted(member=0)] + [replace(e, member=0) for e in events]:
        apply_event(s, event)
        said.append(run_status(s, tmp_path).split("\n")[0])
        assert "step 0/0" not in run_status(s, tmp_path)
    heads = list(dict.fromkeys(line.split(" · ")[0] for line in said))
    assert heads == ["**starting** the training process", "**loading** A", "**choosing** A's head", "**compiling** A",
                     "**training** A", "**evaluating** A", "**saving** A"], heads
    assert "B: tiny-spt_lsa: waits its turn" in run_status(s, tmp_path)
    # A saving: the last 2 % of A's half, moving with time (never standing still), B's half not begun
    saving = s.members[0].since
    assert 0.49 == run_fraction(s, saving) < run_fraction(s, saving + 5) < run_fraction(s, saving + 60) <= 0.5
    assert " · 49." in run_status(s, tmp_path, now=saving + 1).split("\n")[0]
    apply_event(s, MemberStarted(member=1))
    # B's loading starts its half of the bar and moves on with time, never back.
    loading = s.members[1].since
    assert run_status(s, tmp_path).startswith("**loading** B")
    last = run_fraction(s, loading + 60)
    assert 0.5 < run_fraction(s, loading) < run_fraction(s, loading + 5) < last < 0.6
    apply_event(s, PhaseBegun(Phase.HEAD, member=1))
    assert run_fraction(s, s.members[1].since) >= last
    assert run_status(s, tmp_path, loading=12.0).startswith("**loading** the new models into the slots")
    assert " · 12 s" in run_status(s, tmp_path, loading=12.0)
