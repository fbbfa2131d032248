"""explorer.convert on real files: the keras.io example's 2022 models built with tf-keras (Keras 2) and saved as
SavedModels, and the current example's `.keras` archive (tests/fixtures/example_small.keras).

The Keras 2 models are built by tests/fixtures/make_keras2_example.py in its own process (TF_USE_LEGACY_KERAS=1):
tf-keras never meets Keras 3 in this one. It writes each model's probabilities in inference mode next to it;
the converted checkpoint must give the same ones. Building them takes a fresh process and about 17 s, so the
quick loop converts the ones bundled in tests/fixtures/keras2_examples.tar.xz (what that script wrote), and a
slow test builds them anew and checks that tf-keras still writes what is bundled. `python -m tests.test_convert`
rewrites the bundle.
"""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest

from explorer.checkpoints.store import load_checkpoint, read_card
from explorer.convert import (
    CIFAR10_CLASSES,
    CIFAR100_CLASSES,
    ConvertError,
    class_names_for,
    convert,
    main,
    read_keras_archive,
    read_savedmodel,
)
from explorer.model.layers import ImagePreprocessing
from explorer.model.models import build_vit, tau_values
from tests.helpers import ROOT, tiny_config
from tests.hub_server import FakeHub

FIXTURES = ROOT / "tests" / "fixtures"
BUNDLE = FIXTURES / "keras2_examples.tar.xz"
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"

# Shaped like the 2022 example at small sizes: both variants, 10 and 100 classes, 1-2 blocks, 2-3 heads.
SMALL = {
    "spt_lsa": dict(image_size=24, patch_size=6, transformer_layers=2, projection_dim=16, num_heads=2,
                    transformer_units=[32, 16], mlp_head_units=[32, 16], num_classes=10, seed=1,
                    # as TF 2.7 saved the 2022 code, and a trained model with its optimizer slots
                    legacy_config=True, optimizer_step=True),
    "vanilla": dict(vanilla=True, image_size=20, patch_size=4, transformer_layers=1, projection_dim=32, num_heads=2,
                    transformer_units=[64, 32], mlp_head_units=[32, 16], num_classes=100, seed=2),
    "spt_lsa_100": dict(image_size=16, patch_size=4, transformer_layers=1, projection_dim=24, num_heads=3,
                        transformer_units=[48, 24], mlp_head_units=[16], num_classes=100, seed=3),
}


def keras2_env() -> dict:
    env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "TMPDIR", "HOME") if k in os.environ}
    return {**env, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}


def build_keras2(out: Path, specs: list[dict]) -> Path:
    pytest.importorskip("tf_keras", reason="the Keras 2 fixtures need tf-keras (requirements-test.txt)")
    run = subprocess.run([sys.executable, str(FIXTURES / "make_keras2_example.py"), str(out), json.dumps(specs)],
                         env=keras2_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def keras2_specs() -> list[dict]:
    specs = [{"name": name, **spec} for name, spec in SMALL.items()]
    return specs + [{"name": "cnn", "kind": "cnn"}, {"name": "cnn", "kind": "h5"}]


def write_bundle(built: Path, bundle: Path = BUNDLE) -> None:
    """The built folder as a reproducible archive: sorted names, no owners, no times."""
    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info
    with tarfile.open(bundle, "w:xz", preset=9) as tar:
        for path in sorted(built.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(built)), recursive=False, filter=clean)


def unpack_bundle(out: Path) -> Path:
    """The bundled Keras 2 SavedModels and their outputs, as make_keras2_example.py wrote them, in `out`."""
    with tarfile.open(BUNDLE) as tar:
        tar.extractall(out, filter="data")
    return out


@pytest.fixture(scope="module")
def keras2(tmp_path_factory) -> Path:
    """A fresh copy per module: tests may not change what others read."""
    return unpack_bundle(tmp_path_factory.mktemp("keras2"))


