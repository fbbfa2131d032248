"""A model slot's card: what the loaded model is, as its checkpoint's card says (name, variant, data,
size, scores), with the reason when the slot could not load what was asked."""

from __future__ import annotations

import os

from explorer.analysis.reports import TOP5_FROM
from explorer.core.formatting import pct
from explorer.ui.context import AppState

FORMATS = {"keras2-savedmodel": "a Keras 2 SavedModel", "keras3-archive": "a Keras 3 .keras file"}


def card_markdown(app: AppState, ref: str | None, error: str | None = None, request=None) -> str:
    lines = [f"**⚠ {error}**"] if error else []
    if not ref:
        if not app.choices(request):
            where = "here" if app.shared else f"under `{app.root}`"
            lines.append(f"No checkpoints {where} yet. Train one with `python -m explorer.train`, start a run "
                         "in the Fine-tune tab, or type a Hub id (`owner/name@revision`).")
        return "\n\n".join(lines)
    loaded = app.model(ref, request)
    summary = loaded.summary()
    tau_mode = f", tau per {summary['tau_mode']}" if summary["tau_mode"] else ""
    epochs = f" · {summary['epochs']} epoch{'s' if summary['epochs'] != 1 else ''}" if summary["epochs"] else ""
    top5 = f", top-5 {pct(summary['test_top5'])}" if summary["classes"] >= TOP5_FROM else ""
    scores = ("" if summary["converted_from"] and summary["test_top1"] is None  # its note says it was not evaluated
              else f" · test top-1 **{pct(summary['test_top1'])}**{top5}")
    # The model's one name on the page (the slots' label) and the reference that the slots and the API take; for
    # a model the slots show by its reference (a Hub id), its card's name in place of the label.
    named = f"**{loaded.listed_as or summary['name']}** · `{loaded.label if not loaded.listed_as else loaded.ref}`"
    lines.append(f"{named} · `{summary['variant']}`{tau_mode} · {summary['dataset']} "
                 f"({summary['classes']} classes) · {summary['parameters']:,} parameters{scores}{epochs}")
    if summary["converted_from"]:
        lines.append(converted_note(summary["converted_from"]))
    return "\n\n".join(lines)


def converted_note(source: dict) -> str:
    """The slot's line for a model converted from the keras.io example: what it was, and its class names."""
    revision = f" @ `{source['revision'][:10]}`" if source.get("revision") else ""
    where = str(source.get("source"))
    where = os.path.basename(where) if os.path.isabs(where) else where  # a local file: no server paths
    names = (f"class names assumed: {source.get('class_names_from')}" if source.get("class_names_assumed")
             else f"class names from its {source.get('class_names_from')}")
    return (f"From the [keras.io example](https://keras.io/examples/vision/vit_small_ds/): "
            f"`{where}`{revision}, {FORMATS.get(source.get('format'), source.get('format'))} "
            f"converted into this app's layers (not evaluated here) · {names}")
