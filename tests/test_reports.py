"""Reports over many test images, without a server: disagreements and attention locality."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.analysis import reports
from explorer.app.models import ModelStore
from explorer.app.results import ResultCache
from explorer.model.probe import attention_entropy, mean_attention_distance


@pytest.fixture(scope="module")
def pair(tiny_checkpoints):
    store = ModelStore("/")
    return store.get(str(tiny_checkpoints["vanilla"])), store.get(str(tiny_checkpoints["spt_lsa"]))


def test_disagreements_count_what_each_model_gets_right(pair, cifar10):
    a, b = pair
    report = reports.disagreements(a, b, cifar10, 200)
    x, y = cifar10.x_test[:200], cifar10.y_test[:200]
    pa, pb = (np.asarray(loaded.model.predict(x.astype("float32"), verbose=0)).argmax(-1) for loaded in pair)
    np.testing.assert_array_equal(report.predictions, np.stack([pa, pb]))
    np.testing.assert_array_equal(report.differ, np.flatnonzero(pa != pb))
    assert f"A **{100 * (pa == y).mean():.1f} %** top-1" in report.summary()
    assert f"they disagree on **{int((pa != pb).sum())}**" in report.summary()
    rows = report.per_class()
    assert [r[0] for r in rows] == cifar10.class_names
    for c, row in enumerate(rows):
        seen = y == c
        if seen.any():
            gain = 100 * ((pb[seen] == c).mean() - (pa[seen] == c).mean())
            assert row[3] == f"{gain:+.1f}"
    for i, caption in report.captions(limit=5):
        assert pa[i] != pb[i] and caption.startswith(f"#{i} true {cifar10.class_names[y[i]]}")


def test_disagreements_refuse_what_cannot_be_compared(pair, cifar10):
    a, b = pair
    with pytest.raises(ValueError, match="at least one"):
        reports.disagreements(a, b, cifar10, 0)
    assert reports.disagreements(a, b, cifar10, 10**9).count == len(cifar10.x_test)


def test_locality_of_one_image_uses_the_cache_and_of_many_the_probe(pair, cifar10):
    a, b = pair
    cache = ResultCache()
    one = reports.locality([("A", a), ("B", b)], cifar10.x_test[:1], cache)
    assert cache.get(a, cifar10.x_test[0])[2]  # the single image went through the shared cache
    batch = cifar10.x_test[:8]
    many = reports.locality([("A", a), ("B", b)], batch)
    attention = b.probe(batch).attention
    np.testing.assert_allclose(many.distance["B"], mean_attention_distance(attention, b.config.grid_size,
                                                                           b.config.pixels_per_patch))
    np.testing.assert_allclose(many.entropy["B"], attention_entropy(attention))
    assert [r[0] for r in one.rows()] == ["A", "B"] and one.distance["A"].shape == many.distance["A"].shape


def test_top5_is_left_out_below_six_classes_and_small_splits_are_named():
    from explorer.analysis.reports import small_splits, without_top5
    columns, rows = ["model", "test top-1", "test top-5", "device"], [["A", "90.0 %", "100.0 %", "CPU"]]
    assert without_top5(columns, rows, 3) == (["model", "test top-1", "device"], [["A", "90.0 %", "CPU"]])
    assert without_top5(columns, rows, 6) == (columns, rows)
    text = small_splits({"validation": 10, "test": 12})
    assert "validation: 10 images, each worth 10 points" in text and "test: 12 images, each worth 8.33 points" in text
    assert small_splits({"validation": 50, "test": 2000}) == "" and small_splits({"validation": 0}) == ""
