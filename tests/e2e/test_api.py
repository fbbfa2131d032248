"""Every api_name of the launched app, through gradio_client."""

from __future__ import annotations

import time

import numpy as np
import pytest
from gradio_client import handle_file
from PIL import Image

from explorer.checkpoints.store import list_checkpoints, load_checkpoint
from tests.helpers import slot_labels

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
A, B = "cifar10-vanilla", "cifar10-spt_lsa"


def _labels(result):
    return [c["label"] for c in result["confidences"]]


@pytest.fixture(scope="module")
def upload(tmp_path_factory, cifar10):
    path = tmp_path_factory.mktemp("up") / "my photo.jpg"
    Image.fromarray(cifar10.x_test[7]).resize((200, 150)).save(path, quality=95)
    return path


def test_api_lists_every_endpoint(client):
    names = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert names == {"/compare", "/sample", "/patches", "/attention", "/locality", "/tau", "/disagreements",
                     "/what_if", "/evidence", "/shift_strip", "/robustness", "/models", "/finetune", "/cancel",
                     "/download_checkpoint", "/trust_report", "/trust_cell_a", "/trust_cell_b", "/trust_corruptions",
                     "/trust_faithfulness"}
    assert "/load_model" not in names
    # The page's own wiring is callable by name but not listed (nor served as MCP tools): tests/e2e/test_mcp.py
    assert not names & {"/load_model_a", "/load_model_b", "/refresh", "/image", "/attention_query",
                        "/attention_layer", "/study_pair"}


def test_every_parameter_has_a_meaningful_name(client):
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    sample = endpoints["/sample"]["parameters"]
    assert [p["parameter_name"] for p in sample] == ["class_name", "ref_b", "seed"]
    assert sample[2]["label"].startswith("seed")
    for name, endpoint in endpoints.items():
        for p in endpoint["parameters"]:
            assert not p["label"].startswith("parameter_"), (name, p)


def test_predict_on_an_upload(client, upload, cifar10):
    label_a, label_b, verdict = client.predict(handle_file(str(upload)), A, B, api_name="/compare")
    assert len(_labels(label_a)) == 5 and len(_labels(label_b)) == 5
    assert set(_labels(label_a)) <= set(cifar10.class_names)
    assert sum(c["confidence"] for c in label_b["confidences"]) <= 1.0 + 1e-6
    assert "ms" in verdict or "cached" in verdict


def test_predict_equals_the_model_run_locally(client, upload, app_checkpoints):
    from explorer.data.inputs import load_image
    from explorer.model.predict import predict_logits
    label_a, _, _ = client.predict(handle_file(str(upload)), A, B, api_name="/compare")
    model, card = load_checkpoint(app_checkpoints / A)
    logits = predict_logits(model, load_image(upload)[0][None])[0]
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    expected = card.class_names[int(probs.argmax())]
    assert label_a["label"] == expected
    assert label_a["confidences"][0]["confidence"] == pytest.approx(float(probs.max()), abs=1e-5)


def test_predict_on_a_dataset_sample(client, cifar10):
    path, preview, truth = client.predict("cat", B, 3, api_name="/sample")
    assert "True label: **cat**" in truth
    index = int(truth.split("#")[1].split(")")[0])
    assert cifar10.class_names[cifar10.y_test[index]] == "cat"
    np.testing.assert_array_equal(np.asarray(Image.open(path)), cifar10.x_test[index])
    _, _, verdict = client.predict(handle_file(path), A, B, api_name="/compare")
    assert "True label **cat**" in verdict


def test_patches(client, upload):
    plain, shifted, note = client.predict(handle_file(str(upload)), A, B, api_name="/patches")
    assert [item["caption"] for item in shifted] == ["original", "left-up", "left-down", "right-up", "right-down"]
    assert "Patch size **4 px**" in note
    shapes = {np.asarray(Image.open(p)).shape for p in [plain] + [item["image"] for item in shifted]}
    assert len(shapes) == 1  # the vanilla grid and the five shifted grids share a geometry


