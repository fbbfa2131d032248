"""The page: its header, the two model slots, the image column and the tabs (one module each), and what
the page does when a visitor arrives, refreshes the model lists or leaves."""

from __future__ import annotations

import os

import gradio as gr

from explorer.ablation import NAMES, ORDER
from explorer.card import Card
from explorer.checkpoints import CheckpointError
from explorer.samples import examples
from explorer.shared import FINETUNED, REFUSED
from explorer.ui import attention, compare, data_size, evidence, finetune, images, patches, tau
from explorer.ui.cards import card_markdown
from explorer.ui.context import UNLISTED, Explorer, Page
from explorer.ui.finetune import base_choices
from explorer.ui.pictures import install_image_cache
from explorer.ui.tools import install_mcp_outputs, install_mcp_schemas, install_tool_list

CSS = """
.slot-card {min-height: 3.2em}
#pairs-label {align-self: center}
.pair-btn {white-space: nowrap; flex: 0 0 auto !important; min-width: max-content !important}
footer {display: none !important}
/* Output pictures carry their own captions (head, layer) along their top edge: keep Gradio's label and
   buttons above the picture instead of floating over those captions. */
.pic > label[data-testid="block-label"].float {position: static; margin-bottom: 4px}
.pic .image-container > .icon-button-wrapper {position: static; justify-content: flex-end}
/* Gallery captions ("true class: A's guess · B's guess") wrap over the picture instead of being cut. */
#ft-gallery .caption-label, #dis-gallery .caption-label {white-space: normal; max-width: none;
                                                        left: var(--block-label-margin); text-overflow: clip;
                                                        font-size: 11px; line-height: 1.25; padding: 2px 5px}
/* The query patch's outline over the picker, drawn by the page (explorer.ui.attention.OUTLINE_JS). */
.query-outline {position: absolute; box-sizing: border-box; border: 2px solid rgb(0, 255, 255);
                pointer-events: none; display: none}
/* The study's tables: numbers never break mid-number; a narrow window scrolls the table instead. */
#data-size-tables table {display: block; overflow-x: auto; max-width: 100%; width: max-content; border: 0}
#data-size-tables th, #data-size-tables td {white-space: nowrap}
/* A fine-tune's progress (Gradio's overlay) in a box of its own above the status line, never over it. */
#ft-progress {min-height: 64px; position: relative}
"""



class Slots:
    """The model slots' handlers: a card per model, loading with the previous model kept on failure."""

    def __init__(self, ex: Explorer):
        self.ex = ex

    def card_markdown(self, ref: str | None, error: str | None = None, request=None) -> str:
        return card_markdown(self.ex, ref, error, request)

    def card(self, ref: str | None) -> str:
        try:
            return self.card_markdown(ref)
        except (CheckpointError, ValueError, OSError) as e:
            return f"**⚠ could not load {ref!r}: {e}**"

    def load_slot(self, ref: str, previous: str | None, request=None, slot: str = ""):
        """Loads `ref` into a slot; on failure the previous model stays, with the reason shown."""
        try:
            self.ex.model(ref, request)
        except (CheckpointError, ValueError, OSError) as e:
            shown = previous if previous else None
            # A refused reference is not echoed: one message, whatever was typed.
            shown_ref = f"{ref!r}" if len(str(ref)) <= 120 and REFUSED not in str(e) else "that reference"
            return shown, shown, self.card_markdown(shown, error=f"could not load {shown_ref}: {self.ex.safe(e)}",
                                                    request=request)
        self.ex.shown(request, slot, ref)
        return ref, ref, self.card_markdown(ref, request=request)

    def follow(self, ref, previous, kept, request=None, slot: str = ""):
        """The page's slot change: `load_slot`, and the card a failure showed (`kept`) kept on screen. A
        failure puts the previous model back into the slot, which changes the slot once more: that second
        call finds the model it kept and leaves the message where it is, until the visitor picks again."""
        if kept and ref == previous == kept[0]:
            return ref, ref, kept[1], None
        shown, prev, card = self.load_slot(ref, previous, request, slot)
        return shown, prev, card, ((shown, card) if shown != ref else None)

    def load_a(self, ref, previous, kept=None, request: gr.Request = None):
        return self.follow(ref, previous, kept, request, "A")

    def load_b(self, ref, previous, kept=None, request: gr.Request = None):
        return self.follow(ref, previous, kept, request, "B")

    def refresh(self, a: str | None, b: str | None, request: gr.Request = None):
        choices = self.ex.slot_choices(request)
        return (gr.update(choices=choices, value=a), gr.update(choices=choices, value=b),
                gr.update(choices=base_choices(choices)))

    def lists(self, request: gr.Request = None):
        """A page opens: the model lists as they are now (runs made since the app started included), and the
        visitor's fine-tuned checkpoints with the newest chosen, ready to download."""
        choices = self.ex.slot_choices(request)
        return (gr.update(choices=choices), gr.update(choices=choices), gr.update(choices=base_choices(choices)),
                finetune.FinetuneTab(self.ex).mine(request))

    def visit(self, browser_id, request: gr.Request = None):
        """A page opens (shared mode): the visitor's id (a new one when the browser has none), their lists."""
        visitor = self.ex.arrive(browser_id, request)
        return (visitor, *self.lists(request))


