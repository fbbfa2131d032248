"""Tests of explorer.analysis.trust: whole-set answers, confusion, Wilson intervals, calibration and temperature
scaling, on synthetic logits with known answers, tiny real models and the shipped pair."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from explorer.analysis import trust
from explorer.model.models import build_vit
from explorer.model.predict import predict_logits
from tests.helpers import ROOT, tiny_config

CIFAR = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def test_wilson_matches_the_published_formula():
    # Newcombe (1998), table I: 81/263 -> 0.2553 .. 0.3662 (score interval, no continuity correction).
    low, high = trust.wilson(81, 263)
    assert low == pytest.approx(0.2553, abs=1e-4) and high == pytest.approx(0.3662, abs=1e-4)
    assert trust.wilson(0, 0) == (0.0, 1.0)
    low, high = trust.wilson(10, 10)
    assert high == pytest.approx(1.0) and 0.69 < low < 0.73  # never the degenerate [1, 1] a normal interval gives


def test_confusion_rows_are_true_classes():
    labels = np.array([0, 0, 1, 2, 2, 2])
    predicted = np.array([0, 1, 1, 2, 0, 2])
    m = trust.confusion(labels, predicted, 3)
    assert m.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]
    classes = trust.per_class(m, ["a", "b", "c"])
    assert [c.accuracy for c in classes] == [0.5, 1.0, pytest.approx(2 / 3)]


def test_reliability_and_ece_by_hand():
    # Two images at confidence 0.9 (one right), two at 0.6 (both right): bins (0.8667, 0.9333] and (0.6, 0.6667].
    p_hi, p_lo = 0.9, 0.6
    logits = np.log(np.array([[p_hi, 1 - p_hi], [p_hi, 1 - p_hi], [p_lo, 1 - p_lo], [p_lo, 1 - p_lo]]))
    labels = np.array([0, 1, 0, 0])
    r = trust.reliability(logits, labels, bins=15)
    assert r.counts.sum() == 4 and r.bins == 15 and (r.counts > 0).sum() == 2
    expected = 0.5 * abs(0.5 - 0.9) + 0.5 * abs(1.0 - 0.6)
    assert r.ece == pytest.approx(expected)
    assert r.nll == pytest.approx(-np.mean(np.log([0.9, 0.1, 0.6, 0.6])))


def synthetic(n=20000, classes=10, scale=3.0, seed=0):
    """Labels drawn from softmax(z): z is calibrated by construction; z * scale is overconfident."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1.5, size=(n, classes))
    p = np.exp(trust.log_softmax(z))
    labels = (p.cumsum(-1) > rng.random((n, 1))).argmax(-1)
    return z, z * scale, labels


def test_temperature_scaling_recovers_a_known_overconfidence():
    z, overconfident, labels = synthetic()
    assert trust.fit_temperature(overconfident, labels) == pytest.approx(3.0, rel=0.08)
    assert trust.fit_temperature(z, labels) == pytest.approx(1.0, rel=0.08)
    c = trust.calibrate(overconfident, labels)
    assert c.fit_count + c.held_count == len(labels)
    assert c.before.ece > 0.1 and c.after.ece < 0.03 and c.after.nll < c.before.nll
    assert trust.reliability(z, labels).ece < 0.03


def test_calibration_split_is_a_stratified_half_and_fixed():
    labels = np.repeat(np.arange(4), [10, 11, 2, 7])
    fit, held = trust.calibration_split(labels)
    assert not set(fit) & set(held) and len(fit) + len(held) == len(labels)
    assert np.bincount(labels[fit], minlength=4).tolist() == [5, 5, 1, 3]
    again = trust.calibration_split(labels)
    assert np.array_equal(fit, again[0])
    assert not np.array_equal(fit, trust.calibration_split(labels, seed=1)[0])


@pytest.fixture(scope="module")
def tiny_pair():
    return [build_vit(tiny_config(variant=v), 10) for v in ("vanilla", "spt_lsa")]


