"""The Tau tab: each LSA model's learned temperature per layer against √d_k, and over training."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from explorer.analysis import plots
from explorer.checkpoints.catalog import STUDY
from explorer.checkpoints.visitors import FINETUNED
from explorer.model.config import ViTConfig
from explorer.model.probe import tau_table
from explorer.ui.context import AppState, Page, initial
from explorer.ui.pictures import PLOT_MIN, as_pictures, drawn, picture

COLUMNS = ["model", "layer", "tau", "√d_k", "tau / √d_k"]
# Shares of the table's width: a narrow window wraps a long model name, never a header or a number.
WIDTHS = ["31%", "15%", "20%", "14%", "20%"]


class TauTab:
    def __init__(self, app: AppState):
        self.app = app

    def shipped_lsa(self, request=None) -> list[str]:
        """The app's own full-data LSA checkpoints (not fine-tuned runs, nor the small-data study's, which
        show when a slot holds them), read from their cards without loading."""
        refs = []
        for ref in self.app.choices(request):
            card = None if ref.startswith((f"{FINETUNED}/", f"{STUDY}/")) else self.app.store.local_card(ref)
            try:
                if card is not None and ViTConfig.from_dict(card.config).use_lsa:
                    refs.append(ref)
            except (KeyError, TypeError, ValueError):
                continue  # a broken card: its slot says why when it is chosen
        return refs

    def models(self, ref_a: str, ref_b: str, request=None) -> list:
        """The LSA models to show: every shipped LSA checkpoint (so the LSA-only and the SPT/LSA model sit
        side by side whatever the slots hold), then the slots' own; a model that has left the slots is not
        shown, though it may still be loaded."""
        a, b = self.app.pair(ref_a, ref_b, request)  # a reference the visitor may not use is refused here
        shipped = []
        for ref in self.shipped_lsa(request):
            try:
                shipped.append(self.app.store.get(ref))
            except (OSError, ValueError):  # CheckpointError included: a broken checkpoint is left out
                continue
        models, seen = [], set()
        for model in shipped + [a, b]:
            key = self.app.store.key(model.ref)
            if model.config.use_lsa and key not in seen:
                seen.add(key)
                models.append(model)
        return models

    def tau(self, ref_a: str, ref_b: str, request: gr.Request = None):
        """The learned temperature tau of every Locality Self-Attention layer, against its initial value
        √d_k (below it, attention is sharper): per layer and over training, for the LSA models among the two
        given and the app's own LSA checkpoints.

        Args:
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]

        Returns:
            tau per layer (image), tau over training (image), the table (model, layer, tau, √d_k, ratio)
        """
        models = self.models(ref_a, ref_b, request)
        per_model = {model.label: model.probe.tau() for model in models}
        initial_tau = {model.label: model.config.initial_tau for model in models}
        history = {model.label: [e.to_json() for e in model.card.history] for model in models}
        rows = [[model.label, row["layer"], ", ".join(f"{v:.3f}" for v in row["tau"]), f"{row['initial']:.3f}",
                 f"{row['mean_tau'] / row['initial']:.2f}"]
                for model in models for row in tau_table(model.model, model.config)]
        return (plots.plot_tau(per_model, initial_tau), plots.plot_tau_history(history),
                pd.DataFrame(rows, columns=COLUMNS))


    def after_slot_change(self, ref_a: str, ref_b: str, request: gr.Request = None):
        """The tab redrawn when a slot changes; a refused slot is the slot's card to explain (it goes back to
        its model, which redraws this again), so nothing is shown here for it."""
        try:
            return self.tau(ref_a, ref_b, request)
        except gr.Error:
            return gr.update(), gr.update(), gr.update()


def build(app: AppState, page: Page) -> TauTab:
    tab = TauTab(app)
    plot, history, table = initial(tab.tau, *page.refs, default=(None, None, None))
    with gr.Tab("Tau", id="tau"):
        gr.Markdown("LSA divides the attention logits by a learned temperature **tau** instead of the fixed "
                    "√d_k; a tau below √d_k sharpens attention.")
        tau_btn = gr.Button("Show tau")
        with gr.Row(elem_id="tau-plots"):
            tau_plot = picture("tau per layer", show_label=False, value=drawn(plot), min_width=PLOT_MIN)
            tau_hist = picture("tau over training", show_label=False, value=drawn(history), min_width=PLOT_MIN)
        gr.Markdown("The table: each layer's tau (one per head when the model learns one per head), the "
                    "initial √d_k it started from, and their ratio (mean over heads).")
        # Every row on the page (two per-head models: 24 rows, 1,162 px), none behind a scroll of 500 px.
        tau_frame = gr.Dataframe(table, interactive=False, wrap=True, elem_id="tau-table", column_widths=WIDTHS,
                                 max_height=4000)

    inputs, outputs = [page.slot_a, page.slot_b], [tau_plot, tau_hist, tau_frame]
    tau_btn.click(as_pictures(tab.tau), inputs, outputs, api_name="tau")
    for slot in (page.slot_a, page.slot_b):
        slot.change(as_pictures(tab.after_slot_change), inputs, outputs, api_name=False)
    return tab