def model_list(ex: Explorer, request=None) -> dict:
    """The `models` tool's answer: what the slots offer this visitor, each as its card says, and which
    are loaded."""
    loaded = set()
    for lm in ex.store.loaded():
        loaded.add(ex.store.key(lm.ref))
    listed = []
    for label, ref in ex.slot_choices(request):
        card = ex.store.local_card(ref) or Card()
        metrics, dataset = card.metrics, card.dataset
        listed.append({"ref": ref, "label": label, "variant": card.variant, "dataset": dataset.name,
                       "train_images": dataset.train_images, "test_top1": metrics.test_top1,
                       "test_top5": metrics.test_top5, "epochs": card.training.epochs,
                       "loaded": ex.store.key(ref) in loaded})
    hub = sorted({lm.ref for lm in ex.store.loaded() if ex.runs.is_hub(lm.ref)})
    a, b = ex.initial_refs()
    return {"models": listed, "loaded_from_hub": hub, "page_default": {"ref_a": a, "ref_b": b},
            "also": "any Hugging Face Hub id owner/name[@revision] of an explorer checkpoint, or of a "
                    "model of the keras.io example vit_small_ds (converted on first use)"}


# The ablation's pairs, in the order a reader asks about them: the whole gain, each part, the parts apart.
PAIRS = [("vanilla", "spt_lsa"), ("vanilla", "spt"), ("vanilla", "lsa"), ("lsa", "spt"), ("spt", "spt_lsa"),
         ("lsa", "spt_lsa")]


def ablation_pairs(ex: Explorer, ref_b: str | None) -> list[tuple[str, str, str]]:
    """(label, A, B) for each pair of the 2x2 ablation among the app's own checkpoints of slot B's dataset
    (one per variant: the one named <dataset>-<variant> when there are several); none below three variants."""
    cards = {ref: ex.store.local_card(ref) for ref in ex.runs.listing(None) if not ref.startswith(f"{FINETUNED}/")}
    dataset = (cards.get(ref_b) or Card()).dataset.name
    if dataset is None:
        return []
    by_variant: dict[str, str] = {}
    for ref, card in cards.items():
        variant = (card or Card()).variant
        if (card or Card()).dataset.name != dataset or variant not in ORDER:
            continue
        if variant not in by_variant or ref == f"{dataset}-{variant}":
            by_variant[variant] = ref
    if len(by_variant) < 3:
        return []
    return [(f"{NAMES[a]} | {NAMES[b]}", by_variant[a], by_variant[b]) for a, b in PAIRS
            if a in by_variant and b in by_variant]


def _pick(a: str, b: str):
    return lambda: (a, b)


def _classes(ex: Explorer, ref_b: str | None) -> list[str]:
    try:
        return ["random"] + (ex.store.get(ref_b).class_names if ref_b else [])
    except (CheckpointError, ValueError, OSError):
        return ["random"]


