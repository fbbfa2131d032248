"""The paper-scale pair (checkpoints/paper: a 2.7 M-parameter ViT and SPT + LSA, 9 layers of 12 heads) through
every tab's endpoint of a launched app, as an API or MCP client asks: Compare, Patches, Attention at the ninth
layer, the LSA switches, Evidence, Trust's shipped tables, Tau and the test-set questions."""

from __future__ import annotations

import numpy as np
import pytest
from gradio_client import Client, handle_file
from PIL import Image

from tests.helpers import slot_labels

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
A, B = "paper/cifar10-vanilla", "paper/cifar10-spt_lsa"


@pytest.fixture(scope="module")
def client(shipped_app):
    return Client(shipped_app[0], verbose=False)


@pytest.fixture(scope="module")
def cat(client):
    """A CIFAR-10 test cat, as the app names a test sample (its true label known)."""
    return handle_file(client.predict("cat", B, 0, api_name="/sample")[0])


def test_the_models_tool_lists_the_pair_with_its_test_top1(client):
    listed = {m["ref"]: m for m in client.predict(api_name="/models")["models"]}
    assert listed[A]["test_top1"] == pytest.approx(0.8502) and listed[B]["test_top1"] == pytest.approx(0.8991)
    assert listed[A]["label"].startswith("paper scale · ViT") and listed[B]["variant"] == "spt_lsa"


def test_compare_patches_and_locality(client, cat):
    top_a, top_b, verdict = client.predict(cat, A, B, api_name="/compare")
    assert len(top_a["confidences"]) == 5 and len(top_b["confidences"]) == 5 and "cat" in verdict
    grid, views = client.predict(cat, A, B, api_name="/patches")[:2]
    assert Image.open(grid).width > 100 and len(views) == 5  # SPT's original and four shifted views
    distance, entropy, table = client.predict(cat, A, B, "this image", api_name="/locality")
    assert [row[0].split(":")[0] for row in table["data"]] == ["A", "B"]


def test_attention_at_the_ninth_layer_and_every_head(client, cat):
    """Layer 8 exists in both 9-layer models (the small pair's choices never limit it); a head beyond 12 is
    refused with the valid range."""
    out = client.predict(cat, A, B, 8, "head 11", 16.0, 16.0, api_name="/attention")
    pictures = [o for o in out if isinstance(o, str) and o.endswith((".png", ".webp", ".jpg"))]
    assert pictures and all(np.asarray(Image.open(p)).ndim == 3 for p in pictures)
    caption = next(o for o in out if isinstance(o, str) and "Layer" in o)
    assert "layer 9 of 9" in caption.lower() or "Layer 8" in caption, caption
    with pytest.raises(Exception, match="head"):
        client.predict(cat, A, B, 8, "head 12", 16.0, 16.0, api_name="/attention")


def test_the_lsa_switches_on_the_paper_scale_spt_lsa(client, cat):
    out = client.predict(cat, A, B, 0, 16.0, 16.0, 1.0, "as learned", 1.0, "off", api_name="/what_if")
    text = " ".join(o for o in out if isinstance(o, str))
    assert "88.54" in text  # its top-1 with the mask off, measured on the 10,000 test images (shipped)


def test_evidence_and_shifts(client, cat):
    picture, text = client.predict(cat, A, B, "each model's top-1", "the image's mean colour", 1,
                                   api_name="/evidence")
    assert np.asarray(Image.open(picture)).ndim == 3 and text.count("of patches carry") == 2
    strip = client.predict(cat, A, B, 2, "zero", api_name="/shift_strip")
    assert Image.open(strip).width > 100


def test_trust_serves_the_shipped_tables_at_once(client):
    """Computed once for this pair and shipped (explorer/shipped/*-paper.json): read, not computed."""
    summary = client.predict(A, B, 1000, api_name="/trust_corruptions")[0]
    assert "shipped" in summary and "1,000 images" in summary
    summary = client.predict(A, B, api_name="/trust_faithfulness")[0]
    assert "shipped" in summary
    report = client.predict(A, B, "the CIFAR test set", None, 200, api_name="/trust_report")[0]
    assert "200" in report and "%" in report


def test_tau_names_the_slots_and_says_the_vit_has_none(client):
    heads, trajectory, table, note = client.predict(A, B, api_name="/tau")
    assert Image.open(heads).width > 200 and Image.open(trajectory).width > 200
    assert len(table["data"]) == 9 and all(row[0].startswith("B: ") for row in table["data"])
    assert "no tau" in note and slot_labels(client)[A] in note  # A by its one name on the page


def test_the_test_set_questions(client):
    summary = client.predict(A, B, 100, api_name="/disagreements")[0]
    assert "100" in summary
    plot, table, summary = client.predict(A, B, 50, 2, "edge", api_name="/robustness")
    assert len(table["data"]) == 2 and "first **50**" in summary
