"""The Fine-tune tab's handlers called directly (no server): the form's plan and every refusal (values, zips,
data), Cancel, the hardware note, and what a run going on redraws."""

from __future__ import annotations

import zipfile

import gradio as gr
import pytest
from PIL import Image

from explorer.core.card import Epoch
from explorer.finetune import follow
from explorer.finetune.plan import ZIP
from explorer.finetune.state import RunState, RunStatus
from explorer.ui import AppState, build_demo
from explorer.ui.finetune import SCRATCH, FinetuneTab
from explorer.ui.finetune_text import QUEUE_DROPPED
from tests.handlers import A, B, fine_tune_form, ui
from tests.helpers import class_zip, pick


def built_finetune(ex: AppState) -> FinetuneTab:
    """The Fine-tune tab built on a page of its own: its run's handlers name the components they change."""
    from explorer.ui import finetune
    from explorer.ui.context import Page
    with gr.Blocks():
        page = Page(gr.Dropdown(), gr.Dropdown(), gr.File(), loaded=(gr.State(), gr.State()),
                    cards=(gr.Markdown(), gr.Markdown()))
        return finetune.build(ex, page)


def _zip(tmp_path, members):
    path = tmp_path / "data.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(path)


@pytest.mark.parametrize("changes, message", [
    (dict(epochs=-1), "epochs must be between 1 and"), (dict(epochs=10**6), "epochs must be between"),
    (dict(lr=-1.0), "learning rate"), (dict(batch_size=-2), "batch size"),
    (dict(images=10**9), "images must be between"), (dict(images=1), "images must be between"),
    (dict(epochs=2.5), "whole number"), (dict(name="../../etc"), "run name"),
    (dict(data=ZIP), "upload a zip"), (dict(what=SCRATCH, preset="huge"), "choose a preset"),
    (dict(ref_b=None), "slot B holds no model"), (dict(what="finetuned/nothing"), "could not|not"),
    (dict(data="imagenet"), "unknown data source"),
])
def test_fine_tune_form_is_validated(ex, changes, message):
    with pytest.raises(gr.Error, match=message):
        ui(ex).finetune.finetune_plan(**fine_tune_form(**changes))


def test_fine_tune_form_plans(ex):
    pair = ui(ex).finetune.finetune_plan(**fine_tune_form(epochs=0, lr=0, batch_size=0, images=300))
    assert [m.tag for m in pair.members] == ["A", "B"] and len(pair.dataset.x_train) == 300
    assert pair.recipe == {"epochs": None, "learning_rate": None, "batch_size": None, "freeze_backbone": False}
    alone = ui(ex).finetune.finetune_plan(**fine_tune_form(what=A))
    assert [(m.tag, m.base) for m in alone.members] == [("A", str((ex.root / A).resolve()))]
    new = ui(ex).finetune.finetune_plan(**fine_tune_form(what=SCRATCH, variant="lsa"))
    assert new.scratch and new.members[0].variant == "lsa" and new.members[0].base is None


def test_fine_tune_zip_problems(ex, tmp_path):
    png = Image.new("RGB", (8, 8))
    import io
    buf = io.BytesIO()
    png.save(buf, format="PNG")
    cases = [({"a.png": buf.getvalue(), "b.png": buf.getvalue()}, "needs class folders"),
             ({"../x/a.png": buf.getvalue(), "c/b.png": buf.getvalue()}, "unsafe member path")]
    for members, message in cases:
        with pytest.raises(gr.Error, match=message):
            ui(ex).finetune.finetune_plan(**fine_tune_form(data=ZIP, zip_file=_zip(tmp_path, members)))
    bomb = _zip(tmp_path, {"a/x.png": b"\0" * (300 * 2**20), "b/y.png": buf.getvalue()})
    assert (tmp_path / "data.zip").stat().st_size < 2 * 2**20  # a real bomb: tiny on disk
    with pytest.raises(gr.Error, match="expands to 300 MiB; the limit is 200 MiB"):
        ui(ex).finetune.finetune_plan(**fine_tune_form(data=ZIP, zip_file=bomb))


def test_cancel_without_a_run(ex):
    assert ui(ex).finetune.cancel() == "No run is going on."


