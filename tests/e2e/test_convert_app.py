"""The keras.io example's own models in the app's slots, from a Hub on 127.0.0.1 (tests/hub_server.py).

A Keras 2 SavedModel built by tf-keras (tests/fixtures/make_keras2_example.py, in its own process) is served
as the example's published repo was (push_to_hub_keras: the SavedModel at the top, a README, a history); the
committed `.keras` of the current example as another. The app (shared mode, a 3 MB cap on what it fetches)
converts each on first use; through gradio_client, every tab then works on them, their probabilities are the
source models' own and the Tau tab shows their learned temperatures. What cannot be mapped is refused in the
slot's card, with the reason and nothing written.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from gradio_client import handle_file
from PIL import Image

from explorer.checkpoints.store import is_checkpoint, list_checkpoints, read_card
from explorer.convert import CONVERTED
from tests.e2e.test_shared import visitor
from tests.helpers import ROOT, start_app, stop
from tests.hub_server import Declared, FakeHub
from tests.test_convert import FIXTURES, repo_files, unpack_bundle

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
A = "cifar10-vanilla"
PAIR = "A and B (the two slots)"
KERAS2, KERAS3 = "keras-io/vit-small-ds-test", "someone/example-keras3"
COMMITS = {KERAS2: "1" * 40, KERAS3: "2" * 40}
CIFAR10 = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@pytest.fixture(scope="module")
def example_app(tmp_path_factory, tiny_checkpoints, data_dir):
    keras2 = unpack_bundle(tmp_path_factory.mktemp("keras2"))
    savedmodel = repo_files(keras2 / "spt_lsa")
    truncated = dict(savedmodel)
    data = next(name for name in savedmodel if name.startswith("variables/variables.data"))
    truncated[data] = savedmodel[data][: len(savedmodel[data]) // 2]
    hub = FakeHub()
    hub.add_repo(KERAS2, {COMMITS[KERAS2]: {**savedmodel, "README.md": b"# vit_small_ds\n", "history.json": b"{}"}})
    hub.add_repo(KERAS3, {COMMITS[KERAS3]: {"vit_small_ds.keras": (FIXTURES / "example_small.keras").read_bytes(),
                                            "README.md": b"# mine\n"}})
    hub.add_repo("someone/truncated", {"3" * 40: truncated})
    hub.add_repo("someone/too-big", {"4" * 40: {**savedmodel, data: Declared(40_000_000)}})
    hub.add_repo("someone/cnn", {"5" * 40: repo_files(keras2 / "cnn")})
    hub.add_repo("someone/keras2-h5", {"6" * 40: {"model.h5": b"\x89HDF\r\n\x1a\n", "README.md": b"#\n"}})
    hub.start()
    root = tmp_path_factory.mktemp("exampleapp") / "checkpoints"
    shutil.copytree(tiny_checkpoints["vanilla"], root / A)
    home = tmp_path_factory.mktemp("home")
    proc, url, log = start_app(root, data_dir=data_dir, env_extra={
        "EXPLORER_SHARED": "1", "EXPLORER_MAX_HUB_MB": "3", "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": hub.url,
        "HF_HOME": str(home / "hf"), "HOME": str(home), "NO_PROXY": "127.0.0.1", "HF_TOKEN": ""})
    yield url, root, hub, keras2
    stop(proc)
    hub.stop()


def converted(root, repo_id):
    """The conversions the app keeps for a repo, in its Hub cache."""
    repo = root / ".hub-cache" / f"models--{repo_id.replace('/', '--')}"
    return [p for p in repo.glob(f"snapshots/*/{CONVERTED}/*") if not p.name.startswith(".")]


def top5(label) -> dict[str, float]:
    return {c["label"]: c["confidence"] for c in label["confidences"]}


def test_example_models_from_the_hub_work_in_every_tab(example_app, tmp_path):
    url, root, hub, keras2 = example_app
    client, _, _ = visitor(url)
    ref_b, card_b = client.predict(KERAS2, api_name="/load_model_b")
    assert ref_b == KERAS2, card_b
    # The visitor sees where it came from: the keras.io example, the repo and commit, the format, the classes.
    assert "From the [keras.io example](https://keras.io/examples/vision/vit_small_ds/)" in card_b
    assert f"`{KERAS2}` @ `1111111111`, a Keras 2 SavedModel converted" in card_b
    assert "class names assumed: CIFAR-10's labels" in card_b and "`spt_lsa`, tau per layer" in card_b
    ref_a, card_a = client.predict(KERAS3, api_name="/load_model_a")
    assert ref_a == KERAS3 and f"`{KERAS3}` @ `2222222222`, a Keras 3 .keras file converted" in card_a, card_a
    assert str(root) not in card_a + card_b
    # Only the model's files came down (not the README, not the history), and one conversion each.
    fetched = {name for repo, name in hub.fetched if repo == KERAS2}
    assert {"saved_model.pb", "keras_metadata.pb", "variables/variables.index"} <= fetched
    assert not fetched & {"README.md", "history.json"}
    assert {name for repo, name in hub.fetched if repo == KERAS3} == {"vit_small_ds.keras"}
    [folder_b], [folder_a] = converted(root, KERAS2), converted(root, KERAS3)
    assert is_checkpoint(folder_b) and read_card(folder_b).source.revision == COMMITS[KERAS2]
    assert read_card(folder_a).source.format == "keras3-archive"

    # The probabilities are the source models' own, on the same pictures (uploaded as PNG files).
    reference3 = np.load(FIXTURES / "example_small.npz")
    for i in range(2):
        for name, pixels in (("keras2", np.load(keras2 / "images_u8.npy")[i]), ("keras3", reference3["images_u8"][i])):
            Image.fromarray(pixels).save(tmp_path / f"{name}-{i}.png")
        _, label_b, _ = client.predict(handle_file(str(tmp_path / f"keras2-{i}.png")), KERAS3, KERAS2,
                                       api_name="/compare")
        label_a, _, _ = client.predict(handle_file(str(tmp_path / f"keras3-{i}.png")), KERAS3, KERAS2,
                                       api_name="/compare")
        for label, expected in ((label_b, np.load(keras2 / "spt_lsa.probs_u8.npy")[i]),
                                (label_a, reference3["probs_u8"][i])):
            got = top5(label)
            assert list(got) == [CIFAR10[k] for k in np.argsort(-expected)[:5]]
            np.testing.assert_allclose(list(got.values()), np.sort(expected)[::-1][:5], atol=1e-5, rtol=0)

    # The Tau tab shows each one's learned temperatures, as the fixtures set them.
    _, _, table, _ = client.predict(KERAS3, KERAS2, api_name="/tau")
    rows = {(r[0], r[1]): r[2] for r in table["data"]}
    taus2 = json.loads((keras2 / "spt_lsa.json").read_text())["taus"]
    label2, label3 = f"B: {KERAS2}", f"A: {KERAS3}"  # each row names its slot and the model in it
    assert {k: v for k, v in rows.items() if k[0] == label2} == {(label2, i): f"{t:.3f}" for i, t in enumerate(taus2)}
    assert {k: v for k, v in rows.items() if k[0] == label3} == {
        (label3, i): f"{t:.3f}" for i, t in enumerate(reference3["taus"])}
    assert all(abs(t - 4.0) > 0.5 for t in taus2)  # away from sqrt(key_dim): a tau left at its start would show

    # Every other tab, on the converted pair.
    image = handle_file(str(tmp_path / "keras2-0.png"))
    _, shifted, note = client.predict(image, KERAS3, KERAS2, api_name="/patches")
    assert [item["caption"] for item in shifted] == ["original", "left-up", "left-down", "right-up", "right-down"]
    assert "Patch size **6 px**" in note
    maps, rollout, caption, cell = client.predict(image, KERAS3, KERAS2, 1, "head 1", 4.0, 30.0,
                                                  api_name="/attention")
    assert cell["grid"] == 4 and np.asarray(Image.open(maps)).ndim == 3
    maps, caption, _ = client.predict(image, KERAS3, KERAS2, 0, "all heads", 4.0, 30.0, api_name="/attention_layer")
    assert "Layer 0 of 2 (the first) for A" in caption
    *_, summary = client.predict(image, KERAS3, KERAS2, 1, 16.0, 16.0, 0.5, "as learned", 1.0, "off",
                                 api_name="/what_if")
    assert "τ × 0.5" in summary
    _, _, locality = client.predict(image, KERAS3, KERAS2, "this image", api_name="/locality")
    assert len(locality["data"]) == 2
    picture, text = client.predict(image, KERAS3, KERAS2, "each model's top-1", "the image's mean colour", 1,
                                   api_name="/evidence")
    assert text.count("of patches carry") == 2
    strip = client.predict(image, KERAS3, KERAS2, 2, "zero", api_name="/shift_strip")
    assert np.asarray(Image.open(strip)).ndim == 3
    _, robustness, _ = client.predict(KERAS3, KERAS2, 50, 2, "edge", api_name="/robustness")
    assert len(robustness["data"]) == 2
    summary, _, _ = client.predict(KERAS3, KERAS2, 50, api_name="/disagreements")
    assert "first **50** cifar10 test images" in summary
    status, *_ = client.predict(PAIR, "tiny", "spt_lsa", "cifar10", None, 1, 1e-3, 32, 128, False, "conv-ft",
                                KERAS3, KERAS2, api_name="/finetune")
    assert "**done**" in status, status
    runs = {p.name: read_card(p) for p in list_checkpoints(root) if p.name.startswith("conv-ft")}
    assert sorted(runs) == ["conv-ft-A", "conv-ft-B"]
    # Each started from its converted model: its geometry, its name as the base.
    assert [runs[n].config["input_size"] for n in sorted(runs)] == [24, 24]
    assert runs["conv-ft-B"].base.name == "keras-io-vit-small-ds-test"

    # A second visitor gets the same conversion from the cache: no new download, no new conversion.
    before, stamp = len(hub.fetched), (folder_b / "model.weights.h5").stat().st_mtime_ns
    other, _, _ = visitor(url)
    assert other.predict(KERAS2, api_name="/load_model_b")[0] == KERAS2
    assert converted(root, KERAS2) == [folder_b] and (folder_b / "model.weights.h5").stat().st_mtime_ns == stamp
    assert [f for f in hub.fetched[before:] if f[0] == KERAS2] == []


@pytest.mark.parametrize("repo_id, reason", [
    ("someone/truncated", "variables cannot be read (truncated or corrupt download?)"),
    ("someone/too-big", "its model files are 41 MB; this app fetches at most 3.0 MB from the Hub"),
    ("someone/cnn", "(Rescaling) (layer 1 of the model) is where the keras.io example has its Shifted Patch "
                    "Tokenization"),
    ("someone/keras2-h5", "someone/keras2-h5 holds a Keras 2 HDF5 model (model.h5)"),
    ("someone/nothing-here", "no such model repo on the Hub"),
])
def test_what_cannot_be_mapped_is_refused_in_the_slot_and_nothing_is_kept(example_app, repo_id, reason):
    url, root, hub, _ = example_app
    client, _, _ = visitor(url)
    assert client.predict(A, api_name="/load_model_a")[0] == A
    ref, card = client.predict(repo_id, api_name="/load_model_a")
    assert ref == A and f"could not load '{repo_id}'" in card and reason in card, card
    assert "Traceback" not in card and str(root) not in card and str(ROOT) not in card
    assert converted(root, repo_id) == []
    assert not list((root / ".hub-cache").glob(f"models--{repo_id.replace('/', '--')}/snapshots/*/{CONVERTED}/.*"))
    if repo_id in ("someone/too-big", "someone/keras2-h5"):
        assert not [f for f in hub.fetched if f[0] == repo_id]  # refused from the file list alone
