"""Checkpoints hold the model alone: no optimizer state in model.weights.h5, no compile config. New ones are
written that way, `python -m explorer.checkpoints lean` rewrites old ones, to the bit, and the shipped ones
are lean."""

import hashlib
import json
import os
import re
import shutil

import h5py
import numpy as np
import pytest

from explorer.checkpoints.store import (
    CARD,
    OPTIMIZER_GROUP,
    Card,
    CheckpointError,
    list_checkpoints,
    load_folder,
    main,
    make_lean,
    write_checkpoint,
)
from explorer.data.datasets import sample_set
from explorer.model.models import build_vit
from explorer.training.recipe import TrainConfig, compile_for_run
from tests.helpers import ROOT, tiny_config

SHIPPED = ROOT / "checkpoints" / "cifar10-spt_lsa"
CHECK_SET = 200  # the cards' check set: the bundled sample's first 200 images


def has_optimizer(folder) -> bool:
    with h5py.File(folder / "model.weights.h5", "r") as f:
        return OPTIMIZER_GROUP in f


def compile_config(folder) -> dict:
    return json.loads((folder / "config.json").read_text()).get("compile_config")


def weights_contents(folder) -> dict:
    """Every group and dataset of model.weights.h5 but the optimizer's: attributes, dtype, shape and bytes."""
    out = {}
    with h5py.File(folder / "model.weights.h5", "r") as f:
        out[""] = sorted((k, repr(v)) for k, v in f.attrs.items())

        def visit(name, obj):
            if name.split("/")[0] != OPTIMIZER_GROUP:
                data = (obj.dtype.str, obj.shape, obj[()].tobytes()) if isinstance(obj, h5py.Dataset) else None
                out[name] = (sorted((k, repr(v)) for k, v in obj.attrs.items()), data)
        f.visititems(visit)
    return out


