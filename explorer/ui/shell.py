"""The page: its header, the two model slots, the image column and the tabs (one module each), and what
the page does when a visitor arrives, refreshes the model lists or leaves."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import gradio as gr

from explorer.checkpoints.finetuned import REFUSED
from explorer.checkpoints.store import CheckpointError
from explorer.core.settings import Settings
from explorer.data.samples import examples
from explorer.ui import attention, compare, data_size, evidence, finetune, gradio_patches, images, patches, tau, trust
from explorer.ui.cards import card_markdown
from explorer.ui.context import UNLISTED, AppState, Page
from explorer.ui.finetune import FinetuneTab
from explorer.ui.finetune_run import base_choices

# The page's style sheet, read as the page is launched; a tracked file beside this one, so a clone and a Space
# have it.
PAGE_CSS = Path(__file__).with_name("page.css")

TABS_MIN = 560  # px: the tabs' column is never narrower (the tab buttons, a table's columns, a plot's labels)

INTRO = ("# SPT/LSA ViT Explorer\nA vanilla ViT beside one with **Shifted Patch Tokenization** and **Locality "
         "Self-Attention** ([Lee, Lee & Song 2021](https://arxiv.org/abs/2112.13492)), on the same small data: give "
         "them an image, look inside.")


# The paper-scale pair's button: what it puts in the slots, in a few words.
PAPER_PAIR_LABEL = "Paper scale (2.7 M parameters): ViT | SPT + LSA"


def slot_card(app: AppState, ref: str | None) -> str:
    """A slot's card as the page is built: the model's, or why it could not be loaded."""
    try:
        return card_markdown(app, ref)
    except (CheckpointError, ValueError, OSError) as e:
        return f"**⚠ could not load {ref!r}: {e}**"


class Slots:
    """The model slots' handlers: a card per model, loading with the previous model kept on failure; the
    lists of models (the slots', the Fine-tune tab's) as they are now."""

    def __init__(self, app: AppState, finetune: FinetuneTab, tab_labels: dict[str, str] | None = None):
        self.app = app
        self.finetune = finetune  # the Fine-tune tab, whose list of the visitor's runs follows the slots' lists
        self.tab_labels = tab_labels or {}  # each tab's label by its id: the tab a link reopens

    def card_markdown(self, ref: str | None, error: str | None = None, request=None) -> str:
        return card_markdown(self.app, ref, error, request)

    def load_slot(self, ref: str, previous: str | None, request=None, slot: str = ""):
        """Loads `ref` into a slot; on failure the previous model stays, with the reason shown."""
        try:
            self.app.model(ref, request)
        except (CheckpointError, ValueError, OSError) as e:
            shown = previous if previous else None
            # A refused reference is not echoed: one message, whatever was typed.
            shown_ref = f"{ref!r}" if len(str(ref)) <= 120 and REFUSED not in str(e) else "that reference"
            return shown, shown, self.card_markdown(shown, error=f"could not load {shown_ref}: {self.app.safe(e)}",
                                                    request=request)
        self.app.shown(request, slot, ref)
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
        choices = self.app.slot_choices(request)
        return (gr.update(choices=choices, value=a), gr.update(choices=choices, value=b),
                gr.update(choices=base_choices(choices)))

    def lists(self, request: gr.Request = None):
        """A page opens: the model lists as they are now (runs made since the app started included), and the
        visitor's fine-tuned checkpoints with the newest chosen, ready to download."""
        choices = self.app.slot_choices(request)
        return (gr.update(choices=choices), gr.update(choices=choices), gr.update(choices=base_choices(choices)),
                self.finetune.mine(request))

    def reopen(self, a: str | None, b: str | None, loaded_a: str | None, loaded_b: str | None, tab: str | None,
               linked: bool = False, request: gr.Request = None):
        """A page opens. From a link to a view (Gradio's deep link: `linked`), its slots hold the models the
        view showed and `tab` the tab that was open: the models are loaded into the slots and their States,
        the tab is opened, and `reopened` changes so that every analysis is redone for the models and image
        now on the page. A model this visitor may not have (someone's fine-tuned run in a shared
        Space) or one that no longer loads is replaced by the page's default, and its card says why. A
        plain page open changes nothing."""
        keep = gr.update()
        if not linked:
            return (keep,) * 9
        cards, refs, states = [keep, keep], [keep, keep], [keep, keep]
        for i, (tag, ref, held) in enumerate(zip("AB", (a, b), (loaded_a, loaded_b), strict=True)):
            if not ref or ref == held:
                continue
            try:
                self.app.model(ref, request)
                card = self.card_markdown(ref, request=request)
            except (CheckpointError, ValueError, OSError) as e:
                why, ref = self.app.safe(e), self.app.initial_refs()[i]
                card = self.card_markdown(ref, error=f"the link's model {tag} could not be opened: {why}",
                                          request=request)
            if ref:
                self.app.shown(request, tag, ref)
            refs[i], states[i], cards[i] = ref, ref, card
        label = self.tab_labels.get(tab or "")
        return (*refs, *states, *cards, gr.Tabs(selected=tab) if label else keep, label or keep, uuid.uuid4().hex)

    def visit(self, browser_id, request: gr.Request = None):
        """A page opens (shared mode): the visitor's id (a new one when the browser has none), their lists."""
        visitor = self.app.arrive(browser_id, request)
        return (visitor, *self.lists(request))