def test_a_page_that_opens_with_no_run_of_its_visitors_going_on_changes_nothing(ex):
    """follow_own runs as every page opens: with no run of the visitor's going on it yields one update that
    changes nothing (a generator that yields nothing would blank the status line, the plots and the slots)."""
    tab = built_finetune(ex)
    updates = list(tab.view.follow_own("cifar10-vanilla", "cifar10-spt_lsa"))
    assert len(updates) == 1
    [(component, value)] = updates[0].items()
    assert component is tab.view.outputs.status and value == gr.skip()


def test_a_page_that_opens_while_its_visitors_run_goes_on_or_after_it_ended_unseen_shows_it(ex, monkeypatch):
    """A run is not tied to the page that started it: a page its visitor opens while it goes on gets the run's
    own status and bar; one opened after it ended with no page following it shows how it ended, once; a run
    the runner no longer knows shows nothing. The tab keeps only the test split the report needs."""
    from explorer.app.starts import LastStart
    from explorer.finetune.state import MemberState, RunState
    tab = built_finetune(ex)
    plan = tab.finetune_plan(**fine_tune_form(epochs=1, images=64))
    state = RunState(status=RunStatus.TRAINING, members=[MemberState("A", m.label) for m in plan.members],
                     description=plan.description, started=1.0, run_id=7)
    monkeypatch.setattr(ex.runner, "snapshot", lambda run_id=None: state)
    out = tab.view.outputs
    nothing = [{out.status: gr.skip()}]
    assert list(tab.view.follow_own(A, B)) == nothing  # no Start here
    ex.starts.keep(None, LastStart(plan, set())).began(7)
    kept = ex.starts.last(None).plan.dataset
    assert len(kept.x_train) == 0 and len(kept.x_test) == len(plan.dataset.x_test) > 0
    first = next(tab.view.follow_own(A, B))
    assert plan.description in first[out.status] and first[out.bar]
    state.status, state.error = RunStatus.FAILED, "the training process ran out of memory"
    ended = list(tab.view.follow_own(A, B))
    assert "ran out of memory" in ended[-1][out.status] and ended[-1][out.bar] == ""
    assert list(tab.view.follow_own(A, B)) == nothing  # shown once
    ex.starts.keep(None, LastStart(plan, set())).began(8)  # a run the runner has forgotten (it keeps the last few)
    assert list(tab.view.follow_own(A, B)) == nothing and ex.starts.last(None) is None


def test_a_page_that_opens_while_its_visitors_start_waits_in_the_queue_takes_up_its_place(ex, monkeypatch):
    """A Start waiting in the shared queue is not tied to its page either: the visitor's next page shows its
    place and starts it when its turn comes; one dropped while no page asked says so, once. The visitor's
    own bases stay protected from pruning while it waits, and no longer once it is gone."""
    from explorer.finetune.queue import QueuePlace, Ticket
    tab = built_finetune(ex)
    plan = tab.finetune_plan(**fine_tune_form(epochs=1, images=64))
    out, runner = tab.view.outputs, ex.runner
    protected = {}
    monkeypatch.setattr(ex.visitors, "protect_bases", lambda key, refs: protected.__setitem__(key, refs))
    ticket, turns = Ticket(1, None, 0.0), [False, True]
    monkeypatch.setattr(runner, "ready", lambda t: turns.pop(0))
    monkeypatch.setattr(runner, "position", lambda t: QueuePlace(1, 1, 30.0, 90.0))
    monkeypatch.setattr(runner, "start", lambda plan, owner, out, t: setattr(t, "started", 9) or 9)
    monkeypatch.setattr(follow, "QUEUE_POLL_S", 0.0)
    start = ex.starts.new(plan, {"finetuned/me/mine"})
    start.ticket = ticket
    ex.starts.keep(None, start)
    assert protected[id(start)] == {"finetuned/me/mine"}
    opened = tab.view.follow_own(A, B)
    first = next(opened)
    assert "your place in the queue: **1 of 1**" in first[out.status]
    # the run's box shows how far the wait has come: 90 s waited of 90 + 30
    assert 'aria-valuenow="75.0"' in first[out.bar] and "waiting for your turn · 1 of 1 in the queue" in first[out.bar]
    monkeypatch.setattr(runner, "snapshot",
                        lambda run_id=None: RunState(run_id=9, status=RunStatus.FAILED, error="boom"))
    assert "boom" in list(opened)[-1][out.status] and start.run_id == 9
    assert ex.starts.last(None) is None and protected[id(start)] is None
    gone = ex.starts.keep(None, ex.starts.new(plan, set()))
    gone.ticket = Ticket(2, None, 0.0, dropped=True)
    assert list(tab.view.follow_own(A, B)) == [{out.status: QUEUE_DROPPED, out.bar: ""}] and protected[id(gone)] is None
    assert len(list(tab.view.follow_own(A, B))) == 1  # said once


