"""A fine-tune's held-out images beside its weights (explorer/checkpoints/held_out.py): written as the job's
test split, read back in the model's class order; a file that does not fit reads as none, never as an error."""

from __future__ import annotations

import numpy as np

from explorer.checkpoints.held_out import HELD_OUT, read_held_out, write_held_out


def images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 8, 8, 3), dtype=np.uint8)


def test_held_out_images_come_back_in_the_models_class_order(tmp_path):
    x, y = images(12), np.arange(12) % 3
    assert write_held_out(tmp_path, x, y, ["fig", "date", "apple"], "fruit") == tmp_path / HELD_OUT
    ds = read_held_out(tmp_path, ["apple", "date", "fig"])
    assert ds is not None and ds.class_names == ["apple", "date", "fig"] and "fruit" in ds.name
    np.testing.assert_array_equal(ds.x_test, x)
    # the same images carry the same class names, each now an index into the model's list
    assert [ds.class_names[i] for i in ds.y_test] == [["fig", "date", "apple"][i] for i in y]
    assert len(ds.x_train) == 0


def test_what_does_not_fit_reads_as_none(tmp_path):
    assert read_held_out(tmp_path, ["a", "b"]) is None  # no file
    assert write_held_out(tmp_path, images(0), np.zeros(0), ["a", "b"], "all trained on") is None
    assert not (tmp_path / HELD_OUT).exists()
    write_held_out(tmp_path, images(4), [0, 1, 0, 1], ["a", "b"], "set")
    assert read_held_out(tmp_path, ["a", "c"]) is None  # other classes than the model's
    assert read_held_out(tmp_path, ["a", "b", "c"]) is None
    (tmp_path / HELD_OUT).write_bytes((tmp_path / HELD_OUT).read_bytes()[:100])  # cut short
    assert read_held_out(tmp_path, ["a", "b"]) is None
