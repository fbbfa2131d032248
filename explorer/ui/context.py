"""What every tab shares: the app's state (explorer.app.state) as a Gradio page reaches it, in `AppState`; the
page's common components, in `Page`, with those one tab makes for another part of the page in `TabComponents`;
the errors the page shows, and what a tab does with them."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import gradio as gr
import numpy as np

from explorer.app.state import ExplorerState
from explorer.checkpoints.store import CheckpointError
from explorer.data.datasets import DatasetError
from explorer.data.inputs import ImageInputError


def shares(columns: int, first: int) -> list[str]:
    """A table's column widths: `first` per cent for the first column (a model, a class), the rest shared by
    the others, so that every column is on the page in a narrow window."""
    return [f"{first}%"] + [f"{(100 - first) / (columns - 1):.1f}%"] * (columns - 1) if columns > 1 else ["100%"]


def reporter(progress):
    """explorer.data.datasets's progress(fraction or None, message) as a Gradio progress bar (a no-op outside a
    request)."""
    return lambda fraction, message: progress(fraction, desc=message)


# Events the page needs but an API user does not: loading a slot, refreshing the lists, a visitor's arrival,
# a partial redraw (a query click, a layer change), a size's pair put in the slots. Still callable through
# gradio_client by name, as the page calls them; left out of the API page and of the MCP tools, which are
# the explorer's questions (docs/api.md, "MCP tools").
UNLISTED = {"api_visibility": "undocumented"}


@dataclass
class TabComponents:
    """Components one tab makes and another part of the page updates; each set by the tab that makes it."""

    finetune_base: gr.Dropdown | None = None  # what to fine-tune: its list follows the slots' lists
    finetune_runs: gr.Dropdown | None = None  # the visitor's fine-tuned checkpoints: listed as a page opens
    compare_running: gr.Markdown | None = None  # Compare's line on the visitor's fine-tune (waiting, running)
    query_cell: gr.JSON | None = None         # Attention's query patch: the page draws its outline ...
    outline_js: str | None = None             # ... with this script, once the page has loaded
    # Notes beside a kind of map (how faithful it measured), each with the handler that writes it: redrawn
    # when the Trust tab has measured the pair.
    map_notes: list = field(default_factory=list)


@dataclass
class Page:
    """The components every tab reads: the two model slots and the image, with the first example's file."""

    slot_a: gr.Dropdown
    slot_b: gr.Dropdown
    upload: gr.File
    refs: tuple[str | None, str | None] = (None, None)  # the slots' models when the page opens
    first: str | None = None          # the example the page opens with, analysed when the app starts
    from_tabs: TabComponents = field(default_factory=TabComponents)  # components one tab makes for another
    tab: gr.State | None = None       # the label of the tab this visitor has open (set by the shell)
    loaded: tuple = ()                # States that change when a slot has loaded another model
    cards: tuple = ()                 # the slots' cards (what each loaded model is)
    reopened: gr.State | None = None  # changes when a link to a view has reopened it: everything is redrawn

    def new_input(self) -> list:
        """The events after which an image's analysis is out of date: a new image, or another model loaded
        into a slot (a failed load keeps the slot's model, and its analysis), or a view reopened from a link
        (what a link saves is what the page showed, not always what its last answers were)."""
        return [self.upload.change, *self.new_models(), *([self.reopened.change] if self.reopened else [])]

    def held(self, inputs: list) -> list:
        """`inputs` with each slot's dropdown replaced by the State holding the model it has loaded. An event
        the page fires itself (a new image, another model) reads these: when a fine-tune's one update fills
        the slots and their States, the States' change fires before the page has taken the dropdowns' new
        values, and a handler reading the dropdowns would answer for the previous models."""
        swap = {id(self.slot_a): self.loaded[0], id(self.slot_b): self.loaded[1]}
        return [swap.get(id(c), c) for c in inputs]

    def new_models(self) -> list:
        """The events after which a report over the test set (made for the previous pair) is out of date."""
        return [state.change for state in self.loaded]


class ImageError(gr.Error):
    """The page's image cannot be used (none yet, or a file that is not an image): the visitor's mistake,
    so one line in the server's log and no traceback."""

    def __init__(self, message: str):
        print(f"image refused: {message}", flush=True)
        super().__init__(message, print_exception=False)


class NoImage(ImageError):
    """The page has no image yet."""


NO_IMAGE = "_No image yet: upload one, click an example or take a sample from the test set._"
# What a tab shows in place of its answers when the image cannot be read: where the one message is.
UNREADABLE = "_Nothing to show: the image could not be read (the reason is under the upload, on the left)._"


def expected(message: str, what: str, toast: bool = True) -> gr.Error:
    """A gr.Error for a user's mistake (a bad upload, a zip without class folders, a number out of range):
    one line in the server's log instead of a traceback, which stays for real faults. `toast=False` when the
    page already shows `message` in place (an API caller still receives it)."""
    print(f"{what}: {message}", flush=True)
    return gr.Error(message, visible=toast, print_exception=False)