def _pick(a: str, b: str):
    return lambda: (a, b)


def pair_variant(pair: tuple[str, str], a: str | None, b: str | None) -> str:
    """A pair button's look: chosen (primary) while the slots hold its pair."""
    return "primary" if (a, b) == tuple(pair) else "secondary"


def _chosen(pair_btns):
    def chosen(a, b):
        return tuple(gr.update(variant=pair_variant(pair, a, b)) for _, *pair in pair_btns)
    return chosen


def build_demo(app: AppState | None = None) -> gr.Blocks:
    """The page on `app` (a new AppState when none is given): the header, the model slots, the image column
    and the tabs, wired; and what the page does when a visitor arrives, refreshes the lists or leaves."""
    app = app or AppState()
    gradio_patches.install()
    choices, refs = app.slot_choices(), app.initial_refs()
    found = examples()
    first = found[0] if found and all(refs) else None
    with gr.Blocks(title="SPT/LSA ViT Explorer") as demo:
        # Shared mode: the visitor's random id, kept (encrypted) in their browser across reloads.
        visitor = (gr.BrowserState(None, storage_key="spt-lsa-explorer-visitor", secret=app.browser_secret())
                   if app.shared else None)
        gr.Markdown(INTRO, elem_id="intro")
        loaded = gr.State(refs[0]), gr.State(refs[1])
        slot_a, card_a, slot_b, card_b = _model_slots(app, choices, refs)
        refresh_btn, pair_btns = _toolbar(app, refs)
        with gr.Row():
            with gr.Column(scale=1, min_width=260, elem_id="image-col"):  # two columns of its own at 800 px (page.css)
                upload = images.build(app, slot_b, loaded, first)
            # Beside the image column where both fit; in a narrow window (800 px) the tabs go below it, with
            # the whole width for their tab buttons, tables and pictures.
            with gr.Column(scale=3, min_width=TABS_MIN):
                page = Page(slot_a, slot_b, upload, refs, first.path if first else None, tab=gr.State("Compare"),
                            loaded=loaded, cards=(card_a, card_b), reopened=gr.State(0))
                tabs, finetune_tab = _tabs(app, page)

        # The open tab's id, kept where Gradio's deep link saves what the page shows (a State is not).
        shown_tab = gr.Textbox("", visible=False, elem_id="open-tab")
        tabs.select(tab_opener(tabs), None, [page.tab, shown_tab], api_name=False, queue=False)
        for btn, a, b in pair_btns:
            btn.click(_pick(a, b), None, [slot_a, slot_b], api_name=False, queue=False)
        if pair_btns:  # the button of the pair in the slots is drawn as chosen, the others not
            gr.on([slot_a.change, slot_b.change], _chosen(pair_btns), [slot_a, slot_b], [b for b, *_ in pair_btns],
                  api_name=False, queue=False)
        slots = Slots(app, finetune_tab, {i: label for label, i in tab_ids(tabs).items()})
        _wire_slots(slots, page, refresh_btn)
        gr.api(_models_tool(app), api_name="models")
        # A link to a view reopens its models and tab once the visitor is known (whose runs they may open).
        from_link = gr.Checkbox(False, visible=False)  # set by the page itself (FROM_LINK): a State would not be
        reopened = _wire_page_open(app, demo, slots, page, visitor).then(
            slots.reopen, [page.slot_a, page.slot_b, *page.loaded, shown_tab, from_link],
            [page.slot_a, page.slot_b, *page.loaded, *page.cards, tabs, page.tab, page.reopened], api_name=False,
            js=FROM_LINK)
        # A page opened while the visitor's own run goes on (a reload, a second tab) follows it; one opened after
        # it ended with no page following it shows how it ended.
        finetune_tab.follow_on_open(reopened, page)
    return demo