def test_attention_for_a_chosen_query(client, upload):
    out = client.predict(handle_file(str(upload)), A, B, 1, "head 1", 4.0, 30.0, api_name="/attention")
    maps, rollout, caption, cell = out  # the maps from the query (chosen layer over every layer x head), rollout
    assert all(np.asarray(Image.open(p)).ndim == 3 for p in (maps, rollout))
    # 16 px input, 4 px patches: pixel (y=4, x=30) of the 32 px image lies in row 0, col 3
    assert "row 0, col 3" in caption and cell == {"row": 0, "col": 3, "grid": 4}
    with pytest.raises(Exception, match="there is no head 7"):  # checked against the models in the call
        client.predict(handle_file(str(upload)), A, B, 1, "head 7", 4.0, 30.0, api_name="/attention")


def test_a_query_click_returns_one_picture(client, upload):
    full = client.predict(handle_file(str(upload)), A, B, 1, "all heads", 4.0, 30.0, api_name="/attention")
    maps, caption, cell = client.predict(handle_file(str(upload)), A, B, 1, "all heads", 4.0, 30.0,
                                         api_name="/attention_query")
    assert "row 0, col 3" in caption and cell == full[3]
    np.testing.assert_array_equal(np.asarray(Image.open(maps)), np.asarray(Image.open(full[0])))  # pixel for pixel
    maps, caption, cell = client.predict(handle_file(str(upload)), A, B, 0, "head 1", 4.0, 30.0,
                                         api_name="/attention_layer")
    assert "Layer 0 of 2 (the first) for A" in caption and np.asarray(Image.open(maps)).ndim == 3


def test_what_if(client, upload):
    top_a, top_a2, top_b, top_b2, maps, plot, summary = client.predict(
        handle_file(str(upload)), A, B, 1, 16.0, 16.0, 0.25, "as learned", 1.0, "off", api_name="/what_if")
    label_a, _, _ = client.predict(handle_file(str(upload)), A, B, api_name="/compare")
    assert top_a["confidences"] == label_a["confidences"] and len(top_b2["confidences"]) == 5
    assert "τ × 0.25" in summary and "diagonal mask off (learned: on)" in summary
    assert np.asarray(Image.open(plot)).ndim == 3 and np.asarray(Image.open(maps)).ndim == 3
    with pytest.raises(Exception, match="not in the list of choices|between 0.25 and 4.0"):
        client.predict(handle_file(str(upload)), A, B, 1, 16.0, 16.0, 9.0, "on", 1.0, "off", api_name="/what_if")


def test_locality_and_tau(client, upload):
    distance, entropy, table = client.predict(handle_file(str(upload)), A, B, "this image", api_name="/locality")
    assert len(table["data"]) == 2
    tau_plot, history_plot, tau_table, note = client.predict(A, B, api_name="/tau")
    for picture in (distance, entropy, tau_plot, history_plot):  # figures arrive as pictures (PNG)
        with Image.open(picture) as im:
            assert im.format == "PNG" and im.width > im.height > 200
    rows, named = tau_table["data"], slot_labels(client)  # each model by its one name on the page
    assert rows and all(r[0] == f"B: {named[B]}" for r in rows)  # only the LSA model has tau
    assert f"**A**: {named[A]} is a ViT without LSA: it has no tau." in note
    assert {r[1] for r in rows} == {0, 1}


def test_disagreements(client):
    summary, table, gallery = client.predict(A, B, 100, api_name="/disagreements")
    assert "first **100** cifar10 test images" in summary
    assert len(table["data"]) == 10


def test_bad_model_keeps_the_previous_one(client):
    ref, card = client.predict("nobody/not-cached", api_name="/load_model_b")
    assert ref == B and "could not load 'nobody/not-cached'" in card and "`spt_lsa`" in card


