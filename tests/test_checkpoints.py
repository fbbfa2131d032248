import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from explorer.checkpoints.hub import HubError, download, parse_ref
from explorer.checkpoints.store import (
    CARD,
    Card,
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    read_card,
    unique_dir,
    update_card,
    write_card,
    write_checkpoint,
)
from explorer.model.models import build_vit
from explorer.model.predict import predict_logits
from tests.helpers import ROOT, populate_hf_cache, tiny_config

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


def test_layout_and_card(tiny_checkpoints):
    folder = tiny_checkpoints["spt_lsa"]
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "metadata.json", "model.weights.h5", CARD, "README.md"} <= names
    card = read_card(folder)
    assert isinstance(card, Card)
    for key in ("name", "variant", "preset", "config", "dataset", "class_names", "metrics", "history",
                "training", "versions", "parameters"):
        assert key in card.to_json(), key
    import keras
    import tensorflow as tf
    assert card.versions == {"keras": keras.__version__, "backend": "tensorflow", "tensorflow": tf.__version__}
    readme = (folder / "README.md").read_text()
    assert readme.startswith("---\n") and "library_name: keras" in readme and "test top-1" in readme


def test_list_checkpoints_finds_nested_and_skips_temporary(tiny_checkpoints, tmp_path):
    shutil.copytree(tiny_checkpoints["vanilla"], tmp_path / "a" / "deep" / "one")
    shutil.copytree(tiny_checkpoints["vanilla"], tmp_path / ".tmp-half-written")
    (tmp_path / "not-one").mkdir()
    assert list_checkpoints(tmp_path) == [tmp_path / "a" / "deep" / "one"]
    assert list_checkpoints(tmp_path / "missing") == []


def test_write_is_atomic_when_saving_fails(tmp_path, monkeypatch):
    import keras
    model = build_vit(tiny_config(), 10)

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(keras.saving, "save_model", broken)
    with pytest.raises(CheckpointError, match="could not write checkpoint x: No space left on device; nothing"):
        write_checkpoint(model, tmp_path / "x", Card(variant="vanilla"))
    assert list(tmp_path.iterdir()) == []


def test_never_overwrites(tiny_checkpoints, tmp_path):
    with pytest.raises(CheckpointError, match="never overwritten"):
        write_checkpoint(build_vit(tiny_config(), 10), tiny_checkpoints["vanilla"], Card())
    assert unique_dir(tiny_checkpoints["vanilla"].parent, "tiny-vanilla").name == "tiny-vanilla-2"
    with pytest.raises(CheckpointError, match="checkpoint name"):
        unique_dir(tmp_path, "../escape")


def test_a_name_made_unique_stays_a_checkpoint_name(tmp_path):
    from explorer.checkpoints.store import NAME_MAX, unique_dir, validate_name
    name = "n" * NAME_MAX
    (tmp_path / name).mkdir()
    second = unique_dir(tmp_path, name)
    assert second.name == "n" * (NAME_MAX - 2) + "-2" and validate_name(second.name)
    with pytest.raises(CheckpointError, match=f"1-{NAME_MAX}"):
        validate_name(name + "n")


def test_update_card_merges(tiny_checkpoints, tmp_path):
    folder = shutil.copytree(tiny_checkpoints["vanilla"], tmp_path / "c")
    before = read_card(folder)
    update_card(folder, metrics={"test_top1": 0.5})
    after = read_card(folder)
    assert after.metrics.test_top1 == 0.5 and after.metrics.top1 == before.metrics.top1
    assert after.to_json() == {**before.to_json(), "metrics": {**before.to_json()["metrics"], "test_top1": 0.5}}
    assert "50.00 %" in (folder / "README.md").read_text()


@pytest.mark.parametrize("folder", list_checkpoints(ROOT / "checkpoints"), ids=lambda p: p.name)
def test_every_shipped_card_read_and_written_back_is_the_same_file(folder, tmp_path):
    shutil.copy(folder / CARD, tmp_path / CARD)
    write_card(tmp_path, read_card(tmp_path))
    assert (tmp_path / CARD).read_text() == (folder / CARD).read_text()


