import io
import os
import pickle
import shutil
import zipfile

import numpy as np
import pytest
from PIL import Image

from explorer.data.augment import augment_batch, mix_batch
from explorer.data.datasets import DatasetError, find_cifar, keras_cache_dir, load_cifar
from explorer.data.folders import read_image_folder, read_image_zip


def test_cifar10_read_back_exactly_as_written(cifar10, data_dir):
    from explorer.data.datasets import sample_set
    from tests.helpers import training_images
    x_train, y_train = training_images(sample_set())
    assert cifar10.x_train.shape == (2000, 32, 32, 3) and cifar10.x_train.dtype == np.uint8
    np.testing.assert_array_equal(cifar10.x_train, x_train)  # channel-major pickles back to (N, H, W, 3)
    np.testing.assert_array_equal(cifar10.y_train, y_train)
    np.testing.assert_array_equal(cifar10.x_test, sample_set().x_test)
    assert cifar10.y_test.shape == (1000,) and set(np.unique(cifar10.y_test)) == set(range(10))
    assert cifar10.class_names[:3] == ["airplane", "automobile", "bird"]
    assert cifar10.source == str(data_dir / "cifar-10-batches-py") and not cifar10.sample


def test_cifar100_fine_labels_and_class_names_from_meta(data_dir):
    ds = load_cifar("cifar100", data_dir, download=False)
    assert ds.num_classes == 100
    assert ds.class_names[:3] == ["apple", "aquarium_fish", "baby"]
    assert ds.x_train.shape[1:] == (32, 32, 3) and len(ds.x_train) == len(ds.y_train) == 2000
    np.testing.assert_array_equal(ds.y_train, (np.arange(2000) * 7) % 100)  # fine labels, not coarse ones
    np.testing.assert_array_equal(ds.y_test, (np.arange(1000) * 3) % 100)