def tree(root) -> dict:
    """Every file under `root`: its bytes' hash and modification time."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def logits(folder, x) -> np.ndarray:
    model, _ = load_folder(folder)
    return model.predict(x, batch_size=100, verbose=0)


def same_weights(a, b) -> bool:
    return all(np.array_equal(u, v) for u, v in zip(a.get_weights(), b.get_weights(), strict=True))


def trained_one_step(model, steps: int = 1):
    """`model` compiled as a training run compiles it (AdamW on the warmup-cosine schedule) and trained for
    `steps` steps on the bundled sample, so its optimizer holds moments."""
    import keras
    sample = sample_set()
    if not model.compiled:
        compile_for_run(model, TrainConfig(), 10, total_steps=steps)
        model.run_eagerly = True  # a step or two: tracing the train step would cost more than they do
    x, y = sample.x_test[:8 * steps], keras.utils.to_categorical(sample.y_test[:8 * steps], 10)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    return model


def save_fat(model, folder, card_from):
    """A fat checkpoint, what make_lean slims: Keras' save of the compiled model (optimizer variables and
    compile config included) beside `card_from`'s card and model card."""
    import keras
    keras.saving.save_model(model, str(folder), zipped=False)
    for name in (CARD, "README.md"):
        shutil.copyfile(card_from / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def fat(tmp_path_factory):
    """The shipped SPT/LSA model after one more training step, saved fat, with its card."""
    model, _ = load_folder(SHIPPED)
    return save_fat(trained_one_step(model), tmp_path_factory.mktemp("fat") / "cifar10-spt_lsa", SHIPPED)


@pytest.mark.parametrize("folder", list_checkpoints(ROOT / "checkpoints") + list_checkpoints(ROOT / "ablation"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_checkpoint_is_lean(folder):
    assert not has_optimizer(folder), f"{folder} holds optimizer state: python -m explorer.checkpoints lean"
    assert not compile_config(folder)


def test_lean_keeps_every_weight_and_logit_to_the_bit(fat, tmp_path):
    import keras
    folder = shutil.copytree(fat, tmp_path / "cifar10-spt_lsa")
    assert has_optimizer(folder) and compile_config(folder)["optimizer"]["class_name"] == "AdamW"
    x = sample_set().x_test[:CHECK_SET]
    before, weights, files = logits(folder, x), weights_contents(folder), tree(folder)
    config = json.loads((folder / "config.json").read_text())

    assert make_lean(folder) is True

    assert np.array_equal(logits(folder, x), before)
    assert weights_contents(folder) == weights and not has_optimizer(folder)
    assert json.loads((folder / "config.json").read_text()) == {**config, "compile_config": {}}
    after = tree(folder)
    assert {name: after[name] for name in (CARD, "README.md", "metadata.json")} == \
           {name: files[name] for name in (CARD, "README.md", "metadata.json")}
    assert set(after) == set(files)  # no temporary file left
    assert (folder / "model.weights.h5").stat().st_size < (fat / "model.weights.h5").stat().st_size / 2
    # Plain Keras (the model card's "How to use") loads it too: uncompiled, the same logits.
    plain = keras.saving.load_model(str(folder))
    assert not plain.compiled and same_weights(plain, load_folder(folder)[0])


def test_lean_is_idempotent_over_a_tree_of_folders(fat, tmp_path, capsys):
    root = tmp_path / "root"
    for name in ("a", "nested/b"):
        shutil.copytree(fat, root / name)
    assert main(["lean", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"{root / 'a'}: " in out and f"{root / 'nested/b'}: " in out and " MB -> " in out
    files = tree(root)
    assert main(["lean", str(root), str(root / "a")]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{root / 'a'}: lean already", f"{root / 'nested/b'}: lean already"]
    assert tree(root) == files
    assert make_lean(root / "a") is False


def test_lean_interrupted_between_its_files_leaves_a_loadable_checkpoint(fat, tmp_path, monkeypatch):
    import explorer.checkpoints.store as checkpoints
    folder = shutil.copytree(fat, tmp_path / "cifar10-spt_lsa")
    model, _ = load_folder(folder)

    def killed(source, target):
        target.write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoints, "_copy_without_optimizer", killed)
    with pytest.raises(KeyboardInterrupt):
        make_lean(folder)
    assert not compile_config(folder) and has_optimizer(folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in fat.iterdir())
    assert same_weights(load_folder(folder)[0], model)
    monkeypatch.undo()
    assert make_lean(folder) is True and not has_optimizer(folder)
    assert same_weights(load_folder(folder)[0], model)


def test_a_checkpoint_written_after_training_is_lean_and_the_model_trains_on(tmp_path):
    model = trained_one_step(build_vit(tiny_config(variant="spt_lsa"), 10), steps=2)
    optimizer, steps = model.optimizer, int(model.optimizer.iterations.numpy())
    folder = write_checkpoint(model, tmp_path / "new", Card(variant="spt_lsa"))
    assert not has_optimizer(folder) and compile_config(folder) == {}
    assert same_weights(load_folder(folder)[0], model)
    # The same model saved fat and made lean is what write_checkpoint wrote.
    old = save_fat(model, tmp_path / "old", folder)
    assert has_optimizer(old) and make_lean(old)
    assert weights_contents(old) == weights_contents(folder)
    assert (old / "config.json").read_text() == (folder / "config.json").read_text()
    # Writing a checkpoint leaves the caller's model compiled, with its optimizer.
    assert model.compiled and model.optimizer is optimizer
    trained_one_step(model, steps=2)
    assert int(optimizer.iterations.numpy()) == steps + 2


def test_lean_refuses_what_is_not_a_checkpoint_and_changes_nothing(fat, tmp_path, capsys):
    keras_only = shutil.copytree(fat, tmp_path / "keras-only", ignore=shutil.ignore_patterns(CARD))
    no_weights = shutil.copytree(fat, tmp_path / "no-weights", ignore=shutil.ignore_patterns("*.h5"))
    empty = tmp_path / "empty"
    empty.mkdir()
    good = shutil.copytree(fat, tmp_path / "good")
    files = tree(tmp_path)
    for bad in (keras_only, no_weights, empty, tmp_path / "missing"):
        assert main(["lean", str(good), str(bad)]) == 2
        err = capsys.readouterr().err
        assert err == (f"error: {bad} is not a folder\n" if bad.name == "missing" else
                       f"error: {bad} is not an explorer checkpoint (a folder with {CARD} and config.json, "
                       f"metadata.json, model.weights.h5) and holds none\n")
    assert tree(tmp_path) == files and has_optimizer(good)  # the good folder named first was left as it was
    no_card = f"{keras_only} is not an explorer checkpoint: it has no {CARD}"
    with pytest.raises(CheckpointError, match=re.escape(no_card)):
        make_lean(keras_only)
    with pytest.raises(CheckpointError, match=re.escape(f"{no_weights} is missing model.weights.h5")):
        make_lean(no_weights)
    (good / "model.weights.h5").write_bytes(b"\x89HDF\r\n garbage")
    config = (good / "config.json").read_text()
    with pytest.raises(CheckpointError, match="model.weights.h5 is not a readable HDF5 file"):
        make_lean(good)
    assert (good / "config.json").read_text() == config and sorted(os.listdir(good)) == sorted(os.listdir(fat))