def build_demo(explorer: Explorer | None = None) -> gr.Blocks:
    ex = explorer or Explorer()
    install_image_cache()
    install_tool_list()
    install_mcp_outputs()
    install_mcp_schemas()
    slots = Slots(ex)
    choices, refs = ex.slot_choices(), ex.initial_refs()
    found = examples()
    first = found[0] if found and all(refs) else None
    with gr.Blocks(title="SPT/LSA ViT Explorer") as demo:
        # Shared mode: the visitor's random id, kept (encrypted) in their browser across reloads.
        visitor = (gr.BrowserState(None, storage_key="spt-lsa-explorer-visitor", secret=ex.browser_secret())
                   if ex.shared else None)
        gr.Markdown("# SPT/LSA ViT Explorer\nA vanilla Vision Transformer beside one with **Shifted Patch "
                    "Tokenization** and **Locality Self-Attention** ([Lee, Lee & Song 2021]"
                    "(https://arxiv.org/abs/2112.13492)), trained on the same small dataset. Pick two models, "
                    "give them an image (or click an example), and look inside.")
        prev_a, prev_b = gr.State(refs[0]), gr.State(refs[1])
        with gr.Row():
            with gr.Column():
                slot_a = gr.Dropdown(choices, value=refs[0], label="Model A", allow_custom_value=True,
                                     info="a checkpoint, or a Hub id owner/name[@revision]")
                card_a = gr.Markdown(slots.card(refs[0]), elem_classes="slot-card", elem_id="card-a")
            with gr.Column():
                slot_b = gr.Dropdown(choices, value=refs[1], label="Model B", allow_custom_value=True,
                                     info="a checkpoint, or a Hub id owner/name[@revision]")
                card_b = gr.Markdown(slots.card(refs[1]), elem_classes="slot-card", elem_id="card-b")
        pairs, pair_btns = ablation_pairs(ex, refs[1]), []
        with gr.Row(equal_height=True):
            refresh_btn = gr.Button("↻ Refresh checkpoint list", size="sm", scale=0, min_width=220)
            if pairs:  # the 2x2 ablation is here: one click puts a pair in the slots
                gr.Markdown("**Ablation pairs** (A | B):", elem_id="pairs-label", scale=0, min_width=190)
                pair_btns = [(gr.Button(label, size="sm", elem_classes="pair-btn", scale=0), a, b)
                             for label, a, b in pairs]
        with gr.Row():
            with gr.Column(scale=1, min_width=260):
                upload = images.build(ex, slot_b, _classes(ex, refs[1]), first)
            with gr.Column(scale=3):
                page = Page(slot_a, slot_b, upload, refs, first.path if first else None, tab=gr.State("Compare"),
                            loaded=(prev_a, prev_b), cards=(card_a, card_b))
                with gr.Tabs() as tabs:
                    compare.build(ex, page)
                    patches.build(ex, page)
                    attention.build(ex, page)
                    evidence.build(ex, page)
                    tau.build(ex, page)
                    data_size.build(ex, page)
                    finetune.build(ex, page)

        tabs.select(open_tab, None, [page.tab], api_name=False, queue=False)
        for btn, a, b in pair_btns:
            btn.click(_pick(a, b), None, [slot_a, slot_b], api_name=False, queue=False)
        kept_a, kept_b = gr.State(None), gr.State(None)  # a failed load's card, kept through the slot's revert
        slot_a.change(slots.load_a, [slot_a, prev_a, kept_a], [slot_a, prev_a, card_a, kept_a],
                      api_name="load_model_a", **UNLISTED)
        slot_b.change(slots.load_b, [slot_b, prev_b, kept_b], [slot_b, prev_b, card_b, kept_b],
                      api_name="load_model_b", **UNLISTED)
        ft_base, ft_mine = page.extra["ft_base"], page.extra["ft_mine"]
        refresh_btn.click(slots.refresh, [slot_a, slot_b], [slot_a, slot_b, ft_base], api_name="refresh",
                          **UNLISTED).then(
            finetune.FinetuneTab(ex).mine, None, [ft_mine], api_name=False)
        def models(request: gr.Request = None) -> dict:
            """The models this app offers you, to name as ref_a / ref_b in the other tools: each checkpoint's
            reference, label, variant (vanilla, spt, lsa, spt_lsa), dataset, training-set size, test top-1
            and top-5 (fractions), epochs, and whether it is loaded (answers at once); the Hub models loaded;
            the pair the page starts with. Any Hugging Face Hub id of an explorer checkpoint works as well.

            Returns:
                {"models": [...], "loaded_from_hub": [...], "page_default": {"ref_a", "ref_b"}, "also": ...}
            """
            return model_list(ex, request)

        gr.api(models, api_name="models")
        cell, outline_js = page.extra["outline"]
        demo.load(None, [cell], None, js=outline_js)
        if ex.shared:
            demo.load(slots.visit, [visitor], [visitor, slot_a, slot_b, ft_base, ft_mine], api_name="visitor",
                      **UNLISTED)
            demo.unload(ex.leave)
        else:  # the page was built when the app started: runs made since then are listed as it opens
            demo.load(slots.lists, None, [slot_a, slot_b, ft_base, ft_mine], api_name=False, queue=False)
    return demo


def open_tab(evt: gr.SelectData) -> str:
    """The label of the tab the visitor just opened (a tab that works only when looked at reads it)."""
    return evt.value


def mcp_server(enabled: bool = True) -> bool | None:
    """Whether the app also serves its tools over MCP (at /gradio_api/mcp/): on by default when the `mcp`
    package is there (requirements.txt installs `gradio[mcp]`); off with `python app.py --no-mcp` or
    EXPLORER_MCP=0; GRADIO_MCP_SERVER, when set, decides as Gradio documents it (None: Gradio reads it)."""
    import importlib.util
    if not enabled or os.environ.get("EXPLORER_MCP", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if "GRADIO_MCP_SERVER" in os.environ:
        return None
    return importlib.util.find_spec("mcp") is not None


def launch_kwargs(mcp: bool = True) -> dict:
    return {"server_name": os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
            "theme": gr.themes.Soft(), "css": CSS, "show_error": True, "mcp_server": mcp_server(mcp)}
