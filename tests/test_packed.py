import io
import json
import pickle
import shutil

import numpy as np
import pytest

from explorer.data.datasets import DatasetError
from explorer.data.folders import load_dataset
from explorer.data.packed import encode, main, pack, read_packed


@pytest.fixture(scope="module")
def packed(data_dir, tmp_path_factory):
    """The tests' CIFAR-10 folder (2,000 training and 1,000 test images of the bundled sample) packed."""
    path = tmp_path_factory.mktemp("packed") / "cifar10-q90.npz"
    return path, pack(data_dir, path)


def _mae(a, b) -> float:
    return float(np.abs(a.astype(np.int16) - b).mean())


def test_round_trip_is_cifar10_within_the_stated_error(packed, cifar10):
    path, header = packed
    ds = load_dataset(str(path))
    assert ds.name == "cifar10" and ds.class_names == cifar10.class_names and ds.source == str(path)
    for x, y, original, labels, split in ((ds.x_train, ds.y_train, cifar10.x_train, cifar10.y_train, "train"),
                                          (ds.x_test, ds.y_test, cifar10.x_test, cifar10.y_test, "test")):
        assert x.shape == original.shape and x.dtype == np.uint8
        assert y.dtype == labels.dtype and np.array_equal(y, labels)
        assert header.splits[split].mae == pytest.approx(_mae(x, original), abs=1e-4)
        assert header.splits[split].count == len(original)
    # About 1.5/255 at quality 90 on pixels already decoded from JPEG on the same 8-px grid (the sample, and
    # the fixture's mirrored half of the training images); its other half, moved 2 px off that grid, costs more.
    assert 0.5 < _mae(ds.x_test, cifar10.x_test) < 2.0
    assert 0.5 < _mae(ds.x_train[:1000], cifar10.x_train[:1000]) < 2.0
    assert _mae(ds.x_train[1000:], cifar10.x_train[1000:]) < 4.0
    assert "packed JPEG copy of CIFAR-10" in ds.note and "quality 90" in ds.note and "test split" not in ds.note
    assert "public JPEG copy" in ds.note  # the source's own provenance is kept


def test_a_train_only_file_loads_with_an_empty_test_set_and_says_so(data_dir, cifar10, packed, tmp_path):
    path = tmp_path / "train.npz"
    header = pack(data_dir, path, splits=("train",))
    assert set(header.splits) == {"train"} and path.stat().st_size < packed[0].stat().st_size
    ds = load_dataset(str(path))
    assert ds.x_train.shape == cifar10.x_train.shape and np.array_equal(ds.y_train, cifar10.y_train)
    assert ds.x_test.shape == (0, 32, 32, 3) and ds.y_test.shape == (0,) and ds.x_test.dtype == np.uint8
    assert "no test split" in ds.note


def test_subsampling_444_costs_bytes_and_saves_error(data_dir, packed, tmp_path):
    _, default = packed
    full = pack(data_dir, tmp_path / "444.npz", splits=("test",), subsampling="4:4:4")
    assert full.splits["test"].jpeg_bytes > default.splits["test"].jpeg_bytes
    assert full.splits["test"].mae < default.splits["test"].mae


def _whole_jpegs(x):
    """Version 1's images: each a whole JPEG with its own optimized Huffman tables."""
    from PIL import Image
    blobs = []
    for image in x:
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, "JPEG", quality=90, subsampling="4:2:0", optimize=True)
        blobs.append(buf.getvalue())
    return np.frombuffer(b"".join(blobs), np.uint8), np.cumsum([0] + [len(b) for b in blobs]).astype(np.uint32)


def test_one_shared_header_saves_a_third_and_decodes_to_version_1s_pixels(packed, cifar10, tmp_path):
    """Version 2 keeps the JPEG header once per split (standard Huffman tables); Huffman coding is lossless, so
    its pixels are version 1's bit for bit, and a version 1 file still loads as it did."""
    path, header = packed
    ds = load_dataset(str(path))
    jpeg, offsets = _whole_jpegs(cifar10.x_train)
    with np.load(path) as z:
        prefix = z["train_prefix"]
        assert 500 < len(prefix) < 700 and prefix[:2].tobytes() == b"\xff\xd8"  # from the start of the file
        assert len(z["train_jpeg"]) + len(prefix) < 0.75 * len(jpeg)
    test_jpeg, test_offsets = _whole_jpegs(cifar10.x_test)
    old = tmp_path / "v1.npz"
    _rewrite(path, old, header=_header(path, version=1), train_prefix=None, test_prefix=None, train_jpeg=jpeg,
             train_offsets=offsets, test_jpeg=test_jpeg, test_offsets=test_offsets)
    v1 = load_dataset(str(old))
    assert header.version == 2
    for a, b in ((v1.x_train, ds.x_train), (v1.y_train, ds.y_train), (v1.x_test, ds.x_test), (v1.y_test, ds.y_test)):
        assert np.array_equal(a, b)


