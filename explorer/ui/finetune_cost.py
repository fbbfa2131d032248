"""The Fine-tune tab's words before a Start: a zip too small for the run to decide (finetune_text.small_data_note),
and what this run will cost on this machine (explorer.app.costs), measured; when it is long on a CPU, the
faster choices one click away: the shipped 0.2 M pair on the same zip, or fewer epochs."""

from __future__ import annotations

import gradio as gr

from explorer.app.costs import Cost, costs
from explorer.app.state import SHIPPED_PAIR
from explorer.checkpoints.store import CheckpointError
from explorer.finetune.backend import hardware
from explorer.finetune.plan import ZIP, JobError, plan_job
from explorer.ui.finetune_run import PAIR
from explorer.ui.finetune_text import cost_note, duration, small_data_note

HIDDEN = gr.update(visible=False)


class CostNote:
    """The note under the form and its two buttons (the shipped pair, fewer epochs), for `tab` (the FinetuneTab
    whose finetune_plan reads the form)."""

    def __init__(self, tab):
        self.tab, self.app = tab, tab.app

    def shipped_label(self) -> str | None:
        """The shipped pair in a few words ("the shipped 0.2 M pair"), None where it is not here."""
        cards = [self.app.store.local_card(ref) for ref in SHIPPED_PAIR]
        if None in cards or not all(ref in self.app.runs.listing(None) for ref in SHIPPED_PAIR):
            return None
        size = max(c.parameters or 0 for c in cards)
        return f"the shipped {size / 1e6:.1f} M pair" if size else "the shipped pair"

    def note(self, what, preset, variant, data, zip_file, epochs, lr, batch_size, images, freeze, name, ref_a, ref_b,
             train_on_all=False, request: gr.Request = None):
        """Said before a Start, as the zip, the form or the slots change: that the zip is too small for the
        fine-tune to decide, and what the run will cost here (measured first where this machine has no pace
        for its models yet), with the faster choices when it is long on a CPU; nothing without a zip, or for
        a form a Start would refuse (the Start says why)."""
        if data != ZIP or zip_file is None:
            yield "", HIDDEN, HIDDEN
            return
        form = (preset, variant, data, zip_file, epochs, lr, batch_size, images, freeze, name)
        try:
            plan = self.tab.finetune_plan(what, *form, ref_a, ref_b, request=request, train_on_all=train_on_all)
        except gr.Error:
            yield "", HIDDEN, HIDDEN
            return
        small = small_data_note(plan)
        label = self.shipped_label()

        def shipped_plan():  # the same data and numbers, read once: only the bases change
            if what != PAIR or label is None or (ref_a, ref_b) == SHIPPED_PAIR:
                return None
            try:
                return plan_job(self.app.store.bases(list(zip("AB", SHIPPED_PAIR, strict=True))), plan.dataset,
                                epochs, lr, batch_size, images, bool(freeze), (name or "").strip(), self.app.limits,
                                train_on_all=bool(train_on_all))
            except (JobError, CheckpointError, OSError):
                return None

        on_cpu = not hardware(self.app.runner.settings).gpu
        for cost in costs(plan, self.app.runner, on_cpu, shipped_plan):
            yield self.shown(cost, small, label, on_cpu)

    @staticmethod
    def shown(cost: Cost, small: str, label: str | None, on_cpu: bool):
        text = "\n\n".join(t for t in (small, cost_note(cost, label, on_cpu)) if t)
        pair = (gr.update(value=f"Fine-tune {label} instead (about {duration(cost.shipped.seconds)})", visible=True)
                if cost.shipped is not None else HIDDEN)
        fewer = (gr.update(value=f"{cost.fewer[0]} epoch{'s' if cost.fewer[0] > 1 else ''} instead (about "
                                 f"{duration(cost.fewer[1].seconds)})", visible=True) if cost.fewer else HIDDEN)
        return text, pair, fewer


def layout() -> list:
    """The note and its two buttons, hidden until they have something to say, under the form."""
    note = gr.Markdown("", elem_id="ft-plan-note")
    with gr.Row():
        pair_btn = gr.Button(visible=False, size="sm", elem_id="ft-shipped-pair", scale=0, min_width=260)
        fewer_btn = gr.Button(visible=False, size="sm", elem_id="ft-fewer-epochs", scale=0, min_width=220)
    return [note, pair_btn, fewer_btn]


def wire(tab, outputs: list, form: list, page) -> None:
    """Each change of the zip, the form (`form`: finetune's inputs, the slots among them) or the slots says the
    cost again; a button puts its choice into the slots or the epochs, and the cost follows."""
    cost, (_, pair_btn, fewer_btn) = CostNote(tab), outputs
    what, data, zip_file, epochs, batch, subset, all_images = (form[i] for i in (0, 3, 4, 5, 7, 8, 13))
    triggers = [zip_file.change, data.change, what.change, subset.blur, subset.submit, all_images.change,
                epochs.blur, epochs.submit, batch.blur, batch.submit, page.slot_a.change, page.slot_b.change]
    gr.on(triggers, cost.note, form, outputs, api_name=False, show_progress="hidden", trigger_mode="always_last")
    pair_btn.click(lambda: SHIPPED_PAIR, None, [page.slot_a, page.slot_b], api_name=False, queue=False)
    fewer_btn.click(lambda label: int(label.split()[0]), [fewer_btn], [epochs], api_name=False, queue=False).then(
        cost.note, form, outputs, api_name=False, show_progress="hidden", trigger_mode="always_last")