def _wait_status(job, predicate, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        outputs = job.outputs()
        if outputs and predicate(outputs[-1][0]):
            return outputs[-1][0]
        if job.done():
            break
        time.sleep(0.2)
    raise AssertionError(f"status never matched; last outputs: {job.outputs()[-1:] if job.outputs() else None}")


PAIR, ZIP = "A and B (the two slots)", "zip of class folders"


def _class_zip(path, cifar10, classes, per_class):
    import io
    import zipfile
    with zipfile.ZipFile(path, "w") as z:
        for c in classes:
            for i in np.flatnonzero(cifar10.y_test == cifar10.class_names.index(c))[:per_class]:
                buffer = io.BytesIO()
                Image.fromarray(cifar10.x_test[i]).save(buffer, format="PNG")
                z.writestr(f"mine/{c}/{i}.png", buffer.getvalue())
    return str(path)


def test_a_pair_fine_tune_on_a_zip_loads_both_results_into_the_slots(client, app_checkpoints, cifar10, tmp_path):
    before = set(list_checkpoints(app_checkpoints))
    data = _class_zip(tmp_path / "three.zip", cifar10, ["cat", "dog", "ship"], 20)
    status, curves, tau, results, per_class, gallery, slot_a, slot_b, _, card_a, card_b, bar = client.predict(
        PAIR, "tiny", "spt_lsa", ZIP, handle_file(data), 0, 0, 0, 0, False, "e2e-pair", A, B, api_name="/finetune")
    assert "**done**" in status and "on **CPU**" in status, status
    assert "`finetuned/e2e-pair-A`" in status and "`finetuned/e2e-pair-B`" in status
    assert "head: base rows" in status  # cat, dog and ship are CIFAR-10 classes: the base's rows
    assert bar == "", bar  # the run has ended: its progress bar is gone
    slot_a, slot_b = (u["value"] if isinstance(u, dict) else u for u in (slot_a, slot_b))  # gr.update()s
    assert (slot_a, slot_b) == ("finetuned/e2e-pair-A", "finetuned/e2e-pair-B")
    # The slots' cards come with them (three classes: no top-5, which would always be 100 %).
    # the card's title is the slot's label, which holds the run's name
    assert "**fine-tuned · e2e-pair-A**" in card_a and "**fine-tuned · e2e-pair-B**" in card_b
    assert "top-5" not in card_a + card_b
    assert "test top-5" not in results["headers"] and "each worth" in status  # 12 test images
    new = set(list_checkpoints(app_checkpoints)) - before
    assert sorted(p.name for p in new) == ["e2e-pair-A", "e2e-pair-B"]
    cards = [load_checkpoint(p)[1] for p in sorted(new)]
    assert [c.variant for c in cards] == ["vanilla", "spt_lsa"]
    assert cards[0].dataset == cards[1].dataset and cards[0].class_names == ["cat", "dog", "ship"]
    assert [row[0] for row in results["data"]] == ["A: tiny-vanilla", "B: tiny-spt_lsa"]
    assert [row[0] for row in per_class["data"]] == ["cat", "dog", "ship"]
    # both results load into the slots, and every tab compares them
    ref_a, card_a = client.predict(slot_a, api_name="/load_model_a")
    ref_b, card_b = client.predict(slot_b, api_name="/load_model_b")
    assert (ref_a, ref_b) == (slot_a, slot_b)
    assert "**fine-tuned · e2e-pair-A**" in card_a and "**fine-tuned · e2e-pair-B**" in card_b
    label_a, label_b, _ = client.predict(handle_file(_sample(client)), ref_a, ref_b, api_name="/compare")
    assert set(_labels(label_a)) == set(_labels(label_b)) == {"cat", "dog", "ship"}


def _sample(client):
    return client.predict("random", B, 1, api_name="/sample")[0]


def test_cancel_mid_run_leaves_no_checkpoint_and_a_second_start_is_refused(client, app_checkpoints):
    before = sorted(list_checkpoints(app_checkpoints))
    job = client.submit(PAIR, "tiny", "vanilla", "cifar10", None, 30, 1e-3, 16, 2048, False, "to-cancel", A, B,
                        api_name="/finetune")
    _wait_status(job, lambda s: "**training**" in s)
    with pytest.raises(Exception, match="a fine-tuning run is already going on"):
        client.predict(PAIR, "tiny", "vanilla", "cifar10", None, 1, 0, 0, 128, False, "second", A, B,
                       api_name="/finetune")
    # the worker stops the run at its next step: the answer says so, the run's status says when it has
    assert client.predict(api_name="/cancel").startswith("Cancelling: the run stops at its next step")
    status = _wait_status(job, lambda s: "**cancelled**" in s)
    assert "nothing was saved" in status
    assert sorted(list_checkpoints(app_checkpoints)) == before
    assert not [p for p in (app_checkpoints / "finetuned").iterdir() if "to-cancel" in p.name or p.name.startswith(".")]
    # the next run starts cleanly: one model alone, a new one from scratch
    result = client.predict("(a new model from scratch)", "tiny", "vanilla", "cifar10", None, 1, 1e-3, 32, 128,
                            False, "after-cancel", A, B, api_name="/finetune")
    assert "**done**" in result[0] and "`finetuned/after-cancel`" in result[0]


@pytest.mark.parametrize("args, message", [
    (dict(epochs=-3), "epochs must be between 1"), (dict(epochs=10_000), "epochs must be between 1"),
    (dict(lr=-1), "learning rate"), (dict(batch=-1), "batch size"), (dict(subset=10**9), "images must be between"),
    (dict(data="zip of class folders"), "upload a zip")])
def test_bad_fine_tune_parameters(client, args, message):
    values = dict(epochs=1, lr=1e-3, batch=32, subset=256, data="cifar10")
    values.update(args)
    with pytest.raises(Exception, match=message):
        client.predict(B, "tiny", "spt_lsa", values["data"], None, values["epochs"], values["lr"], values["batch"],
                       values["subset"], False, "", A, B, api_name="/finetune")


def test_evidence_endpoints(client, upload):
    picture, text = client.predict(handle_file(str(upload)), A, B, "each model's top-1", "the image's mean colour", 1,
                                   api_name="/evidence")
    assert np.asarray(Image.open(picture)).ndim == 3 and text.count("of patches carry") == 2
    with pytest.raises(Exception, match="known only for test samples"):  # an upload has no true label
        client.predict(handle_file(str(upload)), A, B, "the true label", "the image's mean colour", 1,
                       api_name="/evidence")
    strip = client.predict(handle_file(str(upload)), A, B, 2, "zero", api_name="/shift_strip")
    # S = 2: five shifted copies and the mirrored one, in rows of five (STRIP_ROW) 80-px cells 4 px apart
    assert np.asarray(Image.open(strip)).shape[1] == 5 * 84 - 4
    plot, table, summary = client.predict(A, B, 50, 2, "edge", api_name="/robustness")
    assert Image.open(plot).width > 200 and len(table["data"]) == 2 and "first **50**" in summary


# Three of CIFAR-10's classes under names CIFAR does not have: models of classes of their own.
OWN = {"cat": "tabby", "dog": "hound", "ship": "vessel"}


def test_a_pair_fine_tuned_on_classes_of_its_own_answers_in_every_tool(client, cifar10, tmp_path):
    """After a pair fine-tune on a zip of classes of its own: Trust judges it on the images its fine-tune held
    out and says so, Sample draws those images with their labels, Compare checks it only against them (a CIFAR
    image gets no verdict, and the reason), and every other tool answers, none with an error."""
    from tests.helpers import class_zip
    picked = [np.flatnonzero(cifar10.y_test == cifar10.class_names.index(c))[:20] for c in OWN]
    data = class_zip(tmp_path / "own.zip", cifar10.x_test[np.concatenate(picked)], np.repeat(np.arange(3), 20),
                     list(OWN.values()))
    status = client.predict(PAIR, "tiny", "spt_lsa", ZIP, handle_file(str(data)), 0, 0, 0, 0, False, "own", A, B,
                            api_name="/finetune")[0]
    assert "**done**" in status, status
    a, b = "finetuned/own-A", "finetuned/own-B"
    out = client.predict(a, b, "the CIFAR test set", None, 1000, api_name="/trust_report")
    assert out[0].startswith("**held-out own test images 0-11**, 12 images"), out[0]  # 20 % of each class's 20
    assert [row[0] for row in out[4]["data"]] == sorted(OWN.values())
    # Sample: the held-out images, with their labels; Compare checks both answers against them
    for name in OWN.values():
        path, _, truth = client.predict(name, b, 3, api_name="/sample")
        assert f"True label: **{name}** (held-out own test image #" in truth, truth
    verdict = client.predict(handle_file(path), a, b, api_name="/compare")[2]
    assert f"True label **{name}** · A " in verdict and "no verdict" not in verdict, verdict
    cifar = client.predict("cat", B, 1, api_name="/sample")[0]
    verdict = client.predict(handle_file(cifar), a, b, api_name="/compare")[2]
    assert "True label **cat**" in verdict and "not a class of these models, so no verdict" in verdict, verdict
    assert "✔" not in verdict and "✘" not in verdict
    summary = client.predict(a, b, 1000, api_name="/disagreements")[0]
    assert "12" in summary and "of their own" not in summary, summary
    assert "first **12**" in client.predict(a, b, 50, 2, "edge", api_name="/robustness")[2]
    assert len(client.predict(handle_file(path), a, b, "64 test images", api_name="/locality")[2]["data"]) > 0
    picture, _ = client.predict(handle_file(path), a, b, "the true label", "the image's mean colour", 1,
                                api_name="/evidence")
    assert Image.open(picture).width > 0
    with pytest.raises(Exception, match="true label, cat, is not a class of these models"):
        client.predict(handle_file(cifar), a, b, "the true label", "the image's mean colour", 1, api_name="/evidence")
    faith = client.predict(a, b, api_name="/trust_faithfulness")[0]
    assert "held-out own" in faith and "12 images" in faith, faith
    corrupted = client.predict(a, b, 100, api_name="/trust_corruptions")
    assert "held-out own" in corrupted[0] and "12 images" in corrupted[0] and len(corrupted[2]["data"]) == 30
    # the tools of one image: each answers for the pair's classes
    image = handle_file(path)
    assert client.predict(image, a, b, api_name="/patches")[2]
    maps = client.predict(image, a, b, 1, "head 1", 4.0, 30.0, api_name="/attention")
    assert Image.open(maps[0]).width > 0
    top_a, _, top_b, _, _, _, said = client.predict(image, a, b, 1, 16.0, 16.0, 0.25, "as learned", 1.0, "off",
                                                    api_name="/what_if")
    assert {c["label"] for c in top_a["confidences"] + top_b["confidences"]} <= set(OWN.values()), (top_a, said)
    assert Image.open(client.predict(image, a, b, 2, "zero", api_name="/shift_strip")).width > 0
    assert "tau" in client.predict(a, b, api_name="/tau")[3].lower()
    # a mixed pair (A shipped CIFAR-10, B of its own classes): each side judged by its own labels in Compare,
    # the tools over one labelled set say in place why they do not apply
    verdict = client.predict(image, A, b, api_name="/compare")[2]
    assert f"True label **{name}** · A – (not one of its classes) · B " in verdict, verdict
    for endpoint, args, at in (("/trust_report", ("the CIFAR test set", None, 1000), 0), ("/disagreements", (100,), 0),
                               ("/robustness", (50, 2, "edge"), 2)):
        said = client.predict(A, b, *args, api_name=endpoint)[at]
        assert "Not for this pair: A knows 10 classes" in said and "B 3 (hound, tabby, vessel)" in said, said
