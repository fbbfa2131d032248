"""One compiled inference function per model, traced once for every batch size.

Keras' `predict_on_batch` traces its function for the first batch shape it sees and again, relaxed, for the
second (`reduce_retracing`): a model the app has warmed on one image pays a second trace (about a second
per model on CPU) on the first batch of another size (an occlusion batch, a shift strip, 64 test images).
On TensorFlow, `forward` traces `model(x, training=False)` once with the batch dimension left open, so any
batch size runs without tracing again; the numbers are `predict_on_batch`'s (the same call in a graph). On
other backends it is `predict_on_batch`.
"""

from __future__ import annotations

import threading
import weakref

import keras
import numpy as np

_functions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its function, gone with it
_lock = threading.Lock()


def forward(model):
    """`model`'s inference function: images (N, H, W, C) float32 -> its outputs as NumPy (a list when the
    model has several), for any N, traced once (TensorFlow) and kept while the model lives."""
    with _lock:
        fn = _functions.get(model)
        if fn is None:
            fn = _functions[model] = _build(model)
    return fn


def _build(model):
    if keras.backend.backend() != "tensorflow":
        return model.predict_on_batch
    import tensorflow as tf

    spec = tf.TensorSpec((None, *model.input_shape[1:]), tf.float32)
    owner = weakref.ref(model)  # the function must not keep its model (the dictionary's key) alive
    graph = tf.function(lambda x: owner()(x, training=False), input_signature=[spec])

    def call(images: np.ndarray):
        out = graph(tf.convert_to_tensor(np.asarray(images, np.float32)))
        return [o.numpy() for o in out] if isinstance(out, (list, tuple)) else out.numpy()

    call.graph = graph  # its tracing count is observable (tests)
    return call