# The class of a button's outputs whose refusals the page says in place (in_place): page.css hides Gradio's
# "Error" badge over them, which would otherwise cover each of them and outlast the toast that said why.
IN_PLACE = "in-place"
FAULT = "the server failed while doing it (its log says why); try again, or with other models"


def in_place(handler, outputs: list, why, what: str):
    """`handler` for a button whose refusal belongs on the page, not only in a toast that fades: a gr.Error
    (a zip of other classes, a class the models do not predict, a model that cannot be loaded) or a fault
    empties the event's `outputs`, and `why`, a Markdown among them, says `**⚠ {what}:** reason`; an API or
    MCP caller still receives the error. Marks the outputs IN_PLACE. Name, docstring and signature stay the
    handler's (they are the endpoint's and the MCP tool's)."""
    index = outputs.index(why)
    for c in outputs:
        if isinstance(c, gr.State):
            continue
        classes = c.elem_classes if isinstance(c.elem_classes, list) else [c.elem_classes] if c.elem_classes else []
        c.elem_classes = classes if IN_PLACE in classes else [*classes, IN_PLACE]

    @functools.wraps(handler)
    def run(*args, **kwargs):
        try:
            result = handler(*args, **kwargs)
        except gr.Error as e:
            reason, error = e.message, expected(e.message, f"{handler.__name__} refused", toast=False)
        except Exception as e:  # a fault: the traceback goes to the log, the page says so in place
            reason, error = FAULT, e
        else:
            yield result
            return
        shown = [None] * len(outputs)
        shown[index] = f"**⚠ {what}:** {reason}"
        yield tuple(shown)
        raise error
    return run


def quiet(handler, blank, why: int | None = None):
    """`handler` for an event the page fires by itself (a new image, another model, a tab opened): an image
    that cannot be used clears the outputs (`blank`) instead of saying so once more, so that no answer about
    the previous image stays and the image column's note is the one message; the output at index `why` (a
    Markdown) says in a line why the tab is empty and where the reason is. Name, docstring and signature stay
    the handler's."""
    @functools.wraps(handler)
    def run(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except ImageError as e:
            if why is None:
                return blank
            shown = list(blank)
            shown[why] = NO_IMAGE if isinstance(e, NoImage) else UNREADABLE
            return tuple(shown)
    return run


def initial(handler, *args, default=None):
    """A handler's outputs for the page's first paint (computed once, when the app starts), or `default`
    when there is nothing to show or it fails: the page then opens empty there, as without examples."""
    if any(a is None for a in args):
        return default
    try:
        return handler(*args)
    except Exception:  # noqa: BLE001  (a first paint never stops the app from starting)
        return default


class AppState(ExplorerState):
    """The app's state (explorer.app.state.ExplorerState) as the page's handlers reach it: each request's
    session read from Gradio's request, and a refusal raised as the gr.Error the page shows."""

    def session(self, request) -> str | None:
        """The session id Gradio gives the request's page (None for a call outside a request)."""
        return getattr(request, "session_hash", None)

    def leave(self, request: gr.Request = None) -> None:
        """A page closed (demo.unload): its slots no longer keep runs from expiring. Typed gr.Request: Gradio
        gives a handler the request only through a parameter of that type."""
        super().leave(request)

    def pair(self, a: str, b: str, request=None):
        """Both slots' models, or a gr.Error saying why not."""
        try:
            return self.model(a, request), self.model(b, request)
        except (CheckpointError, ValueError, OSError) as e:
            raise gr.Error(f"model not available: {self.safe(e)}") from None

    def test_images(self, ref_b: str | None, need: int, request=None, progress=None):
        """As ExplorerState.test_images, with a Gradio progress bar; images that are not here, a gr.Error."""
        try:
            return super().test_images(ref_b, need, request, reporter(progress) if progress else None)
        except DatasetError as e:
            raise gr.Error(str(e)) from None

    def image(self, file) -> tuple[np.ndarray, np.ndarray]:
        """(model input, preview) of the image in the page, or a gr.Error saying what is wrong with it."""
        if file is None:
            raise NoImage(NO_IMAGE.strip("_"))
        try:
            return self.images.get(file)
        except ImageInputError as e:
            raise ImageError(str(e)) from None



SPACE_FILES = "https://huggingface.co/spaces/{space}/blob/main/{path}"


def repo_link(path: str, space_id: str | None) -> str:
    """A file of this repository (docs/trust.md, study/README.md) as a page's Markdown names it: on a Space
    (`space_id`, Settings.space_id) a link to the Space's own copy, readable there; elsewhere its path, in
    the checkout the app runs from."""
    if space_id:
        return f"[{path}]({SPACE_FILES.format(space=space_id, path=path)})"
    return f"`{path}`"
