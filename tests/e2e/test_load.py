"""20 concurrent clients x 10 mixed requests while a fine-tune runs: no errors, no mixed-up results."""

from __future__ import annotations

import hashlib
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from gradio_client import Client, handle_file
from PIL import Image

from tests.helpers import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
A, B = "cifar10-vanilla", "cifar10-spt_lsa"


def _file_digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _canonical(kind, result):
    """A comparable form of an endpoint's result (images by their bytes, timings dropped)."""
    if kind == "compare":
        label_a, label_b, verdict = result
        return (label_a["label"], [(c["label"], round(c["confidence"], 6)) for c in label_a["confidences"]],
                label_b["label"], [(c["label"], round(c["confidence"], 6)) for c in label_b["confidences"]],
                verdict.split("\n\nTime:")[0])
    if kind == "what_if":
        *labels, maps, plot, summary = result
        return ([[(c["label"], round(c["confidence"], 6)) for c in label["confidences"]] for label in labels],
                _file_digest(maps), _file_digest(plot), re.sub(r" · what-if pass [^\n]*", "", summary))
    if kind in ("attention", "click"):  # pictures, the caption, and the query cell the page outlines
        *images, text, cell = result
        return tuple(_file_digest(p) for p in images) + (text, tuple(sorted(cell.items())))
    *images, text = result
    paths = []
    for item in images:  # an image path, or a gallery: a list of {"image": path, "caption": ...}
        paths += [(g["image"], g["caption"]) for g in item] if isinstance(item, list) else [(item, None)]
    return tuple((_file_digest(p), caption) for p, caption in paths) + (text,)


def _call(client, kind, image, pair):
    a, b = pair
    if kind == "compare":
        return client.predict(handle_file(image), a, b, api_name="/compare")
    if kind == "attention":
        return client.predict(handle_file(image), a, b, 1, "all heads", 9.0, 21.0, api_name="/attention")
    if kind == "click":
        return client.predict(handle_file(image), a, b, 1, "all heads", 27.0, 3.0, api_name="/attention_query")
    if kind == "what_if":
        return client.predict(handle_file(image), a, b, 1, 9.0, 21.0, 0.5, "off", 2.0, "on", api_name="/what_if")
    return client.predict(handle_file(image), a, b, api_name="/patches")


def _client(url) -> Client:
    """A client whose every request (an image's upload included: httpx's own limit is 5 s) waits as long as
    the host's speed asks: 20 of them at once on a slow host beside a fine-tune queue for the CPU, and what
    this test shows is that every answer is right, not how fast (bench/e2e_latency.py measures that)."""
    return Client(url, verbose=False, httpx_kwargs={"timeout": scaled(60_000) / 1000})


def test_concurrent_clients_during_a_fine_tune(app_url, cifar10, tmp_path):
    images = []
    for i in range(6):
        path = tmp_path / f"img{i}.png"
        Image.fromarray(cifar10.x_test[100 + i]).save(path)
        images.append(str(path))
    pairs = [(A, B), (B, A)]  # swapped slots must not leak into each other
    kinds = ("compare", "attention", "patches", "click", "what_if")
    rng = random.Random(7)
    plan = [[(rng.choice(kinds), rng.choice(images), rng.choice(pairs)) for _ in range(10)] for _ in range(20)]

    alone = _client(app_url)
    expected = {}
    for requests in plan:
        for kind, image, pair in requests:
            key = (kind, image, pair)
            if key not in expected:
                expected[key] = _canonical(kind, _call(alone, kind, image, pair))

    job = alone.submit("(a new model from scratch)", "tiny", "spt_lsa", "cifar10", None, 20, 1e-3, 16, 4096, False,
                       "load-run", A, B, api_name="/finetune")
    # The run's start: the session's app may have let its idle worker go (EXPLORER_WORKER_IDLE_S), and a cold worker
    # imports Keras and compiles first; slower again on a slower host.
    deadline = time.time() + scaled(180_000) / 1000
    while time.time() < deadline and not any("**training**" in o[0] for o in job.outputs()):
        time.sleep(0.2)
    assert any("**training**" in o[0] for o in job.outputs()), "the fine-tune run did not start"

    def client_session(requests):
        client = _client(app_url)
        return [(key, _canonical(key[0], _call(client, *key))) for key in requests]

    try:
        with ThreadPoolExecutor(max_workers=20) as pool:
            sessions = list(pool.map(client_session, plan))
        assert not any("**done**" in o[0] or "**failed**" in o[0] for o in job.outputs()[-1:]), \
            "the fine-tune ended before the load did; the test did not overlap them"
    finally:
        alone.predict(api_name="/cancel")
        job.result() if not job.done() else None
    results = [r for session in sessions for r in session]
    assert len(results) == 200
    for key, got in results:
        assert got == expected[key], f"result of {key} differs under load"