def test_fine_tune_form_refuses_a_zip_too_small_to_judge_unless_told_to_train_on_all(ex, tmp_path):
    import io
    members = {}
    for c in ("cat", "dog"):
        buf = io.BytesIO()
        Image.new("RGB", (32, 32), "red" if c == "cat" else "blue").save(buf, format="PNG")
        members[f"set/{c}/0.png"] = buf.getvalue()
    form = fine_tune_form(data=ZIP, zip_file=_zip(tmp_path, members), images=0)
    with pytest.raises(gr.Error, match="would hold 0, too few to judge them by. Give at least 23 images per class"):
        ui(ex).finetune.finetune_plan(**form)
    plan = ui(ex).finetune.finetune_plan(**form, train_on_all=True)
    assert len(plan.dataset.x_train) == 2 and len(plan.dataset.x_test) == 0


def test_the_tab_says_before_a_start_when_a_zip_is_too_small_for_the_fine_tune_to_decide(ex, cifar10, tmp_path):
    """3 classes of 20 images: 12 held out to test, 5 of the other 48 to validate (the numbers of the plan's own
    split), too few to tell a fine-tuned model from its start, and the note says so and what would do; 3
    classes of 200 get no note, nor CIFAR, nor a form a Start refuses."""
    import numpy as np

    from explorer.finetune.plan import images_per_class_for, plan_splits
    from explorer.training.recipe import FINE_TUNE
    tab, classes = ui(ex).finetune, ["cat", "dog", "ship"]
    paced(ex, step_s=0.0001)  # this machine's paces, as a measure leaves them: no worker is asked here
    x, y = pick(cifar10, classes, 20)
    form = fine_tune_form(data=ZIP, zip_file=str(class_zip(tmp_path / "small.zip", x, y, classes)), epochs=0, lr=0,
                          batch_size=0, images=0)
    split = plan_splits(tab.finetune_plan(**form))
    assert (split.train, split.validation, split.test) == (43, 5, 12)
    note = said(tab, form)
    assert note.startswith("⚠ **Too few images for the fine-tune to decide.** Of 60 images, 12 to test, 5 to "
                           "validate and 43 to train each model."), note
    need = images_per_class_for(FINE_TUNE.min_validation_images, len(classes))
    assert f"on 5 (under {FINE_TUNE.min_validation_images}) one image is worth 20 points" in note
    assert f"the start on a tie. Add images: {need} a class give {FINE_TUNE.min_validation_images} to validate." in note
    alone = said(tab, {**form, "what": A})
    assert "to train the model." in alone
    assert said(tab, {**form, "epochs": -1}) == ""  # refused: the Start says why
    assert said(tab, fine_tune_form()) == ""  # CIFAR
    x, y = pick(cifar10, classes, 100)
    x, y = np.concatenate([x, x[:, :, ::-1]]), np.concatenate([y, y])  # 200 a class
    big = {**form, "zip_file": str(class_zip(tmp_path / "big.zip", x, y, classes))}
    assert plan_splits(tab.finetune_plan(**big)).validation >= FINE_TUNE.min_validation_images
    assert said(tab, big).startswith("**This run: about")  # no warning: the cost alone


def paced(ex: AppState, step_s: float) -> None:
    """Paces for every checkpoint of `ex` in its runner's book, as a measure of `step_s` a trained image leaves
    them (a forward pass a third of that, a 2 s compile)."""
    from explorer.finetune.estimate import Pace, architecture
    for ref in ex.choices():
        ex.runner.paces.book.record(architecture(ex.store.local_card(ref)),
                               Pace(step_s, 2.0, step_s / 3, 0.5, 0.2, "measure"))


def said(tab: FinetuneTab, form: dict) -> str:
    """The note under the form once it is final (what CostNote.note yields last)."""
    from explorer.ui.finetune_cost import CostNote
    return list(CostNote(tab).note(**form))[-1][0]