def _rewrite(src, dst, **changes):
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(changes)
    np.savez(dst, **{k: v for k, v in arrays.items() if v is not None})


def _header(path, **changes) -> np.ndarray:
    with np.load(path) as z:
        return np.asarray(json.dumps({**json.loads(str(z["header"])), **changes}))


@pytest.mark.parametrize("damage, message", [
    ("missing", "no such file"),
    ("truncated", "cannot be read .*truncated or not an .npz"),
    ("text", "cannot be read"),
    ("npy", "single .npy array"),
    ("foreign", "not a packed dataset.*holds x, y and no header"),
    ("other format", "format is 'something-else'"),
    ("newer", "version 3 of explorer-packed-cifar; this code reads versions 1 and 2"),
    ("no labels", "lacks train_labels"),
    ("offsets", "train split's arrays do not match its header"),
    ("bad jpeg", "train split decodes to other pixels than were packed"),
    ("bad header", "train: image 0 cannot be decoded"),
    ("wrong size", "train: image 0 cannot be decoded .*64x64 px, not RGB 32x32"),
])
def test_a_bad_file_names_itself_and_what_is_wrong(packed, tmp_path, damage, message):
    src, bad = packed[0], tmp_path / "bad.npz"
    if damage == "truncated":
        bad.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    elif damage == "text":
        bad.write_text("hello")
    elif damage == "npy":
        with open(bad, "wb") as f:
            np.save(f, np.zeros(3))
    elif damage == "foreign":
        np.savez(bad, x=np.zeros(3), y=np.ones(3))
    elif damage == "other format":
        _rewrite(src, bad, header=_header(src, format="something-else"))
    elif damage == "newer":
        _rewrite(src, bad, header=_header(src, version=3))
    elif damage == "no labels":
        _rewrite(src, bad, train_labels=None)
    elif damage == "offsets":
        with np.load(src) as z:
            _rewrite(src, bad, train_offsets=z["train_offsets"][:-1])
    elif damage == "bad jpeg":
        with np.load(src) as z:
            jpeg, offsets = z["train_jpeg"].copy(), z["train_offsets"]
        jpeg[offsets[3]:offsets[4]] = 7
        _rewrite(src, bad, train_jpeg=jpeg)
    elif damage == "bad header":
        with np.load(src) as z:
            _rewrite(src, bad, train_prefix=z["train_prefix"][:100])
    elif damage == "wrong size":
        prefix, jpeg, offsets = encode(np.zeros((2000, 64, 64, 3), np.uint8))
        _rewrite(src, bad, train_prefix=prefix, train_jpeg=jpeg, train_offsets=offsets.astype(np.uint32))
    with pytest.raises(DatasetError, match=message) as e:
        load_dataset(str(bad))
    assert str(bad) in str(e.value)


def test_the_commands_pack_and_check(data_dir, tmp_path, capsys):
    out = tmp_path / "c.npz"
    assert main(["pack", "--data-dir", str(data_dir), "--out", str(out), "--splits", "test"]) == 0
    printed = capsys.readouterr().out
    assert "test: 1,000 images" in printed and "MiB" in printed and "mean absolute error 1." in printed
    assert "wrote" in printed and set(read_packed(out)[0].splits) == {"test"}
    assert main(["check", str(out), "--data-dir", str(data_dir)]) == 0
    assert "its source matches" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["check", "{tmp}/nothing.npz"], "nothing.npz: no such file"),
    (["pack", "--data-dir", "{tmp}", "--out", "{tmp}/c.npz"], "no cifar10 data here"),
    (["pack", "--data-dir", "{data}", "--out", "{tmp}/c.bin"], "ends in .npz"),
    (["pack", "--data-dir", "{data}", "--out", "{tmp}/c.npz", "--splits", "train,val"], "splits train,val"),
    (["pack", "--data-dir", "{data}", "--out", "{tmp}/c.npz", "--quality", "0"], "quality 0"),
])
def test_the_commands_refuse_bad_input_with_exit_code_2(data_dir, tmp_path, capsys, argv, message):
    argv = [a.format(tmp=tmp_path, data=data_dir) for a in argv]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c.npz").exists() and not list(tmp_path.glob(".c.npz.*"))


def test_check_refuses_a_source_it_was_not_packed_from(packed, data_dir, tmp_path, capsys):
    folder = tmp_path / "cifar-10-batches-py"
    shutil.copytree(data_dir / "cifar-10-batches-py", folder)
    with open(folder / "data_batch_2", "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    batch[b"data"] = 255 - batch[b"data"]
    with open(folder / "data_batch_2", "wb") as f:
        pickle.dump(batch, f)
    assert main(["check", str(packed[0]), "--data-dir", str(tmp_path)]) == 2
    assert "train pixels in" in capsys.readouterr().err
