"""Output pictures: the image component every tab uses, and Gradio's image cache made atomic and fast."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path

import gradio as gr
import numpy as np
from matplotlib.figure import Figure

from explorer import plots, render

# A row of plots (each drawn plots.WIDTH inches wide) keeps two side by side down to this width each, and
# puts one per row below it: a plot is never shown at less than about three quarters of its size.
PLOT_MIN = 380


def picture(label: str, captioned: bool = True, **kwargs) -> gr.Image:
    """An output image; PNG because it encodes ~9x faster than Gradio's default WebP and keeps patch edges.
    A captioned one (the default) keeps Gradio's label and buttons off the captions drawn into it."""
    return gr.Image(format="png", label=label, interactive=False, elem_classes="pic" if captioned else None,
                    **kwargs)


def drawn(value):
    """A matplotlib figure as the RGB picture gr.Plot would show (anything else unchanged)."""
    return plots.figure_to_array(value) if isinstance(value, Figure) else value


def as_pictures(handler):
    """`handler` with the figures among its outputs drawn as pictures: the page shows the same PNG as a
    gr.Plot, and an API or MCP client receives an image instead of a plot's JSON. Name, docstring and
    signature stay the handler's (they are the endpoint's and the MCP tool's)."""
    @functools.wraps(handler)
    def with_pictures(*args, **kwargs):
        out = handler(*args, **kwargs)
        return tuple(drawn(v) for v in out) if isinstance(out, tuple) else drawn(out)
    return with_pictures


def install_image_cache() -> None:
    """Makes Gradio's image cache write atomically, encode PNG fast, and encode a picture only once.

    Gradio names a cached output image by the hash of its bytes and rewrites the file in place on every
    request, so two sessions producing the same picture at once can serve a half-rewritten file
    ("Too much data for declared Content-Length"). Its file cache already renames into place; this
    gives the image cache the same behaviour (and skips rewriting identical bytes). Our RGB pictures are
    encoded by `render.encode_png`: the same pixels as Gradio's PNG, ~7x faster, for ~35 % more bytes; and
    a picture whose pixels were encoded before (the same view asked again, by any session) is served from
    the file written then.
    """
    import hashlib

    from gradio import processing_utils as pu
    if getattr(pu.save_pil_to_cache, "_explorer_atomic", False):
        return
    written: OrderedDict[tuple, str] = OrderedDict()
    lock = threading.Lock()

    def encode(img, format):
        if format.lower() == "png" and img.mode == "RGB" and not img.info:
            return render.encode_png(np.asarray(img))
        return pu.encode_pil_to_bytes(img, format)

    def save_pil_to_cache(img, cache_dir, name="image", format="webp"):
        key = (str(cache_dir), name, format.lower(), img.mode, img.size,
               hashlib.blake2b(img.tobytes(), digest_size=16).digest())
        with lock:
            path = written.get(key)
            if path is not None:
                written.move_to_end(key)
        if path is not None and os.path.exists(path):
            return path
        data = encode(img, format)
        folder = Path(cache_dir) / pu.hash_bytes(data)
        folder.mkdir(exist_ok=True, parents=True)
        path = (folder / f"{name}.{format}").resolve()
        if not (path.exists() and path.stat().st_size == len(data)):
            tmp = folder / f".{name}.{threading.get_ident()}.{time.monotonic_ns()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, path)
        with lock:
            written[key] = str(path)
            while len(written) > 1024:
                written.popitem(last=False)
        return str(path)

    save_pil_to_cache._explorer_atomic = True
    pu.save_pil_to_cache = save_pil_to_cache