def _model_slots(app: AppState, choices, refs) -> tuple[gr.Dropdown, gr.Markdown, gr.Dropdown, gr.Markdown]:
    """Model A's slot and card beside model B's."""
    made = []
    with gr.Row(elem_id="slots-row"):
        for name, ref in zip("AB", refs, strict=True):
            with gr.Column():
                slot = gr.Dropdown(choices, value=ref, label=f"Model {name}", allow_custom_value=True,
                                   info="a checkpoint, or a Hub id owner/name[@revision]")
                card = gr.Markdown(slot_card(app, ref), elem_classes="slot-card", elem_id=f"card-{name.lower()}")
            made += [slot, card]
    return tuple(made)


def _toolbar(app: AppState, refs) -> tuple[gr.Button, list[tuple[gr.Button, str, str]]]:
    """The refresh button, the paper-scale pair's button when both its models are here, and, when the 2x2
    ablation is here, a button per pair (each with the pair it puts in the slots; the one in the slots `refs`
    drawn as chosen)."""
    pairs, pair_btns, paper = app.ablation_pairs(refs[1]), [], app.paper_pair()
    with gr.Row(equal_height=True, elem_id="toolbar"):
        refresh_btn = gr.Button("↻ Refresh checkpoint list", size="sm", scale=0, min_width=220)
        # Gradio's deep link: what the page shows is saved, and the copied link reopens it (see Slots.reopen).
        gr.DeepLinkButton("Copy a link to this view", copied_value="Link copied", size="sm", scale=0,
                          min_width=220)
        if paper:  # the paper's own scale, one click from the first screen
            pair_btns.append((gr.Button(PAPER_PAIR_LABEL, size="sm", variant=pair_variant(paper, *refs), scale=0,
                                        min_width=220,
                                        elem_id="paper-pair-btn", elem_classes="pair-btn"), *paper))
    if pairs:  # the 2x2 ablation is here: one click puts a pair in the slots (a row of their own: one line at 1280 px)
        with gr.Row(elem_id="pairs-row"):
            gr.Markdown("**Ablation pairs** (A | B):", elem_id="pairs-label", scale=0, min_width=190)
            pair_btns += [(gr.Button(label, size="sm", variant=pair_variant((a, b), *refs), elem_classes="pair-btn",
                                     scale=0), a, b)
                          for label, a, b in pairs]
    return refresh_btn, pair_btns


def _tabs(app: AppState, page: Page) -> tuple[gr.Tabs, FinetuneTab]:
    """The tabs, one module each; the Fine-tune tab's handlers are also the slots' (its list of runs)."""
    with gr.Tabs() as tabs:
        for module in (compare, patches, attention, evidence, trust, tau, data_size):
            module.build(app, page)
        finetune_tab = finetune.build(app, page)
    return tabs, finetune_tab