def labelled(n=40, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    return trust.LabelledSet("random", images, np.arange(n) % 10, CIFAR, np.arange(n))


def test_predict_matches_the_model_in_any_chunking(tiny_pair):
    data = labelled(trust.CHUNK + 3)
    logits = trust.predict(tiny_pair[0], data.images)
    assert np.allclose(logits, predict_logits(tiny_pair[0], data.images), atol=1e-5)


def test_trust_pair_on_tiny_models(tiny_pair):
    data = labelled(60)
    seen = []
    report = trust.trust_pair(tiny_pair, data, progress=lambda f, m: seen.append(f))
    assert seen and seen[-1] == pytest.approx(1.0)
    for i, m in enumerate(report.models):
        assert m.confusion.sum() == 60 and m.confusion.sum(1).tolist() == [6] * 10
        assert np.trace(m.confusion) == report.correct(i).sum()
        # Each cell's images are exactly the ones the matrix counts.
        t, p = 3, int(m.predicted[3])
        assert len(report.cell(i, t, p)) == m.confusion[t, p] and 3 in report.cell(i, t, p)
    only_a, only_b = report.only_right(0), report.only_right(1)
    assert not set(only_a) & set(only_b)
    assert (report.correct(0)[only_a] & ~report.correct(1)[only_a]).all()
    assert (report.correct(1)[only_b] & ~report.correct(0)[only_b]).all()
    assert len(only_a) - len(only_b) == report.correct(0).sum() - report.correct(1).sum()
    s = report.summary()
    assert s["images"] == 60 and s["bins"] == trust.BINS and len(s["models"][1]["per_class"]) == 10
    assert report.caption(0).startswith("airplane · A: ")


def test_set_key_names_the_content():
    a, b = labelled(10), labelled(10)
    assert a.key == b.key
    c = trust.LabelledSet("random", a.images, (a.labels + 1) % 10, CIFAR, a.indices)
    assert c.key != a.key


def write_zip(path, folders):
    from PIL import Image
    with zipfile.ZipFile(path, "w") as z:
        for folder, count in folders.items():
            for k in range(count):
                buf = io.BytesIO()
                Image.fromarray(np.full((40, 40, 3), 20 * k, np.uint8)).save(buf, format="PNG")
                z.writestr(f"photos/{folder}/{k}.png", buf.getvalue())
    return path


def test_labelled_zip_maps_folders_onto_the_models_classes(tmp_path):
    data = trust.labelled_zip(write_zip(tmp_path / "mine.zip", {"dog": 3, "cat": 2}), CIFAR)
    assert data.count == 5 and data.images.shape == (5, 32, 32, 3)
    assert sorted(data.labels.tolist()) == [3, 3, 5, 5, 5]  # cat = 3, dog = 5 in CIFAR-10's order
    with pytest.raises(ValueError, match="do not predict \\['pumpkin'\\]"):
        trust.labelled_zip(write_zip(tmp_path / "odd.zip", {"cat": 2, "pumpkin": 2}), CIFAR)
    cased = trust.labelled_zip(write_zip(tmp_path / "cased.zip", {"Dog": 3, "CAT": 2}), CIFAR)  # as a fine-tune reads
    assert sorted(cased.labels.tolist()) == [3, 3, 5, 5, 5]


def test_shipped_pair_on_the_bundled_sample():
    from explorer.checkpoints.store import load_checkpoint
    from explorer.data.datasets import sample_set
    models = [load_checkpoint(ROOT / "checkpoints" / n)[0] for n in ("cifar10-vanilla", "cifar10-spt_lsa")]
    data = trust.test_set(sample_set(), 300)
    report = trust.trust_pair(models, data)
    for m in report.models:
        assert 0.6 < m.accuracy < 0.95  # the cards say about 77 % and 82 % on the full test set
        assert 0.5 < m.calibration.temperature < 5
    assert report.data.name == "cifar10 test images 0-299"


def test_the_shipped_logits_are_what_each_shipped_model_predicts_on_the_trust_tabs_first_set(tmp_path):
    """One file per model of the shipped and paper-scale pairs, each for those weights and the set the Trust tab
    opens on (the bundled sample's 1,000 test images); what it holds is what the model predicts (checked on the
    first 100), so the tab's first report is the one it would compute; another set, model or a broken file finds
    nothing."""
    from explorer.analysis.corruptions import weights_digest
    from explorer.analysis.trust_service import TrustService
    from explorer.app.models import ModelStore
    from explorer.data.datasets import sample_set
    data = trust.test_set(sample_set(), 1000)
    refs = ("cifar10-vanilla", "cifar10-spt_lsa", "paper/cifar10-vanilla", "paper/cifar10-spt_lsa")
    digests = {weights_digest(ROOT / "checkpoints" / ref): ref for ref in refs}
    assert sorted(p.stem for p in trust.SHIPPED_LOGITS.glob("*.npz")) == sorted(d[:16] for d in digests)
    store = ModelStore(ROOT / "checkpoints")
    for digest, ref in digests.items():
        logits = trust.shipped_logits(digest, data)
        assert logits is not None and logits.shape == (1000, 10), ref
        model = store.get(ref)
        np.testing.assert_allclose(trust.predict(model, data.images[:100]), logits[:100], atol=1e-4)
    assert trust.shipped_logits(digest, trust.test_set(sample_set(), 999)) is None
    assert trust.shipped_logits("0" * 64, data) is None
    (tmp_path / f"{digest[:16]}.npz").write_bytes(b"not a zip")
    assert trust.shipped_logits(digest, data, tmp_path) is None
    # The service's report of the shipped pair on that set reads them: as computed, and no rate is taken from it.
    service, pair = TrustService(tmp_path / "downloads"), [store.get(r) for r in refs[:2]]
    report, cached = service.report(pair, data)
    assert not cached and service.rates.get(tuple(m.identity for m in pair)) is None
    for m, ref in zip(report.models, refs[:2], strict=True):
        expected = trust.shipped_logits(weights_digest(ROOT / "checkpoints" / ref), data)
        np.testing.assert_array_equal(m.logits, expected)