@pytest.mark.slow  # a fresh tf-keras process, about 17 s
def test_tf_keras_still_builds_what_is_bundled(tmp_path):
    """The bundle is what make_keras2_example.py writes with today's tf-keras: the same files, the same
    probabilities, preprocessing and temperatures; a changed tf-keras or script shows here first."""
    built = build_keras2(tmp_path / "built", keras2_specs())
    unpack_bundle(tmp_path / "bundled")
    names = lambda root: sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())  # noqa: E731
    assert names(built) == names(tmp_path / "bundled")
    for path in sorted(built.glob("*.npy")):
        np.testing.assert_allclose(np.load(path), np.load(tmp_path / "bundled" / path.name), rtol=1e-5, atol=1e-6,
                                   err_msg=path.name)
    for path in sorted(built.glob("*.json")):
        fresh, kept = json.loads(path.read_text()), json.loads((tmp_path / "bundled" / path.name).read_text())
        assert fresh.keys() == kept.keys() and fresh["spec"] == kept["spec"], path.name
        assert fresh["parameters"] == kept["parameters"], path.name
        for key in ("taus", "mean", "variance"):
            np.testing.assert_allclose(fresh[key], kept[key], rtol=1e-6, err_msg=f"{path.name}: {key}")
    folder = convert(built / "spt_lsa", tmp_path / "out")
    model, _ = load_checkpoint(folder)
    np.testing.assert_allclose(probabilities(model, np.load(built / "images.npy")),
                               np.load(tmp_path / "bundled" / "spt_lsa.probs.npy"), atol=1e-5)


def probabilities(model, images) -> np.ndarray:
    return keras.ops.convert_to_numpy(keras.ops.softmax(model(images, training=False), axis=-1))


def assert_nothing_written(out: Path) -> None:
    assert not out.exists() or not any(out.iterdir()), sorted(out.rglob("*"))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_keras2_savedmodel_converts_to_the_same_probabilities(keras2, tmp_path, name):
    info = json.loads((keras2 / f"{name}.json").read_text())
    folder = convert(keras2 / name, tmp_path / "out")
    model, card = load_checkpoint(folder)
    images = np.load(keras2 / "images.npy")
    expected = np.load(keras2 / f"{name}.probs.npy")
    # Far from uniform (each image's top class at twice the uniform probability or more): a wrong mapping shows.
    assert (expected.max(axis=1) > 2 / expected.shape[1]).all()
    got = probabilities(model, images)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)

    spec, config = SMALL[name], card.config
    assert card.variant == ("vanilla" if spec.get("vanilla") else "spt_lsa")
    assert (config["image_size"], config["input_size"], config["patch_size"], config["num_layers"]) == (
        32, spec["image_size"], spec["patch_size"], spec["transformer_layers"])
    assert (config["projection_dim"], config["num_heads"], config["key_dim"]) == (
        spec["projection_dim"], spec["num_heads"], spec["projection_dim"])
    assert (config["mlp_units"], config["head_units"], config["head"]) == (
        spec["transformer_units"], spec["mlp_head_units"], "flatten")
    assert config["layer_norm_eps"] == 1e-6 and config["tau_mode"] == "layer"
    # The adapted Normalization, far from 0/1, is the preprocessing: Keras' (x - mean) / max(sqrt(var), eps).
    np.testing.assert_array_equal(np.float32(config["mean"]), np.float32(info["mean"]))
    np.testing.assert_array_equal(np.float32(config["std"]), np.sqrt(np.float32(info["variance"])))
    assert 100 < min(config["mean"]) and 50 < min(config["std"]) < 70

    # The learned temperatures, as they were: one per LSA layer, away from sqrt(key_dim).
    taus = [layer[0] for layer in tau_values(model)]
    np.testing.assert_array_equal(np.float32(taus), np.float32(info["taus"]))
    assert card.source.tau == taus
    if taus:
        assert all(abs(t - np.sqrt(spec["projection_dim"])) > 0.5 for t in taus)

    source = card.source
    assert source.kind == "keras-io-example" and source.format == "keras2-savedmodel"
    readme = (folder / "README.md").read_text()  # the Hub's model card says it too
    assert f"Converted by `python -m explorer.convert` from `{source.source}` (keras2-savedmodel)" in readme
    assert source.source == str((keras2 / name).resolve()) and source.revision is None
    assert any("Normalization" in m and "preprocess mean" in m for m in source.mapped)
    assert [d.split(" ")[1] for d in source.dropped] == ["(RandomFlip):", "(RandomRotation):", "(RandomZoom):"]
    assert source.class_names_assumed is True
    classes = CIFAR10_CLASSES if spec["num_classes"] == 10 else CIFAR100_CLASSES
    assert card.class_names == list(classes)