def _broken_copy(src, dst, damage):
    shutil.copytree(src, dst)
    damage(dst)
    return dst


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "model.weights.h5").unlink(), "missing model.weights.h5"),
    (lambda d: (d / "model.weights.h5").write_bytes(b"\x89HDF\r\n garbage"), "cannot load the model"),
    (lambda d: (d / CARD).write_text("{not json"), "not valid JSON"),
    (lambda d: (d / CARD).unlink(), "no explorer.json"),
    (lambda d: (d / CARD).write_text('{"format": "other"}'), "not an explorer checkpoint card"),
])
def test_broken_checkpoints_give_clear_errors(tiny_checkpoints, tmp_path, damage, message):
    folder = _broken_copy(tiny_checkpoints["vanilla"], tmp_path / "broken", damage)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(folder)


def test_foreign_architecture_and_lambda_are_refused_without_running(tiny_checkpoints, tmp_path,
                                                                     monkeypatch):
    import keras

    import explorer.checkpoints.store as checkpoints
    marker = tmp_path / "executed"
    # The Lambda would leave a file behind if Keras ever ran (or even built) its code.
    touch = eval(f"lambda x: __import__('pathlib').Path({str(marker)!r}).touch() or x")
    inputs = keras.Input((4,))
    foreign = keras.Model(inputs, keras.layers.Lambda(touch, output_shape=(4,))(inputs))
    marker.unlink(missing_ok=True)  # building the model may have traced it once
    folder = tmp_path / "lambda"
    keras.saving.save_model(foreign, str(folder), zipped=False)
    shutil.copy(tiny_checkpoints["vanilla"] / CARD, folder / CARD)
    with pytest.raises(CheckpointError, match="Lambda"):
        load_checkpoint(folder)
    # Past our own architecture check, Keras' safe_mode still refuses to deserialise the code.
    monkeypatch.setattr(checkpoints, "_check_architecture", lambda folder: None)
    with pytest.raises(CheckpointError, match="cannot load.*(safe_mode|unsafe)"):
        load_checkpoint(folder)
    assert not marker.exists()
    monkeypatch.undo()
    seq = tmp_path / "seq"
    keras.saving.save_model(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]), str(seq),
                            zipped=False)
    shutil.copy(tiny_checkpoints["vanilla"] / CARD, seq / CARD)
    with pytest.raises(CheckpointError, match="not one of ours"):
        load_checkpoint(seq)


def test_not_a_folder_or_id():
    with pytest.raises(CheckpointError, match="neither a checkpoint folder nor a Hub id"):
        load_checkpoint("nothing-here")
    with pytest.raises(CheckpointError, match="not a folder"):
        load_checkpoint("./missing/dir/x")


@pytest.mark.parametrize("ref", ["", "  ", "a/../b", "../../etc/passwd", "owner/na me", "owner/name/extra",
                                 "owner//x", "ow ner/x", "owner/name@..", "a/b@rev with space"])
def test_malformed_hub_ids_are_refused(ref):
    with pytest.raises((HubError, CheckpointError)):
        parse_ref(ref) if "/" not in ref or ref.count("/") == 1 else load_checkpoint(ref)


def test_parse_ref_forms():
    assert parse_ref("owner/name") == ("owner/name", None)
    assert parse_ref("owner/name@v1.0") == ("owner/name", "v1.0")
    assert parse_ref("hf://owner/name@" + COMMIT) == ("owner/name", COMMIT)


@pytest.fixture
def hf_cache(tmp_path, tiny_checkpoints):
    cache = tmp_path / "hub"
    populate_hf_cache(cache, "someone/tiny-lsa", tiny_checkpoints["spt_lsa"], COMMIT, refs=("main", "v1"))
    populate_hf_cache(cache, "someone/tiny-lsa", tiny_checkpoints["vanilla"], OLD_COMMIT, refs=("old",))
    return cache


