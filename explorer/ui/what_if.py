"""The Attention tab's what-if switches: each model with every layer's tau scaled and the diagonal mask
switched, on the same weights, beside the model as it learned."""

from __future__ import annotations

import gradio as gr

from explorer.analysis import lsa_switches, render
from explorer.app.attention import SAME_DEPTH, pair_layers, picture_title
from explorer.app.what_if import what_if, what_if_plot
from explorer.core.formatting import pct
from explorer.ui.context import AppState, Page, in_place
from explorer.ui.pictures import picture

# The tau factors, sqrt(2) apart, and the diagonal-mask choices (None: as the model learned).
TAU_CHOICES = [("¼×", 0.25), ("0.35×", 0.35), ("½×", 0.5), ("0.71×", 0.71), ("1× (as learned)", 1.0),
               ("1.4×", 1.41), ("2×", 2.0), ("2.8×", 2.83), ("4×", 4.0)]
MASKS = {"as learned": None, "on": True, "off": False}
TEXT = ("LSA divides every layer's attention logits by a learned temperature τ and masks the diagonal, so no "
        "patch attends to itself; here you can scale τ (for a vanilla model, its fixed √d_k) and switch the mask "
        "on or off, on the same weights. A τ below √d_k (a factor below 1×) sharpens attention: entropy and mean "
        "distance fall and the maps from the query narrow to fewer patches; with the mask off, watch how much "
        "attention each patch keeps for itself and whether the top-5 moves.")
DEFAULTS = (1.0, "as learned", 1.0, "as learned")  # both as learned, until the visitor turns a switch
PRESS = "_Press **What if** for this image._"
STALE = "**⟳ Not these settings:** the switches have changed since; press **What if** for them. What was shown:"


def marked(settings: list, shown) -> str:
    """The summary for the switches as they are now: the answer shown when they are the ones it was made with
    (`shown`: its settings and summary), else that answer under a line saying it no longer matches."""
    made_with, text = shown
    return text if list(settings) == list(made_with) else f"{STALE}\n\n{text}"

def summary_line(name: str, w) -> str:
    own = "on" if w.model.probe.diagonal_mask else "off"
    (top, p), (top_w, p_w) = next(iter(w.top5.items())), next(iter(w.top5_what_if.items()))
    timing = f"{1000 * w.seconds:.0f} ms" + (" (cached)" if w.cached else "")
    return (f"**{name}** · τ × {w.factor:g}, diagonal mask {'on' if w.diagonal_mask else 'off'} (learned: {own}) · "
            f"top-1 **{top}** {pct(p)} → **{top_w}** {pct(p_w)} · mean entropy "
            f"{w.entropy[0].mean():.2f} → {w.entropy[1].mean():.2f} nats · mean distance "
            f"{w.distance[0].mean():.1f} → {w.distance[1].mean():.1f} px · what-if pass {timing}")


def _shipped_rows(models) -> list[tuple]:
    """(tag, loaded model, its shipped SwitchRow or None) for each (tag, loaded model)."""
    return [(tag, loaded, lsa_switches.shipped_row(loaded.folder, loaded.identity)) for tag, loaded in models]


def measured_lines(models) -> str:
    """One line per (tag, loaded model) with a shipped whole-test-set measure of the switches: each setting's
    top-1 and its change against as trained; "" when none has one."""
    names = [name for name, *_ in lsa_switches.SETTINGS]
    lines = []
    for tag, _, row in _shipped_rows(models):
        if row is not None:
            base = row.top1[names[0]]
            lines.append(f"{tag} over {row.count:,} test images: as trained {100 * base:.2f} %, " + ", ".join(
                f"{n} {100 * row.top1[n]:.2f} % ({100 * (row.top1[n] - base):+.2f})" for n in names[1:]) + ".")
    return "\n\n".join(lines)