def test_the_preprocessing_equals_the_examples_normalization_and_resizing(keras2, tmp_path):
    """The example normalises and then resizes (Keras 2's bilinear Resizing); we resize and then normalise."""
    for name in ("spt_lsa", "vanilla"):
        model, _ = load_checkpoint(convert(keras2 / name, tmp_path / name))
        ours = keras.Model(model.input, model.get_layer("preprocess").output)(np.load(keras2 / "images.npy"))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), np.load(keras2 / f"{name}.preprocessed.npy"),
                                   atol=2e-6, rtol=0)


@pytest.mark.parametrize("size", [24, 32, 72])
def test_our_resize_is_keras_bilinear_resizing(size):
    """Down, same and up: ImagePreprocessing resizes exactly as keras.layers.Resizing (bilinear, no antialias)."""
    images = np.random.default_rng(size).uniform(0, 255, (3, 32, 32, 3)).astype("float32")
    mean, variance = np.float32([120.5, 115.25, 104.75]), np.float32([3600.0, 3025.0, 4225.0])
    keras_way = keras.Sequential([keras.layers.Normalization(mean=mean, variance=variance),
                                  keras.layers.Resizing(size, size)])(images)
    ours = ImagePreprocessing(size, mean, np.sqrt(variance))(images)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(keras_way),
                               atol=2e-6, rtol=0)
    plain = ImagePreprocessing(size, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))(images)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(plain),
                                  keras.ops.convert_to_numpy(keras.layers.Resizing(size, size)(images)))


def test_a_wrong_temperature_would_show(keras2, tmp_path):
    """The probability check can fail: 5 % off one learned tau moves the probabilities far beyond 1e-5."""
    model, _ = load_checkpoint(convert(keras2 / "spt_lsa", tmp_path / "out"))
    layer = model.get_layer("block1_attention")
    layer.tau.assign(layer.tau.numpy() * 1.05)
    got = probabilities(model, np.load(keras2 / "images.npy"))
    assert np.abs(got - np.load(keras2 / "spt_lsa.probs.npy")).max() > 1e-3


def test_the_current_examples_keras_archive_converts(tmp_path):
    reference = np.load(FIXTURES / "example_small.npz")
    folder = convert(FIXTURES / "example_small.keras", tmp_path / "out")
    model, card = load_checkpoint(folder)
    assert reference["probs"].max() > 0.5
    np.testing.assert_allclose(probabilities(model, reference["images"]), reference["probs"], atol=1e-5, rtol=0)
    np.testing.assert_array_equal(np.float32([t[0] for t in tau_values(model)]), reference["taus"])
    assert card.variant == "spt_lsa" and card.config["input_size"] == 24 and card.config["patch_size"] == 6
    assert card.source.format == "keras3-archive" and card.source.class_names_assumed is True
    assert card.class_names == list(CIFAR10_CLASSES) and folder.name == "example_small"
    # Its tokenizer's LayerNormalization epsilon is not saved in a .keras: the card says what was assumed.
    assert any("epsilon" in m and "not saved" in m for m in card.source.mapped)


