"""The Tau tab: the learned temperature of the slots' LSA models against √d_k, per layer and head and over
training; a slot whose model has no LSA is named as such."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import gradio as gr
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from explorer.analysis import plots
from explorer.model.probe import tau_table
from explorer.ui.context import AppState, Page, initial
from explorer.ui.pictures import PLOT_MIN, as_pictures, drawn, picture

RATIO = "tau / √d_k: min · mean · max"
COLUMNS = ["model", "layer", "tau", "√d_k", RATIO]
# Shares of the table's width: twelve heads' taus wrap in theirs, a long model name in its own, never a
# header inside a word.
WIDTHS = ["20%", "9%", "35%", "8%", "28%"]
TABLE_LABEL = ("each layer's tau (one per head when the model learns one per head), the initial √d_k it started from, "
               "and their ratio (its heads' lowest, mean and highest)")
# What a model without LSA is, by its variant.
WITHOUT_LSA = {"vanilla": "a ViT without LSA", "spt": "a ViT with SPT but without LSA"}


@dataclass(frozen=True)
class SlotModel:
    """A slot's LSA model as the tab shows it: the slot's letter ("A", "B", or "A = B"), the model's name, and
    its colour's index (A's blue, B's orange, as in the other tabs)."""
    tag: str
    name: str
    color: int
    model: object  # the store's loaded model

    @property
    def label(self) -> str:
        return f"{self.tag}: {self.name}"


def slot_name(ref: str, loaded) -> str:
    """A slot's model as the tab names it: its one name on the page (the slots' label)."""
    return loaded.label


def ratios(row: dict) -> str:
    """A layer's tau / √d_k: the one value, or its heads' lowest, mean and highest."""
    r = row["ratio"]
    return f"{r[0]:.2f}" if len(r) == 1 else f"{min(r):.2f} · {np.mean(r):.2f} · {max(r):.2f}"


def lsa_note(slot: SlotModel, tau: list[list[float]], start: float, epochs: int) -> str:
    """A slot's LSA model in a line: one tau per head or per layer, the range of tau / √d_k, and how many
    epochs of tau its card records (none: no trajectory)."""
    per = (f"one tau per head ({len(tau)} layers × {len(tau[0])} heads)" if len(tau[0]) > 1
           else f"one tau per layer ({len(tau)} layers)")
    ratio = [v / start for layer in tau for v in layer]
    trace = (f"its card records tau over {epochs} epochs" if epochs
             else "its card records no tau per epoch, so there is no trajectory to draw")
    return (f"**{slot.tag}**: {slot.name} learns {per}, tau / √d_k from {min(ratio):.2f} to {max(ratio):.2f} "
            f"(√d_k = {start:.3g}); {trace}.")