def measured_table(models) -> str:
    """The shipped whole-test-set measure of the switches (explorer/shipped/lsa_switches.json) for each (tag,
    loaded model) that has a row, as a Markdown table; a line for those that have none."""
    rows, missing = [], []
    for tag, loaded, row in _shipped_rows(models):
        if row is None:
            missing.append(f"{tag} ({loaded.name}{'' if loaded.config.use_lsa else ', no LSA'})")
        else:
            rows.append((tag, loaded, row))
    names = [name for name, *_ in lsa_switches.SETTINGS]
    lines = []
    if rows:
        count = rows[0][2].count
        lines += [f"**Measured: top-1 on {rows[0][2].dataset}** with each switch, on the same weights (the paper "
                  f"never showed this; `tools/make_lsa_switches.py`):", "",
                  "| model | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for tag, loaded, row in rows:
            base = row.top1[names[0]]
            cells = [f"{100 * base:.2f} %"] + [f"{100 * row.top1[n]:.2f} % ({100 * (row.top1[n] - base):+.2f})"
                                               for n in names[1:]]
            lines.append(f"| {tag}: {loaded.name} | " + " | ".join(cells) + " |")
        lines += ["", f"Each change in points against as trained, over {count:,} images; τ = √d_k sets every "
                      f"head's temperature back to where training started (learned: "
                      + ", ".join(f"{row.tau_ratio:.3f}" for *_, row in rows) + " × √d_k on average)."]
    if missing:
        lines += ["", f"Not measured over the test set for {' and '.join(missing)}: only the shipped SPT + LSA models "
                      "are; use the switches below on one image."]
    return "\n".join(lines).strip()


class WhatIfTab:
    def __init__(self, app: AppState):
        self.app = app

    def headings(self, ref_a: str | None, ref_b: str | None, request: gr.Request = None) -> tuple:
        """The four top-k headings for the models in the slots: top-5, or top-3 for a model of three classes."""
        ka, kb = (self.app.top_count(ref, request) for ref in (ref_a, ref_b))
        return tuple(gr.update(label=f"{tag} top-{k} {how}") for tag, k in (("A", ka), ("B", kb))
                     for how in ("as learned", "what if"))

    def measured(self, ref_a: str | None, ref_b: str | None, request: gr.Request = None) -> str:
        """The switches measured over the whole test set, for the models in the slots that were."""
        try:
            a, b = self.app.pair(ref_a, ref_b, request)
        except gr.Error:
            return ""
        return measured_table([("A", a), ("B", b)])

    def what_if(self, file, ref_a: str, ref_b: str, layer: float, qy: float, qx: float, factor_a: float,
                mask_a: str, factor_b: float, mask_b: str, layer_b: str = SAME_DEPTH, request: gr.Request = None):
        """What if the LSA switches were set otherwise: each model as learned beside the same model with its
        attention temperature tau scaled and its diagonal mask (a token not attending to itself) on or off.

        Args:
            file: the image: an http(s) or data URL (JPEG, PNG, WebP...; up to 25 MB, 40 MP; squared, resized)
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            layer: model A's layer whose maps are shown, from 0 (the change applies to every layer)
            qy: the query patch: its row as a pixel y on the 32-pixel input (0 to 31)
            qx: the query patch: its column as a pixel x on the 32-pixel input (0 to 31)
            factor_a: model A's tau multiplied by this (1.0: as learned; 0.25 to 4)
            mask_a: model A's diagonal mask: "as learned", "on" or "off"
            factor_b: model B's tau multiplied by this (1.0: as learned; 0.25 to 4)
            mask_b: model B's diagonal mask: "as learned", "on" or "off"
            layer_b: model B's layer shown, from 0; "same depth as A" (the default): at A's relative depth

        Returns:
            top-5 of A as learned, A what-if, B as learned, B what-if; the maps (image); entropy and
            distance (image); a summary (Markdown)
        """
        image, preview = self.app.image(file)
        a, b = self.app.pair(ref_a, ref_b, request)
        if mask_a not in MASKS or mask_b not in MASKS:
            raise gr.Error(f"the diagonal mask is one of {list(MASKS)}")
        try:
            la, lb = pair_layers([a, b], layer, layer_b)
            wa, wb = (what_if(model, self.app.cache, image, preview, factor, MASKS[mask], index,
                              (float(qy or 0), float(qx or 0)))
                      for model, factor, mask, index in ((a, factor_a, mask_a, la), (b, factor_b, mask_b, lb)))
        except ValueError as e:
            raise gr.Error(str(e)) from None
        tagged = (("A", wa), ("B", wb))
        names = [f"{tag}: {w.model.label}" for tag, w in tagged]
        plot = what_if_plot(list(zip(names, (wa, wb), strict=True)), self.app.plots)
        # A above B: side by side the picture is twice as wide, and shown at 0.7 of its size at 800 px.
        maps = render.stacked([render.label_image(w.maps, picture_title(tag, w.model)) for tag, w in tagged])
        summary = "\n\n".join(summary_line(n, w) for n, w in zip(names, (wa, wb), strict=True))
        summary += (f"\n\nMaps from query patch row {wb.query[0]}, col {wb.query[1]}, layer {wa.layer} for A, "
                    f"{wb.layer} for B (each coloured from 0 to its own maximum).")
        measured = measured_lines([("A", a), ("B", b)])
        if measured:  # beside one image's answer, what the same switches do over the whole test set
            summary += "\n\n" + measured
        return wa.top5, wa.top5_what_if, wb.top5, wb.top5_what_if, maps, plot, summary


def build(app: AppState, page: Page, layer: gr.Dropdown, qy: gr.Number, qx: gr.Number,
          layer_b: gr.Dropdown) -> WhatIfTab:
    tab = WhatIfTab(app)
    # Nothing is computed at start-up: the accordion is closed, and a what-if probe costs memory per model.
    first = (None,) * 6 + (PRESS,)
    with gr.Accordion("LSA switches: what if τ or the diagonal mask were different?", open=False):
        gr.Markdown(TEXT, elem_id="what-if-text")
        measured = gr.Markdown(tab.measured(*page.refs) if all(page.refs) else "", elem_id="lsa-switches-measured")
        with gr.Row():
            factor_a = gr.Dropdown(TAU_CHOICES, value=DEFAULTS[0], label="A: τ factor", elem_id="wi-factor-a")
            mask_a = gr.Radio(list(MASKS), value=DEFAULTS[1], label="A: diagonal mask", elem_id="wi-mask-a")
            factor_b = gr.Dropdown(TAU_CHOICES, value=DEFAULTS[2], label="B: τ factor", elem_id="wi-factor-b")
            mask_b = gr.Radio(list(MASKS), value=DEFAULTS[3], label="B: diagonal mask", elem_id="wi-mask-b")
        button = gr.Button("What if", variant="primary", elem_id="what-if-btn")
        summary = gr.Markdown(first[6], elem_id="what-if-summary")
        with gr.Row():
            named = [h["label"] for h in tab.headings(*page.refs)]
            top_a = gr.Label(first[0], num_top_classes=5, label=named[0], elem_id="wi-learned-a",
                             elem_classes="until-filled")
            top_a2 = gr.Label(first[1], num_top_classes=5, label=named[1], elem_id="wi-top-a",
                             elem_classes="until-filled")
            top_b = gr.Label(first[2], num_top_classes=5, label=named[2], elem_id="wi-learned-b",
                             elem_classes="until-filled")
            top_b2 = gr.Label(first[3], num_top_classes=5, label=named[3], elem_id="wi-top-b",
                             elem_classes="until-filled")
        maps = picture("from the query, learned and what if: A above B", elem_id="what-if-maps", value=first[4],
                       elem_classes="until-filled")
        plot = picture("entropy and distance, learned and what if", show_label=False, elem_id="what-if-plot",
                       value=first[5], elem_classes="until-filled")
    outputs = [top_a, top_a2, top_b, top_b2, maps, plot, summary]
    switches = [factor_a, mask_a, factor_b, mask_b]
    shown = gr.State(None)  # the switches the shown answer was made with, and its summary
    button.click(in_place(tab.what_if, outputs, summary, "not shown"),
                 [page.upload, page.slot_a, page.slot_b, layer, qy, qx, factor_a, mask_a, factor_b, mask_b, layer_b],
                 outputs,
                 api_name="what_if", concurrency_limit=4, concurrency_id="attention").success(
        lambda *now: (list(now[:-1]), now[-1]), [*switches, summary], [shown], api_name=False, queue=False)
    # A switch turned after an answer: the answer stays, marked as not these settings until What if is pressed
    # (or the switch is turned back).
    gr.on([c.change for c in switches], lambda *now: gr.skip() if now[-1] is None else marked(now[:-1], now[-1]),
          [*switches, shown], [summary], api_name=False, queue=False)
    # A new image or another model: the shown what-if is out of date; nothing is computed until What if
    # is pressed.
    gr.on(page.new_input(), lambda: (None,) * 6 + (PRESS, None), None,
          [top_a, top_a2, top_b, top_b2, maps, plot, summary, shown], api_name=False, queue=False)
    gr.on(page.new_models(), tab.headings, list(page.loaded),
          [top_a, top_a2, top_b, top_b2], api_name=False, queue=False)
    gr.on(page.new_models(), tab.measured, list(page.loaded), [measured], api_name=False)
    return tab