def test_hub_loading_from_the_cache_at_pinned_revisions(hf_cache, tiny_checkpoints, images):
    expected = predict_logits(load_checkpoint(tiny_checkpoints["spt_lsa"])[0], images)
    for ref in ("someone/tiny-lsa", "someone/tiny-lsa@v1", f"someone/tiny-lsa@{COMMIT}", "hf://someone/tiny-lsa"):
        model, card = load_checkpoint(ref, cache_dir=str(hf_cache))
        assert card.variant == "spt_lsa", ref
        np.testing.assert_allclose(predict_logits(model, images), expected, atol=1e-6)
    model, card = load_checkpoint("someone/tiny-lsa@old", cache_dir=str(hf_cache))
    assert card.variant == "vanilla"
    assert download(f"someone/tiny-lsa@{OLD_COMMIT}", cache_dir=str(hf_cache)).name == OLD_COMMIT


def test_uncached_repo_and_revision_give_clear_errors_fast(hf_cache):
    import time
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match="not in the local Hugging Face cache and offline"):
        load_checkpoint("someone/does-not-exist", cache_dir=str(hf_cache))
    with pytest.raises(CheckpointError, match="someone/tiny-lsa@v9"):
        load_checkpoint("someone/tiny-lsa@v9", cache_dir=str(hf_cache))
    with pytest.raises(HubError, match="not in the local Hugging Face cache and offline"):
        download("someone/does-not-exist", cache_dir=str(hf_cache))
    assert time.perf_counter() - start < 2


def test_cached_repo_that_is_not_a_checkpoint(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text("{}")
    populate_hf_cache(tmp_path / "hub", "someone/other", other, COMMIT)
    with pytest.raises(CheckpointError, match="someone/other is not an explorer checkpoint"):
        load_checkpoint("someone/other", cache_dir=str(tmp_path / "hub"))
    assert download("someone/other", cache_dir=str(tmp_path / "hub")).name == COMMIT  # hub only moves folders


def test_hub_loading_through_hf_home_in_a_fresh_process(tmp_path, tiny_checkpoints):
    populate_hf_cache(tmp_path / "hf" / "hub", "someone/tiny-lsa", tiny_checkpoints["spt_lsa"], COMMIT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    code = ("from explorer.checkpoints.store import load_checkpoint; m, c = load_checkpoint('someone/tiny-lsa@main');"
            "print(c.variant, m.count_params())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "spt_lsa"


_PLAIN_KERAS = """
import sys
import numpy as np
import explorer, keras
model = keras.saving.load_model(sys.argv[1])
assert not model.compiled and getattr(model, "optimizer", None) is None
np.save(sys.argv[2], np.asarray(model(np.load(sys.argv[3]).astype("float32"))))
"""


@pytest.mark.slow
def test_plain_keras_loads_a_shipped_checkpoint_after_import_explorer(tmp_path, images):
    # As a Keras user does, in a fresh process: the model alone, as a checkpoint holds no optimizer.
    folder = ROOT / "checkpoints" / "cifar10-spt_lsa"
    np.save(tmp_path / "x.npy", images)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _PLAIN_KERAS, str(folder), str(tmp_path / "keras.npy"),
                          str(tmp_path / "x.npy")], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "keras.npy"), predict_logits(load_checkpoint(folder)[0], images),
                               atol=1e-5)
    readme = (folder / "README.md").read_text()
    assert "## How to use" in readme and 'keras.saving.load_model("hf://' in readme and "import explorer" in readme
    assert "@<revision>" in readme


@pytest.mark.slow
def test_plain_keras_loads_hf_ids_from_the_cache_offline(tmp_path, tiny_checkpoints, images):
    populate_hf_cache(tmp_path / "hf" / "hub", "someone/tiny-lsa", tiny_checkpoints["spt_lsa"], COMMIT)
    np.save(tmp_path / "x.npy", images)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", _PLAIN_KERAS, "hf://someone/tiny-lsa", str(tmp_path / "keras.npy"),
                          str(tmp_path / "x.npy")], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "keras.npy"),
                               predict_logits(load_checkpoint(tiny_checkpoints["spt_lsa"])[0], images), atol=1e-5)


def test_hub_moves_folders_and_imports_nothing_of_ours():
    code = ("import sys, explorer.checkpoints.hub; ours = sorted(m for m in sys.modules if m.startswith('explorer.'));"
            "print(ours)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # the package registers its layers and schedule; hub itself needs no checkpoint code
    assert "'explorer.checkpoints.store'" not in out.stdout and "'explorer.checkpoints.hub'" in out.stdout