def test_found_through_the_environment_variable(data_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("EXPLORER_DATA_DIR", str(data_dir))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert find_cifar("cifar10") == data_dir / "cifar-10-batches-py"


def test_a_folder_given_replaces_the_environment_variable(data_dir, no_data, monkeypatch):
    monkeypatch.setenv("EXPLORER_DATA_DIR", str(data_dir))
    assert find_cifar("cifar10", no_data) is None
    with pytest.raises(DatasetError) as e:
        load_cifar("cifar10", no_data, download=False)
    assert str(no_data) in str(e.value) and str(data_dir) not in str(e.value)


def test_found_in_the_keras_cache_in_keras_datasets_layout(data_dir, no_data):
    cache = keras_cache_dir()
    assert str(cache) == os.environ["KERAS_HOME"] + "/datasets"
    (cache / "cifar-10-batches-py-target").mkdir(parents=True)
    shutil.copytree(data_dir / "cifar-10-batches-py", cache / "cifar-10-batches-py-target" / "cifar-10-batches-py")
    assert find_cifar("cifar10", no_data) == cache / "cifar-10-batches-py-target" / "cifar-10-batches-py"
    assert len(load_cifar("cifar10", no_data, download=False).x_test) == 1000


def test_missing_folder_names_every_place_tried_and_what_to_do(no_data):
    with pytest.raises(DatasetError) as e:
        load_cifar("cifar10", no_data, download=False)
    message = str(e.value)
    assert str(no_data) in message and str(keras_cache_dir()) in message
    assert "EXPLORER_DATA_DIR" in message and "cifar-10-python.tar.gz" in message


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
    for x, y in zip(ds.x_train, ds.y_train, strict=True):
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


def test_a_few_unreadable_images_are_left_out_and_named_more_are_refused(tmp_path):
    """Photos as people upload them: one broken file of twelve is left out, and the dataset says which and why
    (a fine-tune's description and report, a Trust summary and the card show it); more than a tenth
    unreadable, or a class left with none, refuses the upload with the reason. A folder reads the same."""
    good = {f"photos/{c}/{i}.png": _png(col) for c, col in (("cats", "red"), ("dogs", "blue")) for i in range(6)}
    ds = read_image_zip(_zip(tmp_path, {**good, "photos/dogs/6.jpg": b"\xff\xd8 half a jpeg"}))
    assert ds.class_names == ["cats", "dogs"] and len(ds.x_train) + len(ds.x_test) == 12 and ds.unreadable == 1
    assert ds.note.startswith("1 of 13 images could not be read and were left out (photos/dogs/6.jpg is not a "
                              "readable image (UnidentifiedImageError"), ds.note
    assert read_image_zip(_zip(tmp_path, good)).unreadable == 0 and read_image_zip(_zip(tmp_path, good)).note == ""
    broken = {f"photos/dogs/{i}.jpg": b"not an image" for i in range(2)}
    with pytest.raises(DatasetError, match=r"data.zip: 2 of 14 images could not be read \(photos/dogs/0.jpg is"):
        read_image_zip(_zip(tmp_path, {**good, **broken}))
    many = {**good, **{f"photos/{c}/{i}.png": _png("red") for c in ("cats", "dogs") for i in range(6, 30)}}
    with pytest.raises(DatasetError, match="class 'owls' has no readable image"):
        read_image_zip(_zip(tmp_path, {**many, "photos/owls/0.png": b"not an image"}))
    phone = {f"photos/{c}/{i}.HEIC": b"ftypheic" for c in ("cats", "dogs") for i in range(6)}
    with pytest.raises(DatasetError, match=r"12 of 12 images could not be read \(photos/cats/0.HEIC is not a "
                                           r"readable image \(HEIC is not a format this app reads; save it as JPEG"):
        read_image_zip(_zip(tmp_path, phone))
    for name, data in {**good, "photos/dogs/6.jpg": b"not an image"}.items():
        (tmp_path / "folder" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "folder" / name).write_bytes(data)
    ds = read_image_folder(tmp_path / "folder" / "photos")
    assert ds.unreadable == 1 and "dogs/6.jpg is not a readable image" in ds.note


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
    for x, y in zip(images, out, strict=True):
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


# --- the bundled sample ----------------------------------------------------------------------------


def test_the_bundled_sample_is_small_plain_and_complete():
    from explorer.data.datasets import SAMPLE_FILE, sample_set
    assert SAMPLE_FILE.stat().st_size <= 5 * 2**20
    with np.load(SAMPLE_FILE, allow_pickle=False) as z:  # plain arrays: no pickles inside
        assert set(z.files) == {"images", "labels", "class_names", "test_index", "note"}
        np.testing.assert_array_equal(z["test_index"], np.arange(1000))  # the first 1,000 test images
    ds = sample_set()
    assert ds.sample and ds.name == "cifar10" and ds.x_test.shape == (1000, 32, 32, 3) and ds.x_test.dtype == np.uint8
    assert len(ds.x_train) == 0 and ds.class_names[:3] == ["airplane", "automobile", "bird"]
    assert np.bincount(ds.y_test, minlength=10).min() >= 50  # every class, at least 50 of each
    assert "JPEG copy" in ds.note and "bundled" in ds.note
    with pytest.raises(ValueError):  # one copy shared by every session: read-only
        ds.x_test[0, 0, 0, 0] = 1


def test_the_sample_stands_in_for_the_test_set_when_nothing_else_is_here(no_data, data_dir):
    from explorer.data.datasets import load_test_set, sample_set
    assert load_test_set("cifar10", no_data, need=1000) is sample_set()
    assert not load_test_set("cifar10", data_dir, need=10).sample  # a real folder comes first
    with pytest.raises(DatasetError) as e:  # more than the sample, offline: what to do
        load_test_set("cifar10", no_data, need=1001)
    assert "EXPLORER_DATA_DIR" in str(e.value) and str(keras_cache_dir()) in str(e.value)
    with pytest.raises(DatasetError, match="need the full data set"):
        load_test_set("cifar10", no_data, need=1001, download=False)
    with pytest.raises(DatasetError, match="cifar100"):  # no CIFAR-100 sample
        load_test_set("cifar100", no_data)


def test_make_sample_set_regenerates_it_from_a_cifar_folder(data_dir, tmp_path):
    import subprocess
    import sys

    from explorer.data.datasets import SAMPLE_FILE
    from tests.helpers import ROOT
    out = tmp_path / "sample.npz"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "make_sample_set.py"),
                           str(data_dir / "cifar-10-batches-py"), "--out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    with np.load(out) as new, np.load(SAMPLE_FILE) as shipped:  # the test folder's test batch is the sample
        for key in ("images", "labels", "class_names", "test_index", "note"):
            np.testing.assert_array_equal(new[key], shipped[key])


