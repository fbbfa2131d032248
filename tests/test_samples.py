"""Test images for the app, without a server: the shared dataset cache, samples as files, true labels."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PIL import Image

from explorer.data.samples import TestImages, examples


def test_a_sample_is_a_png_named_after_its_index_and_label(tmp_path, data_dir, cifar10):
    tests = TestImages(str(data_dir), tmp_path)
    s = tests.sample("cifar10", "cat", seed=3)
    assert cifar10.class_names[cifar10.y_test[s.index]] == "cat" == s.label
    assert s.path.endswith(f"cifar10-test-{s.index:05d}-cat.png")
    np.testing.assert_array_equal(np.asarray(Image.open(s.path)), cifar10.x_test[s.index])
    assert tests.sample("cifar10", "cat", seed=3).index == s.index  # a seed picks reproducibly
    assert tests.identify(s.path) == ("cifar10", s.index, "cat") and tests.true_label(s.path) == "cat"
    with pytest.raises(ValueError, match="'dragon' is not a cifar10 class"):
        tests.sample("cifar10", "dragon")


def test_only_files_named_like_samples_have_a_label(tmp_path, data_dir):
    tests = TestImages(str(data_dir), tmp_path)
    assert tests.true_label(tmp_path / "holiday.png") is None
    assert tests.true_label(tmp_path / "cifar10-test-99999-cat.png") is None  # beyond the test set


def test_the_dataset_is_loaded_once_for_every_session(tmp_path, data_dir):
    tests = TestImages(str(data_dir), tmp_path)
    got = []
    threads = [threading.Thread(target=lambda: got.append(tests.dataset("cifar10"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(ds) for ds in got}) == 1


def test_concurrent_samplers_never_see_half_a_file(tmp_path, data_dir):
    tests = TestImages(str(data_dir), tmp_path)
    paths = []
    threads = [threading.Thread(target=lambda: paths.append(tests.sample("cifar10", seed=1).path)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(paths)) == 1 and Image.open(paths[0]).size == (32, 32)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_missing_examples_folder_gives_none(tmp_path):
    assert examples(tmp_path) == []
    (tmp_path / "examples.json").write_text("not json")
    assert examples(tmp_path) == []


def test_a_random_sample_is_of_the_classes_a_model_knows(tmp_path, data_dir):
    tests = TestImages(str(data_dir), tmp_path)
    labels = {tests.sample("cifar10", "random", seed=s, classes=["cat", "dog", "ship"]).label for s in range(40)}
    assert labels == {"cat", "dog", "ship"}
