"""A fine-tune request validated into a plan (explorer.finetune.plan), and the report of a run without a test
split (explorer.finetune.report)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from explorer.data.datasets import Dataset
from explorer.data.folders import read_image_zip
from explorer.finetune.plan import JobError, Limits, plan_job
from explorer.finetune.report import report
from explorer.training.runs import recipe_for
from explorer.training.tuning import fine_tune_recipe
from tests.helpers import class_zip, pick, plan_members


@pytest.mark.parametrize("changes, message", [
    (dict(epochs=-1), "epochs must be between 1 and 30 \\(0 = auto\\)"), (dict(epochs=10**6), "epochs must be"),
    (dict(epochs=2.5), "whole number"), (dict(learning_rate=-1.0), "learning rate"),
    (dict(batch_size=5000), "batch size"), (dict(images=10**9), "images must be between"),
    (dict(images=1), "images must be between"), (dict(name="../../etc"), "run name"),
    (dict(scratch=("huge", "spt_lsa")), "choose a preset")])
def test_plans_refuse_bad_requests(tiny_checkpoints, cifar10, changes, message):
    kwargs = dict(images=64)
    kwargs.update(changes)
    scratch = kwargs.pop("scratch", None)
    with pytest.raises(JobError, match=message):
        plan_job([] if scratch else plan_members(tiny_checkpoints, "A", "B"), cifar10, scratch=scratch,
                 limits=Limits(), **kwargs)


def test_every_name_a_plan_gives_is_a_checkpoint_name(tiny_checkpoints, cifar10):
    """One name rule (checkpoints.NAME_MAX): a typed run name leaves room for -A and -B; a name made from a
    long base's name and the data's is cut to fit, never refused when the checkpoint is written."""
    from explorer.checkpoints.store import NAME_MAX, validate_name
    longest = "r" * (NAME_MAX - 2)
    plan = plan_job(plan_members(tiny_checkpoints, "A", "B"), cifar10, images=100, name=longest)
    assert [m.name for m in plan.members] == [longest + "-A", longest + "-B"]
    with pytest.raises(JobError, match=f"run name.*at most {NAME_MAX - 2}"):
        plan_job(plan_members(tiny_checkpoints, "A", "B"), cifar10, images=100, name=longest + "r")
    members = plan_members(tiny_checkpoints, "A", "B")
    for card in (m.card for m in members):
        card.name = "b" * NAME_MAX  # a base named as long as a name may be, both the same
    plan = plan_job(members, cifar10, images=100)
    names = [m.name for m in plan.members]
    assert names[0] != names[1] and all(validate_name(n) == n for n in names), names
    assert names[0].endswith("-A") and names[1].endswith("-B")


def test_a_pair_plan_shares_one_split_and_names_both(tiny_checkpoints, cifar10):
    plan = plan_job(plan_members(tiny_checkpoints, "A", "B"), cifar10, images=100, name="mine")
    assert [m.name for m in plan.members] == ["mine-A", "mine-B"]
    assert len(plan.dataset.x_train) == 100 and len(plan.dataset.x_test) == 20
    assert plan.recipe == {"epochs": None, "learning_rate": None, "batch_size": None, "freeze_backbone": False}
    assert recipe_for(plan.recipe, 100, False) == fine_tune_recipe(100)
    assert recipe_for(plan.recipe, 100, False, known_classes=True) == fine_tune_recipe(100, known_classes=True)
    assert [m.classes for m in plan.members] == [cifar10.class_names] * 2
    with pytest.raises(JobError, match="images are 16x16 but the model takes 32x32"):
        plan_job(plan_members(tiny_checkpoints, "A"), Dataset("small", np.zeros((4, 16, 16, 3), np.uint8),
                                                         np.array([0, 1, 0, 1]), np.zeros((0, 16, 16, 3), np.uint8),
                                                         np.zeros(0, int), ["a", "b"]))


def test_a_plans_splits_are_its_runs_and_say_how_many_images_a_class_would_validate_on_enough(
        tiny_checkpoints, tmp_path):
    """plan_splits counts what a run of the plan trains and validates on (fit's own training_split), and
    images_per_class_for is the fewest images a class for a validation split of that size."""
    from explorer.data.batches import training_split
    from explorer.finetune.plan import images_per_class_for, plan_splits
    need = images_per_class_for(20, 3)
    got = []
    for n in (need - 1, need):
        y = np.repeat(np.arange(3), n)
        x = np.zeros((len(y), 32, 32, 3), np.uint8)
        plan = plan_job(plan_members(tiny_checkpoints, "A", "B"),
                        read_image_zip(class_zip(tmp_path / f"{n}.zip", x, y, ["a", "b", "c"])))
        split = plan_splits(plan)
        (fit, _), val = training_split(plan.dataset, recipe_for(plan.recipe, len(plan.dataset.x_train), False))
        assert (split.train, split.validation, split.test) == (len(fit), len(val[0]), len(plan.dataset.x_test))
        # The status line says that split, the one each model's card records (not all training images as "train").
        said = f"({split.train} train + {split.validation} validation / {split.test} test images, 3 classes)"
        assert said in plan.description, plan.description
        got.append(split.validation)
    assert got[0] < 20 <= got[1], (need, got)


def test_the_worker_reads_back_the_plan_the_app_wrote(tiny_checkpoints, cifar10, tmp_path):
    from explorer.finetune.jobfolder import read_job, write_job
    for plan in (plan_job(plan_members(tiny_checkpoints, "A", "B"), cifar10, images=100, epochs=2, freeze=True),
                 plan_job([], cifar10, images=100, scratch=("tiny", "spt_lsa"), name="new")):
        write_job(plan, tmp_path / plan.members[0].name)
        back = read_job(tmp_path / plan.members[0].name)
        assert (back.members, back.recipe, back.description, back.scratch) == \
            (plan.members, plan.recipe, plan.description, plan.scratch)
        for part in ("x_train", "y_train", "x_test", "y_test"):
            np.testing.assert_array_equal(getattr(back.dataset, part), getattr(plan.dataset, part))
        assert (back.dataset.name, back.dataset.class_names, back.dataset.source, back.dataset.note) == \
            (plan.dataset.name, plan.dataset.class_names, plan.dataset.source, plan.dataset.note)


def test_a_zip_too_small_to_judge_is_refused_before_training(tiny_checkpoints, cifar10, tmp_path):
    """One image per class (which, trained, would report "On 0 test images"), and four per class
    of three classes (a held-out part of 3): refused with how many images per class would do."""
    for per_class, classes, need in ((1, ["cat", "dog", "ship"], 18), (4, ["cat", "dog", "ship"], 18),
                                     (1, list(cifar10.class_names), 3)):
        x, y = pick(cifar10, classes, per_class)
        ds = read_image_zip(class_zip(tmp_path / f"{per_class}-{len(classes)}.zip", x, y, classes))
        with pytest.raises(JobError, match=rf"would hold {len(ds.x_test)}, too few to judge them by\. Give at least "
                                           rf"{need} images per class \({need * len(classes)} in all; the smallest "
                                           rf"class here has {per_class}\).*Train on all images"):
            plan_job(plan_members(tiny_checkpoints, "A", "B"), ds)
    x, y = pick(cifar10, ["cat", "dog", "ship"], 18)  # the number it asked for is enough
    ds = read_image_zip(class_zip(tmp_path / "enough.zip", x, y, ["cat", "dog", "ship"]))
    assert len(plan_job(plan_members(tiny_checkpoints, "A", "B"), ds).dataset.x_test) >= 10
    capped = cifar10.subset(test=9, seed=0)  # a small held-out part however it came about
    with pytest.raises(JobError, match="would hold 9"):
        plan_job(plan_members(tiny_checkpoints, "A", "B"), capped)


def test_training_on_all_images_says_there_is_no_test_score(tiny_checkpoints, cifar10, tmp_path):
    from explorer.finetune.plan import ZIP, job_data
    x, y = pick(cifar10, ["cat", "dog", "ship"], 2)
    data = class_zip(tmp_path / "two.zip", x, y, ["cat", "dog", "ship"])
    ds = job_data(ZIP, str(data), None, Limits(), 32, train_on_all=True)
    assert len(ds.x_train) == 6 and len(ds.x_test) == 0
    plan = plan_job(plan_members(tiny_checkpoints, "A", "B"), ds, train_on_all=True)
    assert "no test: all trained on, no test score" in plan.description
    from explorer.core.card import Metrics, Training
    from explorer.finetune.state import MemberState
    members = [MemberState(t, t, metrics=Metrics(), training=Training(wall_time_s=1), predictions=[])
               for t in ("A", "B")]
    rep = report(members, np.zeros(0, int), ["cat", "dog", "ship"])
    assert rep.summary.startswith("**No test score**") and rep.rows[0][1] == "–"


def test_a_zip_with_a_broken_image_says_it_was_left_out_from_start_to_report(tiny_checkpoints, cifar10, tmp_path):
    """The plan's description (the status line while it runs) counts the image left out; the report at its end,
    and the Trust tab's name for the zip, say which one and why."""
    import zipfile

    from explorer.analysis.trust import labelled_zip
    from explorer.core.card import Metrics, Training
    from explorer.finetune.report import run_report
    from explorer.finetune.state import MemberState
    x, y = pick(cifar10, ["cat", "dog", "ship"], 18)
    path = class_zip(tmp_path / "mine.zip", x, y, ["cat", "dog", "ship"])
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("set/dog/broken.jpg", b"\xff\xd8 the rest never arrived")
    plan = plan_job(plan_members(tiny_checkpoints, "A", "B"), read_image_zip(path))
    assert "3 classes; 1 unreadable image left out)" in plan.description
    members = [MemberState(t, t, metrics=Metrics(), training=Training(wall_time_s=1, validation_images=5),
                           predictions=list(plan.dataset.y_test)) for t in ("A", "B")]
    note = run_report(SimpleNamespace(members=members), plan).note
    assert "⚠ 1 of 55 images could not be read and were left out (set/dog/broken.jpg is not a readable" in note
    named = labelled_zip(path, ["cat", "dog", "ship"]).name
    assert named.startswith("mine.zip (1 of 55 images could not be read") and "broken.jpg" in named


def test_a_published_checkpoint_keeps_the_jobs_held_out_images(tiny_checkpoints, cifar10, tmp_path):
    """What the app's whole-set tools judge a model of classes of its own by: the job's test split, beside
    each member's weights once the job is published (none for a run trained on all of its images)."""
    import shutil

    from explorer.checkpoints.held_out import read_held_out
    from explorer.finetune.jobfolder import publish, staging, write_job
    plan = plan_job(plan_members(tiny_checkpoints, "A", "B"), cifar10.subset(train=200, test=30, seed=4), epochs=1)
    job = tmp_path / "job"
    write_job(plan, job)
    folders = [m.name for m in plan.members]
    for folder, path in zip(folders, tiny_checkpoints.values(), strict=True):
        shutil.copytree(path, staging(job) / folder)
    moved = publish(job, folders, tmp_path / "out")
    for target in moved:
        held = read_held_out(target, plan.dataset.class_names)
        assert held is not None and len(held.y_test) == 30
        np.testing.assert_array_equal(held.x_test, plan.dataset.x_test)
        np.testing.assert_array_equal(held.y_test, plan.dataset.y_test)