# --- downloads, from a real HTTP server on 127.0.0.1 ----------------------------------------------


def _archive(data_dir, path, inner="cifar-10-batches-py"):
    import tarfile
    with tarfile.open(path, "w:gz") as tar:
        tar.add(data_dir / "cifar-10-batches-py", arcname=inner)
    return path


@pytest.fixture
def server(tmp_path, monkeypatch, no_data):
    """An HTTP server on 127.0.0.1 serving `root`, where downloads go (after no_data); it counts requests."""
    import functools
    import http.server
    import threading
    root = tmp_path / "www"
    root.mkdir()
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            requests.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("EXPLORER_CIFAR_URL", f"http://127.0.0.1:{httpd.server_address[1]}/mirror/")
    yield root, requests
    httpd.shutdown()
    httpd.server_close()


def test_download_once_into_the_keras_cache_with_progress(server, no_data, data_dir):
    from explorer.data.datasets import load_test_set
    root, requests = server
    (root / "mirror").mkdir()
    _archive(data_dir, root / "mirror" / "cifar-10-python.tar.gz")
    seen = []
    ds = load_cifar("cifar10", no_data, progress=lambda fraction, message: seen.append((fraction, message)))
    np.testing.assert_array_equal(ds.x_test, load_cifar("cifar10", data_dir).x_test)
    assert len(ds.x_train) == 2000 and requests == ["/mirror/cifar-10-python.tar.gz"]
    cache = keras_cache_dir()  # keras.datasets' own layout
    assert ds.source == str(cache / "cifar-10-batches-py-target" / "cifar-10-batches-py")
    assert (cache / "cifar-10-batches-py-target_archive").is_file()
    assert sorted(p.name for p in cache.iterdir()) == ["cifar-10-batches-py-target",
                                                       "cifar-10-batches-py-target_archive"]
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and "MiB" in seen[0][1]
    assert "unpacking" in seen[-1][1]
    load_cifar("cifar10", no_data)  # then used, never downloaded again
    assert load_test_set("cifar10", no_data, need=1001).source == ds.source
    assert len(requests) == 1


@pytest.mark.parametrize("problem, message", [
    ("missing", "answered 404"), ("not a tar", "not a readable cifar-10-python.tar.gz"),
    ("other layout", "does not hold cifar-10-batches-py/batches.meta"), ("offline", "Connection refused"),
])
def test_a_failed_download_says_what_to_do_and_leaves_nothing(server, no_data, data_dir, monkeypatch, problem,
                                                               message):
    root, _ = server
    (root / "mirror").mkdir()
    if problem == "not a tar":
        (root / "mirror" / "cifar-10-python.tar.gz").write_bytes(b"<html>a captive portal</html>")
    elif problem == "other layout":
        _archive(data_dir, root / "mirror" / "cifar-10-python.tar.gz", inner="somewhere-else")
    elif problem == "offline":
        monkeypatch.setenv("EXPLORER_CIFAR_URL", "http://127.0.0.1:9/")
    with pytest.raises(DatasetError, match=message) as e:
        load_cifar("cifar10", no_data)
    if problem in ("missing", "offline"):
        assert "EXPLORER_DATA_DIR" in str(e.value) and "cifar-10-python.tar.gz" in str(e.value)
    cache = keras_cache_dir()
    assert not (cache / "cifar-10-batches-py-target").exists()
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary file or folder left


def test_a_truncated_download_is_not_kept(no_data, monkeypatch):
    import http.server
    import threading

    class Short(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(10 * 2**20))
            self.end_headers()
            self.wfile.write(b"\0" * 2**20)  # then the connection drops

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Short)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("EXPLORER_CIFAR_URL", f"http://127.0.0.1:{httpd.server_address[1]}")
    try:
        with pytest.raises(DatasetError, match="could not be downloaded|stopped after"):
            load_cifar("cifar10", no_data)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert list(keras_cache_dir().iterdir()) == []


def test_an_archive_put_in_the_keras_cache_by_hand_is_used_offline(no_data, data_dir):
    cache = keras_cache_dir()
    cache.mkdir(parents=True)
    _archive(data_dir, cache / "cifar-10-python.tar.gz")
    assert len(load_cifar("cifar10", no_data).x_train) == 2000  # the URL is a closed port: no download


