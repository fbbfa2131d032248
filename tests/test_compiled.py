"""One compiled inference function per model: Keras' numbers, one trace for every batch size."""

from __future__ import annotations

import gc
import weakref

import numpy as np

from explorer.checkpoints.store import load_checkpoint
from explorer.model import compiled
from explorer.model.config import ViTConfig
from explorer.model.probe import Probe


def test_any_batch_size_gives_predict_on_batchs_numbers_from_one_trace(tiny_checkpoints, images):
    model, card = load_checkpoint(tiny_checkpoints["spt_lsa"])
    probe = Probe(model, ViTConfig.from_dict(card.config))
    run = compiled.forward(model)
    batch = np.concatenate([images] * 9).astype(np.float32)  # 72 images
    for n in (1, 7, 65, 72):
        np.testing.assert_array_equal(run(batch[:n]), model.predict_on_batch(batch[:n]))
        outputs = compiled.forward(probe._probe)(batch[:n])
        expected = probe._probe.predict_on_batch(batch[:n])
        assert len(outputs) == len(expected) == 2 + probe.num_layers
        for got, want in zip(outputs, expected, strict=True):
            np.testing.assert_array_equal(got, np.asarray(want))
    assert run.graph.experimental_get_tracing_count() == 1  # Keras' own would have traced twice
    assert compiled.forward(model) is run  # kept with the model


def test_the_function_does_not_keep_its_model_alive(tiny_checkpoints, images):
    model, _ = load_checkpoint(tiny_checkpoints["vanilla"])
    compiled.forward(model)(images[:2].astype(np.float32))
    alive = weakref.ref(model)
    assert alive() in compiled._functions
    del model
    gc.collect()
    assert alive() is None  # freed with its function (the store drops models beyond its capacity)
