"""Output pictures: the image component every tab uses, and handlers whose figures come out as pictures
(Gradio's image cache is made atomic and fast in gradio_patches)."""

from __future__ import annotations

import functools

import gradio as gr
from matplotlib.figure import Figure

from explorer.analysis import plots

# A row of plots (each drawn plots.WIDTH inches wide) keeps two side by side down to this width each, and
# puts one per row below it: a plot is never shown at less than about three quarters of its size.
PLOT_MIN = 380


def picture(label: str, captioned: bool = True, elem_classes: str | None = None, **kwargs) -> gr.Image:
    """An output image; PNG because it encodes ~9x faster than Gradio's default WebP and keeps patch edges.
    A captioned one (the default) keeps Gradio's label and buttons off the captions drawn into it; `elem_classes`
    (one class) is added to that."""
    classes = (["pic"] if captioned else []) + ([elem_classes] if elem_classes else [])
    return gr.Image(format="png", label=label, interactive=False, elem_classes=classes or None, **kwargs)


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