@pytest.mark.parametrize("has_data_filter", [True, False], ids=["python-3.11.4+", "older-tarfile"])
@pytest.mark.parametrize("member, kind", [("../evil", "file"), ("/abs/evil", "file"),
                                          ("cifar-10-batches-py/link", "symlink")])
def test_an_archive_with_a_member_outside_its_folder_or_a_link_is_refused(no_data, data_dir, tmp_path, monkeypatch,
                                                                         member, kind, has_data_filter):
    import io
    import tarfile
    if not has_data_filter:  # Python before 3.11.4 (Debian 12's 3.11.2) has no extraction filters
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    cache = keras_cache_dir()
    cache.mkdir(parents=True)
    archive = _archive(data_dir, cache / "cifar-10-python.tar.gz")
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    with tarfile.open(archive, "w:gz") as tar:
        for m, data in members:
            tar.addfile(m, io.BytesIO(data) if data is not None else None)
        extra = tarfile.TarInfo(member)
        if kind == "symlink":
            extra.type, extra.linkname = tarfile.SYMTYPE, str(tmp_path / "outside")
            tar.addfile(extra)
        else:
            extra.size = 4
            tar.addfile(extra, io.BytesIO(b"evil"))
    with pytest.raises(DatasetError, match="not a plain file or folder inside the archive's own folder"):
        load_cifar("cifar10", no_data)
    assert not (cache / "cifar-10-batches-py-target").exists()
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary folder left
    assert not (tmp_path / "outside").exists() and not (cache.parent / "evil").exists()


def test_an_archive_unpacks_without_tarfile_filters(no_data, data_dir, monkeypatch):
    import tarfile
    monkeypatch.delattr(tarfile, "data_filter", raising=False)  # as on Python before 3.11.4
    cache = keras_cache_dir()
    cache.mkdir(parents=True)
    _archive(data_dir, cache / "cifar-10-python.tar.gz")
    np.testing.assert_array_equal(load_cifar("cifar10", no_data).x_test, load_cifar("cifar10", data_dir).x_test)


def test_folders_split_each_class_and_say_when_the_test_part_is_too_small(tmp_path):
    from explorer.data.folders import held_out_problem, images_per_class_needed
    for name, count in (("a", 10), ("b", 5), ("c", 3), ("d", 2)):
        (tmp_path / name).mkdir()
        for i in range(count):
            (tmp_path / name / f"{i}.png").write_bytes(_png("red"))
    ds = read_image_folder(tmp_path, test_fraction=0.2)
    assert np.bincount(ds.y_test, minlength=4).tolist() == [2, 1, 1, 0]  # round(n / 5) of each class
    assert len(ds.x_train) == 16
    assert images_per_class_needed(4) == 13 and images_per_class_needed(10) == 3 and images_per_class_needed(2) == 23
    problem = held_out_problem(ds)
    assert "would hold 4, too few" in problem
    assert "at least 13 images per class (52 in all; the smallest class here has 2)" in problem
    assert held_out_problem(read_image_folder(tmp_path, test_fraction=0.0)) is not None
    for name in "abcd":
        for i in range(13):
            (tmp_path / name / f"more{i}.png").write_bytes(_png("blue"))
    assert held_out_problem(read_image_folder(tmp_path, test_fraction=0.2)) is None


def test_a_dataset_restricted_to_some_of_its_classes(cifar10):
    """The test set of a model that knows three CIFAR-10 classes: their images alone, labelled in its order."""
    names = ["ship", "cat", "dog"]
    kept = cifar10.restricted(names)
    assert kept.class_names == names and kept.name == "cifar10 (ship, cat, dog)"
    for i, name in enumerate(names):
        assert (kept.y_test == i).sum() == (cifar10.y_test == cifar10.class_names.index(name)).sum()
    original = [cifar10.class_names.index(n) for n in names]
    mask = np.isin(cifar10.y_test, original)
    assert np.array_equal(kept.x_test, cifar10.x_test[mask])
    assert [names[y] for y in kept.y_test] == [cifar10.class_names[y] for y in cifar10.y_test[mask]]
    with pytest.raises(DatasetError, match="no class 'apple'"):
        cifar10.restricted(["cat", "apple"])