def test_an_unzipped_keras3_save_converts_too(tmp_path):
    folder = tmp_path / "unzipped"
    zipfile.ZipFile(FIXTURES / "example_small.keras").extractall(folder)
    a = read_keras_archive(FIXTURES / "example_small.keras")
    b = read_keras_archive(folder)
    assert [lay.name for lay in a.layers] == [lay.name for lay in b.layers]
    model, _ = load_checkpoint(convert(folder, tmp_path / "out"))
    reference = np.load(FIXTURES / "example_small.npz")
    np.testing.assert_allclose(probabilities(model, reference["images"]), reference["probs"], atol=1e-5, rtol=0)


def test_class_names_come_from_the_folder_when_it_names_them(keras2, tmp_path):
    folder = tmp_path / "with-labels"
    shutil.copytree(keras2 / "spt_lsa", folder)
    names = [f"thing {i}" for i in range(10)]
    (folder / "labels.txt").write_text("\n".join(names) + "\n")
    card = read_card(convert(folder, tmp_path / "out", name="named"))
    assert card.class_names == names and card.source.class_names_assumed is False
    assert card.source.class_names_from == "labels.txt" and card.dataset.name == "unknown"
    (folder / "labels.txt").write_text("a\nb\n")
    with pytest.raises(ConvertError, match="labels.txt names 2 classes; the model has 10 outputs"):
        convert(folder, tmp_path / "out", name="wrong")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["named"]