def _wire_slots(slots: Slots, page: Page, refresh_btn: gr.Button) -> None:
    """A slot's change loads its model (the previous one kept, with the reason, on failure); the refresh
    button lists the checkpoints as they are now, in the slots and the Fine-tune tab."""
    (prev_a, prev_b), (card_a, card_b) = page.loaded, page.cards
    kept_a, kept_b = gr.State(None), gr.State(None)  # a failed load's card, kept through the slot's revert
    page.slot_a.change(slots.load_a, [page.slot_a, prev_a, kept_a], [page.slot_a, prev_a, card_a, kept_a],
                       api_name="load_model_a", **UNLISTED)
    page.slot_b.change(slots.load_b, [page.slot_b, prev_b, kept_b], [page.slot_b, prev_b, card_b, kept_b],
                       api_name="load_model_b", **UNLISTED)
    lists = [page.slot_a, page.slot_b, page.from_tabs.finetune_base]
    refresh_btn.click(slots.refresh, [page.slot_a, page.slot_b], lists, api_name="refresh", **UNLISTED).then(
        slots.finetune.mine, None, [page.from_tabs.finetune_runs], api_name=False)


def _models_tool(app: AppState):
    """The `models` endpoint (an MCP tool): its name and docstring are what a client reads."""
    def models(request: gr.Request = None) -> dict:
        """The models this app offers you, to name as ref_a / ref_b in the other tools: each checkpoint's
        reference, label, variant (vanilla, spt, lsa, spt_lsa), dataset, training-set size, test top-1
        and top-5 (fractions), epochs, and whether it is loaded (answers at once); the Hub models loaded;
        the pair the page starts with. Any Hugging Face Hub id of an explorer checkpoint works as well.

        Returns:
            {"models": [...], "loaded_from_hub": [...], "page_default": {"ref_a", "ref_b"}, "also": ...}
        """
        return app.model_list(request)

    return models


def _wire_page_open(app: AppState, demo: gr.Blocks, slots: Slots, page: Page, visitor):
    """What the page does as it opens (the query's outline drawn; the lists as they are now, and in shared
    mode the visitor's id) and, in shared mode, as it closes. Returns the event that lists the models."""
    from_tabs = page.from_tabs
    demo.load(None, [from_tabs.query_cell], None, js=from_tabs.outline_js)
    lists = [page.slot_a, page.slot_b, from_tabs.finetune_base, from_tabs.finetune_runs]
    if app.shared:
        opened = demo.load(slots.visit, [visitor], [visitor, *lists], api_name="visitor", **UNLISTED)
        demo.unload(app.leave)
        return opened
    # The page was built when the app started: runs made since then are listed as it opens.
    return demo.load(slots.lists, None, lists, api_name=False, queue=False)


# The reopen handler's last input: whether the page was opened from a link to a view (Gradio's deep link).
FROM_LINK = "(...args) => [...args.slice(0, -1), new URLSearchParams(location.search).has('deep_link')]"


def tab_ids(tabs: gr.Tabs) -> dict[str, str]:
    """Each tab's id by its label."""
    return {child.label: child.id for child in tabs.children if isinstance(child, gr.Tab)}


def tab_opener(tabs: gr.Tabs):
    """The handler of a tab's opening: (its label, for a tab that works only when looked at; its id, for the
    page's link to reopen it)."""
    ids = tab_ids(tabs)

    def open_tab(evt: gr.SelectData) -> tuple[str, str]:
        return evt.value, ids.get(evt.value, "")

    return open_tab


def mcp_server(settings: Settings, enabled: bool = True) -> bool | None:
    """Whether the app also serves its tools over MCP (at /gradio_api/mcp/): on by default when the `mcp`
    package is there (requirements.txt installs `gradio[mcp]`); off with `python app.py --no-mcp` or
    EXPLORER_MCP=0; GRADIO_MCP_SERVER, when set, decides as Gradio documents it (None: Gradio reads it)."""
    if not enabled or not settings.mcp:
        return False
    if settings.gradio_mcp_server is not None:
        return None
    return importlib.util.find_spec("mcp") is not None


def launch_kwargs(settings: Settings, mcp: bool = True) -> dict:
    return {"server_name": settings.server_name,
            "theme": gr.themes.Soft(), "css": PAGE_CSS.read_text(encoding="utf-8"), "show_error": True,
            "mcp_server": mcp_server(settings, mcp)}
