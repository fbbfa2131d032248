import io
import pickle
import shutil
import zipfile

import numpy as np
import pytest
from PIL import Image

from explorer.data import (DatasetError, augment_batch, find_cifar, load_cifar, mix_batch, read_image_folder,
                           read_image_zip)


def test_cifar10_shapes_and_names(cifar10):
    assert cifar10.x_train.shape == (50000, 32, 32, 3) and cifar10.x_train.dtype == np.uint8
    assert cifar10.x_test.shape == (10000, 32, 32, 3)
    assert cifar10.y_train.shape == (50000,) and set(np.unique(cifar10.y_test)) == set(range(10))
    assert cifar10.class_names[:3] == ["airplane", "automobile", "bird"]


def test_cifar100_fine_labels_and_class_names_from_meta(data_dir):
    ds = load_cifar("cifar100", data_dir, download=False)
    assert ds.num_classes == 100
    assert ds.class_names[:3] == ["apple", "aquarium_fish", "baby"]
    assert ds.x_train.shape[1:] == (32, 32, 3) and len(ds.x_train) == len(ds.y_train) > 1000
    assert ds.y_train.max() < 100


def test_found_through_the_environment_variable(data_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("EXPLORER_DATA_DIR", str(data_dir))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert find_cifar("cifar10") == data_dir / "cifar-10-batches-py"


def test_missing_folder_names_every_place_tried(monkeypatch, tmp_path):
    monkeypatch.delenv("EXPLORER_DATA_DIR", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    with pytest.raises(DatasetError) as e:
        load_cifar("cifar10", tmp_path / "nowhere", download=False)
    assert str(tmp_path / "nowhere") in str(e.value) and str(tmp_path / "keras" / "datasets") in str(e.value)


def test_corrupt_batch_gives_a_clear_error(data_dir, tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    shutil.copytree(data_dir / "cifar-10-batches-py", folder)
    (folder / "data_batch_3").write_bytes(b"not a pickle at all")
    with pytest.raises(DatasetError, match="data_batch_3.*not a CIFAR pickle"):
        load_cifar("cifar10", tmp_path, download=False)
    (folder / "data_batch_3").unlink()
    with pytest.raises(DatasetError, match="missing file .*data_batch_3"):
        load_cifar("cifar10", tmp_path, download=False)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"labels": [1, 2]}, f)
    shutil.copy(data_dir / "cifar-10-batches-py" / "data_batch_3", folder / "data_batch_3")
    with pytest.raises(DatasetError, match="no b'data' entry"):
        load_cifar("cifar10", tmp_path, download=False)


def _png(color, size=(20, 12)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def test_image_folder_dataset(tmp_path):
    for name, color in (("cats", (255, 0, 0)), ("dogs", (0, 0, 255))):
        (tmp_path / name).mkdir()
        for i in range(5):
            (tmp_path / name / f"{i}.png").write_bytes(_png(color))
    ds = read_image_folder(tmp_path, image_size=32, test_fraction=0.2)
    assert ds.class_names == ["cats", "dogs"]
    assert len(ds.x_train) == 8 and len(ds.x_test) == 2 and ds.x_train.shape[1:] == (32, 32, 3)
    for x, y in zip(ds.x_train, ds.y_train):
        assert tuple(x[0, 0]) == ((255, 0, 0) if y == 0 else (0, 0, 255))


def _zip(tmp_path, members: dict) -> str:
    path = tmp_path / "data.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_zip_of_class_folders(tmp_path):
    path = _zip(tmp_path, {f"set/{c}/{i}.png": _png(col) for c, col in (("a", "red"), ("b", "blue"))
                           for i in range(4)})
    ds = read_image_zip(path, test_fraction=0.25)
    assert ds.class_names == ["a", "b"] and len(ds.x_train) + len(ds.x_test) == 8


@pytest.mark.parametrize("members, message", [
    ({"../x/evil.png": _png("red"), "ok/a.png": _png("red")}, "unsafe member path"),
    ({"/abs/a.png": _png("red")}, "unsafe member path"),
    ({"a.png": _png("red"), "b.png": _png("blue")}, "needs class folders"),
    ({"only/a.png": _png("red")}, "needs class folders"),
    ({"a/x.png": b"not an image", "b/y.png": _png("blue")}, "not a readable image"),
])
def test_bad_zips_are_refused(tmp_path, members, message):
    with pytest.raises(DatasetError, match=message):
        read_image_zip(_zip(tmp_path, members))


def test_zip_bomb_is_refused_before_reading(tmp_path):
    path = _zip(tmp_path, {"a/big.png": b"\0" * (3 * 2**20), "b/small.png": _png("blue")})
    with pytest.raises(DatasetError, match="expands to 3 MiB"):
        read_image_zip(path, max_bytes=2**20)


def test_not_a_zip(tmp_path):
    (tmp_path / "x.zip").write_text("hello")
    with pytest.raises(DatasetError, match="not a readable zip"):
        read_image_zip(tmp_path / "x.zip")


def test_augment_batch_is_a_flip_or_translation_of_the_input():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (16, 32, 32, 3), dtype=np.uint8)
    out = augment_batch(images, np.random.default_rng(1))
    assert out.shape == images.shape and out.dtype == np.uint8
    # the centre 24x24 of each output appears in the (possibly flipped) input
    for x, y in zip(images, out):
        found = any((cand[dy:dy + 24, dx:dx + 24] == y[4:28, 4:28]).all()
                    for cand in (x, x[:, ::-1]) for dy in range(9) for dx in range(9))
        assert found


def _labelled_constant_images(n=8, size=8):
    # image i is filled with the value 10 * i and labelled class i, so any mix can be read back from its pixels
    images = np.repeat(10.0 * np.arange(n, dtype="float32"), size * size * 3).reshape(n, size, size, 3)
    return images, np.eye(n, dtype="float32")


@pytest.mark.parametrize("method", ["mixup", "cutmix"])
def test_mix_batch_labels_weigh_the_pixels_they_mixed(method):
    images, labels = _labelled_constant_images()
    kwargs = {"mixup_alpha": 0.4} if method == "mixup" else {"cutmix_alpha": 1.0}
    seen_partial = False
    for seed in range(20):
        mixed, soft = mix_batch(images, labels, np.random.default_rng(seed), **kwargs)
        assert mixed.shape == images.shape and mixed.dtype == images.dtype and soft.dtype == labels.dtype
        np.testing.assert_allclose(soft.sum(axis=1), 1.0, rtol=1e-6)
        assert (np.count_nonzero(soft, axis=1) <= 2).all() and (soft.argmax(axis=1) >= 0).all()
        # each image's mean is the label-weighted mean of the two images mixed into it
        np.testing.assert_allclose(mixed.mean(axis=(1, 2, 3)), soft @ (10.0 * np.arange(8)), rtol=1e-5, atol=1e-4)
        for i in range(8):
            own_and_partner = {10.0 * j for j in np.flatnonzero(soft[i])}
            if method == "cutmix":  # every pixel comes whole from one of the two images, never a blend
                assert set(np.unique(mixed[i])) <= own_and_partner
            else:
                assert np.ptp(mixed[i]) < 1e-4
        seen_partial |= bool(((soft > 0.05) & (soft < 0.95)).any())
    assert seen_partial
    assert not np.shares_memory(mixed, images) and (images[3] == 30).all()  # the input batch is not touched


def test_mix_batch_off_or_skipped_returns_the_batch_unchanged():
    images, labels = _labelled_constant_images()
    assert mix_batch(images, labels, np.random.default_rng(0))[0] is images
    rng = np.random.default_rng(0)
    results = [mix_batch(images, labels, rng, mixup_alpha=0.2, cutmix_alpha=1.0, prob=0.5) for _ in range(200)]
    untouched = sum(out is images and soft is labels for out, soft in results)
    assert 70 < untouched < 130  # about half the batches are mixed
    cut = sum(out is not images and set(np.unique(out)) <= set(10.0 * np.arange(8)) and np.ptp(out[0]) > 0
              for out, _ in results)
    assert cut > 20  # and both methods are used when both alphas are set


def test_provenance_note_comes_from_the_datas_readme(cifar10, data_dir, tmp_path):
    assert "JPEG copy" in cifar10.note and "JPEG" in (data_dir / "README.md").read_text()
    shutil.copytree(data_dir / "cifar-100-python", tmp_path / "cifar-100-python")
    assert load_cifar("cifar100", tmp_path, download=False).note == ""
    assert cifar10.subset(train=10, test=10).note == cifar10.note