def test_class_names_from_json_and_numbered_fallback(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"id2label": {"1": "b", "0": "a", "2": "c"}}))
    assert class_names_for(tmp_path, 3) == (["a", "b", "c"], False, "config.json")
    assert class_names_for(None, 3) == (["class 0", "class 1", "class 2"], True, "numbered: the source names none")
    assert class_names_for(None, 100)[:2] == (list(CIFAR100_CLASSES), True)


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_bad_sources_are_refused_with_a_reason_and_nothing_is_written(keras2, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    # A SavedModel cut short: the variables shard loses its second half, as an interrupted download does.
    shutil.copytree(keras2 / "spt_lsa", bad / "truncated")
    data = next((bad / "truncated" / "variables").glob("variables.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    # Its Keras metadata cut short.
    shutil.copytree(keras2 / "spt_lsa", bad / "metadata-cut")
    meta = bad / "metadata-cut" / "keras_metadata.pb"
    meta.write_bytes(meta.read_bytes()[:-100])
    # A .keras archive cut short, and a .keras of another model (Keras 3, this process).
    (bad / "cut.keras").write_bytes((FIXTURES / "example_small.keras").read_bytes()[:100_000])
    other = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(4, 3), keras.layers.Flatten(),
                              keras.layers.Dense(10)])
    other.save(bad / "other-sequential.keras")
    inputs = keras.Input((32, 32, 3))
    functional = keras.Model(inputs, keras.layers.Dense(10)(keras.layers.GlobalAveragePooling2D()(
        keras.layers.Conv2D(4, 3)(inputs))))
    functional.save(bad / "other-functional.keras")
    # One of ours is not a keras.io model either.
    explorer_folder = tmp_path / "explorer-model"
    explorer_folder.mkdir()
    keras.saving.save_model(build_vit(tiny_config(), 10), explorer_folder / "model.keras")

    cases = {
        keras2 / "cnn": "(Rescaling) (layer 1 of the model) is where the keras.io example has its Shifted Patch "
                        "Tokenization (ShiftedPatchTokenization): not the example's architecture",
        keras2 / "cnn.h5": "cnn.h5 is a Keras 2 HDF5 file; only SavedModels and Keras 3 .keras archives",
        bad / "truncated": "variables cannot be read (truncated or corrupt download?)",
        bad / "metadata-cut": "keras_metadata.pb is truncated or corrupt",
        bad / "cut.keras": "cut.keras is not a readable .keras archive (truncated or corrupt?)",
        bad / "other-sequential.keras": "other-sequential.keras holds a Keras 'Sequential', not the functional model",
        bad / "other-functional.keras": "(Conv2D) (layer 1 of the model) is where the keras.io example has its "
                                        "Shifted Patch Tokenization",
        explorer_folder / "model.keras": "layer 'preprocess' (ImagePreprocessing) (layer 1 of the model) is where",
        tmp_path / "no-such-thing": "'" + str(tmp_path / "no-such-thing") + "' is neither a local file or folder",
        tmp_path: "holds no Keras model",
    }
    out = tmp_path / "out"
    for source, reason in cases.items():
        code, printed, err = run_cli([source, "--out", out], capsys)
        assert code == 2, (source, printed, err)
        assert err.startswith("error: ") and reason in err, (source, err)
        assert "Traceback" not in err and printed == ""
        assert_nothing_written(out)


def test_a_different_architecture_names_the_layer_or_shape(keras2, tmp_path):
    source = read_savedmodel(keras2 / "spt_lsa")
    attention = next(lay for lay in source.layers if lay.kind == "MultiHeadAttentionLSA")
    attention.weights["tau"] = np.ones(2, "float32")  # a tau per head: not the 2022 example's
    from explorer.convert import map_example
    with pytest.raises(ConvertError, match=r"layer 'multi_head_attention_lsa\w*' \(MultiHeadAttentionLSA\): tau has "
                                           r"shape \(2,\), expected \(\)"):
        map_example(source)
    source = read_savedmodel(keras2 / "spt_lsa")
    attention = next(lay for lay in source.layers if lay.kind == "MultiHeadAttentionLSA")
    attention.mask = None
    with pytest.raises(ConvertError, match="is called without the diagonal attention mask"):
        map_example(source)


def test_the_checkpoint_is_written_atomically_under_a_new_name(keras2, tmp_path, capsys):
    out = tmp_path / "out"
    code, printed, err = run_cli([keras2 / "vanilla", "--out", out, "--name", "example-vanilla"], capsys)
    assert code == 0, err
    code, printed_again, err = run_cli([keras2 / "vanilla", "--out", out, "--name", "example-vanilla"], capsys)
    assert code == 0, err
    assert Path(printed.strip()).name == "example-vanilla" and Path(printed_again.strip()).name == "example-vanilla-2"
    assert sorted(p.name for p in out.iterdir()) == ["example-vanilla", "example-vanilla-2"]


def hub_env(hub: FakeHub, home: Path) -> dict:
    env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "TMPDIR") if k in os.environ}
    return {**env, "PYTHONPATH": str(ROOT), "HOME": str(home), "HF_HOME": str(home / "hf"), "HF_ENDPOINT": hub.url,
            "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "NO_PROXY": "127.0.0.1", "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow",
            "CUDA_VISIBLE_DEVICES": ""}