def test_before_a_start_the_tab_says_what_the_run_costs_here_and_offers_fewer_epochs_when_long(ex, cifar10,
                                                                                                  tmp_path):
    """The estimate from this machine's paces, each model's part and where the paces come from; a run long on a
    CPU gets fewer epochs one click away, the most whose estimate is within the limit, and the click puts them
    in the form; while a pace is missing and a run is going on, it says the estimate comes after that run."""
    from explorer.app.costs import LONG_ON_CPU_S
    from explorer.finetune.estimate import plan_work
    from explorer.ui.finetune_cost import CostNote
    tab, classes = ui(ex).finetune, ["cat", "dog", "ship"]
    x, y = pick(cifar10, classes, 60)
    form = fine_tune_form(data=ZIP, zip_file=str(class_zip(tmp_path / "c.zip", x, y, classes)), epochs=0, lr=0,
                          batch_size=0, images=0)
    paced(ex, step_s=0.0001)
    quick = said(tab, form)
    assert "**This run: about" in quick and "(A " in quick and " + B " in quick
    assert "a few steps of each model measured here" in quick and "long on a CPU" not in quick
    paced(ex, step_s=0.2)  # a slow machine: about 800 s a model
    note, pair, fewer = list(CostNote(tab).note(**form))[-1]
    assert "That is long on a CPU" in note and not pair["visible"]  # the shipped pair is in the slots already
    epochs = plan_work(tab.finetune_plan(**form))[0].epochs
    k = int(fewer["value"].split()[0])
    assert fewer["visible"] and 1 <= k < epochs and f"{k} epoch" in note
    within = tab.finetune_plan(**{**form, "epochs": k})
    estimate = ex.runner.paces.estimate(within, ex.runner.supervisor.pid())
    assert k == 1 or estimate.seconds <= LONG_ON_CPU_S


def test_the_fine_tune_tab_says_when_a_gpu_would_sit_idle(ex, tmp_path, monkeypatch):
    """A GPU's driver files present, JAX's CUDA plugin missing (as in this test environment: JAX's CPU
    wheel only): the tab says runs train on the CPU and what to change."""
    gpu = tmp_path / "proc" / "driver" / "nvidia" / "gpus" / "0000:00:1e.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text("Model: NVIDIA L4\n")
    monkeypatch.setenv("EXPLORER_DRIVER_ROOT", str(tmp_path))
    monkeypatch.delenv("EXPLORER_TRAIN_BACKEND", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    import importlib.util
    if any(importlib.util.find_spec(n) for n in ("jax_cuda12_plugin", "jax_cuda13_plugin")):
        pytest.skip("JAX's CUDA plugin is installed here")
    here = AppState(root=ex.root, data_dir=ex.data_dir)  # the settings are read as the app starts
    notes = [c["props"]["value"] for c in build_demo(here).config["components"]
             if c["props"].get("elem_id") == "ft-hardware"]
    assert len(notes) == 1 and "has an NVIDIA GPU, but runs will train on its CPU" in notes[0]
    assert "pip install -r requirements-gpu.txt" in notes[0]


def test_the_tau_panel_of_a_run_says_whose_tau_comes_and_never_that_there_is_no_lsa(ex):
    from explorer.analysis.plots import NO_LSA_TEXT
    from explorer.finetune.state import MemberState, RunState
    tab = built_finetune(ex)
    plan = tab.finetune_plan(**fine_tune_form(epochs=1, images=64))
    state = RunState(status=RunStatus.TRAINING, members=[MemberState("A", m.label) for m in plan.members],
                     description=plan.description, started=1.0)
    state.members[0].history = [Epoch(epoch=1, loss=1.0, tau=[])]  # A (vanilla) trains first: no tau
    changed = tab.view.run_outputs(state, plan, A, B)
    out = tab.view.outputs  # a run going on changes its status and plots, nothing else
    assert set(changed) == {out.status, out.curves, out.tau} and len(out.components()) == 15
    assert changed[out.curves]["visible"] and changed[out.tau]["visible"]  # hidden until a run draws them
    # Both sent as pictures made where they were drawn (Gradio would make them on the server's event loop).
    assert all(changed[p]["value"].type == "matplotlib" and changed[p]["value"].plot.startswith("data:image/")
               for p in (out.curves, out.tau))
    tau = tab.view.figures(state, plan)[1]
    texts = [t.get_text() for t in tau.axes[0].texts]
    assert texts and NO_LSA_TEXT not in texts and plan.members[1].label in texts[0], texts
    alone = tab.finetune_plan(**fine_tune_form(what=A, epochs=1, images=64))
    state.members = [MemberState("A", alone.members[0].label)]
    tau = tab.view.figures(state, alone)[1]
    assert [t.get_text() for t in tau.axes[0].texts] == ["no LSA layers in the models being fine-tuned"]