class TauTab:
    def __init__(self, app: AppState):
        self.app = app

    def slots(self, ref_a: str, ref_b: str, request=None) -> tuple[list[SlotModel], list[str]]:
        """The slots' LSA models, labelled A and B (once, as "A = B", when both slots hold one checkpoint), and
        a line for each slot whose model has no LSA and so no tau."""
        a, b = self.app.pair(ref_a, ref_b, request)  # a reference the visitor may not use is refused here
        same = self.app.store.key(a.ref) == self.app.store.key(b.ref)
        slots = [("A = B" if same else "A", ref_a, a, 0)] + ([] if same else [("B", ref_b, b, 1)])
        shown, without = [], []
        for tag, ref, model, color in slots:
            name = slot_name(ref, model)
            if model.config.use_lsa:
                shown.append(SlotModel(tag, name, color, model))
            else:
                what = WITHOUT_LSA.get(model.config.variant, "a model without LSA")
                without.append(f"**{tag}**: {name} is {what}: it has no tau.")
        return shown, without

    def tau(self, ref_a: str, ref_b: str, request: gr.Request = None):
        """The learned temperature tau of every Locality Self-Attention layer of the models in the two slots,
        against its initial value √d_k (below it, attention is sharper): per layer and head, and over
        training where the model's card records it. A model without LSA has no tau: the note says so.

        Args:
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]

        Returns:
            tau / √d_k per layer and head (image, none without an LSA model), its trajectory over training
            (image, none when no card records it), the table (model, layer, tau, √d_k, ratio), a note (Markdown)
        """
        shown, notes = self.slots(ref_a, ref_b, request)
        taus = {s.label: s.model.probe.tau() for s in shown}
        start = {s.label: s.model.config.initial_tau for s in shown}
        traced = {s.label: [e for e in (epoch.to_json() for epoch in s.model.card.history) if e.get("tau")]
                  for s in shown}
        notes += [lsa_note(s, taus[s.label], start[s.label], len(traced[s.label])) for s in shown]
        # one tau per layer to three decimals, as a card's; twelve per head to two, to fit the row
        rows = [[s.label, row["layer"], ", ".join(f"{v:.{3 if len(row['tau']) == 1 else 2}f}" for v in row["tau"]),
                 f"{row['initial']:.3g}",
                 ratios(row)] for s in shown for row in tau_table(s.model.model, s.model.config)]
        traced = {label: history for label, history in traced.items() if history}
        colors = {s.label: plots.model_color(s.color) for s in shown}
        return (plots.plot_tau_heads(taus, start) if shown else None,
                plots.plot_tau_trajectory(traced, start, colors) if traced else None,
                pd.DataFrame(rows, columns=COLUMNS), "\n\n".join(notes))

    def after_slot_change(self, ref_a: str, ref_b: str, request: gr.Request = None):
        """The tab redrawn when a slot changes; a refused slot is the slot's card to explain (it goes back to
        its model, which redraws this again), so nothing is shown here for it."""
        try:
            return self.tau(ref_a, ref_b, request)
        except gr.Error:
            return gr.update(), gr.update(), gr.update(), gr.update()


def on_page(handler):
    """`handler` with its two figures as pictures, and a picture it has no figure for, or a table without
    rows, hidden (the note says why). Name, docstring and signature stay the handler's (the endpoint's and the
    MCP tool's)."""
    @functools.wraps(handler)
    def shown(*args, **kwargs):
        *pictures, table, note = handler(*args, **kwargs)
        shown = table if isinstance(table, dict) else gr.update(value=table, visible=len(table) > 0)
        return (*(v if isinstance(v, dict) else gr.update(value=drawn(v), visible=isinstance(v, Figure))
                  for v in pictures), shown, note)
    return shown


def build(app: AppState, page: Page) -> TauTab:
    tab = TauTab(app)
    plot, history, table, note = initial(tab.tau, *page.refs, default=(None, None, None, ""))
    with gr.Tab("Tau", id="tau"):
        gr.Markdown("LSA divides the attention logits by a learned temperature **tau** instead of the fixed "
                    "√d_k; a tau below √d_k sharpens attention. Shown for the models in the two slots.")
        tau_btn = gr.Button("Show tau")
        tau_note = gr.Markdown(note, elem_id="tau-note")
        with gr.Row(elem_id="tau-plots"):
            tau_plot = picture("tau per layer and head", show_label=False, value=drawn(plot), min_width=PLOT_MIN,
                               visible=plot is not None)
            tau_hist = picture("tau over training", show_label=False, value=drawn(history), min_width=PLOT_MIN,
                               visible=history is not None)
        # Every row on the page (two per-head models: 18 rows), none behind a scroll of 500 px; shown while a
        # slot holds an LSA model (no table of headers alone).
        tau_frame = gr.Dataframe(table, interactive=False, wrap=True, elem_id="tau-table", column_widths=WIDTHS,
                                 max_height=4000, visible=table is not None and len(table) > 0, label=TABLE_LABEL,
                                 show_label=True)

    inputs, outputs = [page.slot_a, page.slot_b], [tau_plot, tau_hist, tau_frame, tau_note]
    # The endpoint sends pictures, or None where there is nothing to draw (an API client gets files, not the
    # page's updates); the page hides an empty picture (page.css) and a slot's change hides it outright.
    tau_btn.click(as_pictures(tab.tau), inputs, outputs, api_name="tau")
    for slot in (page.slot_a, page.slot_b):
        slot.change(on_page(tab.after_slot_change), inputs, outputs, api_name=False)
    return tab