def repo_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_savedmodel_on_the_hub_converts_from_its_id(keras2, tmp_path):
    """The published example's layout (push_to_hub_keras: a SavedModel at the top, a README) served by a local
    Hub; the real huggingface_hub client fetches it in a fresh process, the CLI converts it."""
    hub = FakeHub()
    files = {**repo_files(keras2 / "spt_lsa"), "README.md": b"# vit_small_ds\n",
             "labels.txt": "\n".join(f"label {i}" for i in range(10)).encode(), "history.json": b"{}",
             "old.keras": b"an archive beside the SavedModel: never fetched"}
    hub.add_repo("keras-io/vit-small-ds-test", {COMMIT: files})
    hub.add_repo("someone/keras2-h5", {COMMIT: {"model.h5": b"\x89HDF\r\n", "README.md": b"#\n"}})
    with zipfile.ZipFile(FIXTURES / "example_small.keras") as archive:  # as Keras 3's model.save("hf://...") does
        unzipped = {name: archive.read(name) for name in ("config.json", "metadata.json", "model.weights.h5")}
    hub.add_repo("someone/keras3-unzipped", {COMMIT: {**unzipped, "README.md": b"#\n"}})
    hub.start()
    try:
        out = tmp_path / "out"
        cli = [sys.executable, "-m", "explorer.convert", "--out", str(out)]
        run = subprocess.run([*cli, "keras-io/vit-small-ds-test"], env=hub_env(hub, tmp_path), cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        fetched = {name for repo, name in hub.fetched if repo == "keras-io/vit-small-ds-test"}
        assert not fetched & {"history.json", "README.md", "old.keras"} and "labels.txt" in fetched

        refused = subprocess.run([*cli, "someone/keras2-h5", "--name", "h5"], env=hub_env(hub, tmp_path), cwd=ROOT,
                                 capture_output=True, text=True, timeout=300)
        small = subprocess.run([*cli, "keras-io/vit-small-ds-test", "--name", "capped", "--max-mb", "0.01"],
                               env=hub_env(hub, tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=300)
        keras3 = subprocess.run([*cli, "someone/keras3-unzipped"], env=hub_env(hub, tmp_path), cwd=ROOT,
                                capture_output=True, text=True, timeout=300)
    finally:
        hub.stop()
    folder = Path(run.stdout.strip().splitlines()[-1])
    assert folder == out / "keras-io-vit-small-ds-test"
    model, card = load_checkpoint(folder)
    np.testing.assert_allclose(probabilities(model, np.load(keras2 / "images.npy")),
                               np.load(keras2 / "spt_lsa.probs.npy"), atol=1e-5, rtol=0)
    assert card.source.source == "keras-io/vit-small-ds-test" and card.source.revision == COMMIT
    assert card.class_names == [f"label {i}" for i in range(10)]
    assert card.source.class_names_assumed is False

    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "someone/keras2-h5 holds a Keras 2 HDF5 model (model.h5)" in refused.stderr
    assert small.returncode == 2 and "its model files are" in small.stderr and "at most 10 kB" in small.stderr
    assert not [name for repo, name in hub.fetched if repo == "someone/keras2-h5"]

    # Offline now (this process), a model slot converts it from what the CLI left in the cache, whose file
    # list names files never fetched.
    from explorer.app.models import ModelStore
    loaded = ModelStore(tmp_path / "root", cache_dir=str(tmp_path / "hf" / "hub")).get("keras-io/vit-small-ds-test")
    assert loaded.converted_from["revision"] == COMMIT and loaded.class_names == [f"label {i}" for i in range(10)]
    np.testing.assert_allclose(probabilities(loaded.model, np.load(keras2 / "images.npy")),
                               np.load(keras2 / "spt_lsa.probs.npy"), atol=1e-5, rtol=0)

    assert keras3.returncode == 0, keras3.stderr[-3000:]
    model, card = load_checkpoint(out / "someone-keras3-unzipped")
    reference = np.load(FIXTURES / "example_small.npz")
    np.testing.assert_allclose(probabilities(model, reference["images"]), reference["probs"], atol=1e-5, rtol=0)
    assert card.source.format == "keras3-archive" and card.source.revision == COMMIT
    assert sorted(p.name for p in out.iterdir()) == ["keras-io-vit-small-ds-test", "someone-keras3-unzipped"]


@pytest.mark.slow
def test_the_examples_default_size_converts(tmp_path_factory, tmp_path):
    """The 2022 example at its own hyper-parameters (72 px, patch 6, 8 blocks of width 64 with 4 heads, MLP head
    (2048, 1024), 100 classes): 21.8 M parameters, top-5 probabilities as Keras 2 gives them, loadable by
    plain Keras."""
    keras2 = build_keras2(tmp_path_factory.mktemp("keras2-default"), [{"name": "default"}])
    info = json.loads((keras2 / "default.json").read_text())
    folder = convert(keras2 / "default", tmp_path / "out")
    import explorer  # noqa: F401  (registers our layers, as a user of the checkpoint does)
    model = keras.saving.load_model(folder)
    # The source counts the Normalization's mean, variance and count too (7 numbers we hold as config).
    assert model.count_params() == info["parameters"] - 7 == 21_787_748
    got = probabilities(model, np.load(keras2 / "images.npy"))
    expected = np.load(keras2 / "default.probs.npy")
    top5 = np.argsort(-expected, axis=1)[:, :5]
    np.testing.assert_array_equal(np.argsort(-got, axis=1)[:, :5], top5)
    np.testing.assert_allclose(np.take_along_axis(got, top5, 1), np.take_along_axis(expected, top5, 1),
                               atol=1e-4, rtol=0)
    np.testing.assert_array_equal(np.float32([t[0] for t in tau_values(model)]), np.float32(info["taus"]))
    card = read_card(folder)
    assert card.preset == "keras-io" and card.class_names == list(CIFAR100_CLASSES)
    assert card.dataset.name == "cifar100" and card.source.class_names_assumed is True


def test_a_slot_converts_a_cached_hub_repo_once_and_the_cache_owns_the_result(keras2, tmp_path):
    """Offline (conftest), from a Hugging Face cache holding the example's SavedModel: the app's model store
    converts it on first use into the repo's snapshot, loads that afterwards, and pruning the cache removes it."""
    from huggingface_hub import scan_cache_dir

    from explorer.app.models import ModelStore
    from explorer.checkpoints.hub import prune_cache
    from explorer.convert import CONVERTED
    from tests.helpers import populate_hf_cache

    cache = tmp_path / "cache"
    snapshot = populate_hf_cache(cache, "keras-io/vit-small", keras2 / "vanilla", COMMIT)
    before = scan_cache_dir(cache).size_on_disk
    loaded = ModelStore(tmp_path / "root", cache_dir=str(cache)).get("keras-io/vit-small")
    assert loaded.folder == snapshot / CONVERTED / "keras-io-vit-small"
    assert loaded.converted_from["source"] == "keras-io/vit-small" and loaded.converted_from["revision"] == COMMIT
    np.testing.assert_allclose(probabilities(loaded.model, np.load(keras2 / "images.npy")),
                               np.load(keras2 / "vanilla.probs.npy"), atol=1e-5, rtol=0)
    written = (loaded.folder / "model.weights.h5").stat().st_mtime_ns
    again = ModelStore(tmp_path / "root", cache_dir=str(cache)).get("keras-io/vit-small@main")
    assert again.folder == loaded.folder and (loaded.folder / "model.weights.h5").stat().st_mtime_ns == written
    # The conversion counts in the cache's size, and goes with its repo.
    converted_bytes = sum(p.stat().st_size for p in loaded.folder.rglob("*") if p.is_file())
    assert scan_cache_dir(cache).size_on_disk == before + converted_bytes
    assert prune_cache(cache, 0) == ["keras-io/vit-small"] and not snapshot.exists()


def test_a_cached_repo_that_cannot_be_mapped_keeps_nothing(keras2, tmp_path):
    from explorer.app.models import ModelStore
    from explorer.checkpoints.store import CheckpointError
    from explorer.convert import CONVERTED
    from tests.helpers import populate_hf_cache

    snapshot = populate_hf_cache(tmp_path / "cache", "someone/cnn", keras2 / "cnn", COMMIT)
    store = ModelStore(tmp_path / "root", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(CheckpointError, match=r"layer 'rescaling' \(Rescaling\) \(layer 1 of the model\) is where"):
        store.get("someone/cnn")
    assert not (snapshot / CONVERTED).exists() or not any((snapshot / CONVERTED).iterdir())


if __name__ == "__main__":  # python -m tests.test_convert: rewrites the bundle with this machine's tf-keras
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        write_bundle(build_keras2(Path(tmp) / "built", keras2_specs()))
    print(f"wrote {BUNDLE} ({BUNDLE.stat().st_size / 2 ** 10:.0f} KiB)")
