"""Every change this app makes to Gradio's own code, in one place, each pinned to the Gradio it was written
against (6.31) by a test in tests/test_gradio_patches.py that fails when Gradio's behaviour under it changes:

- the MCP tool list leaves out the endpoints that are not tools (NOT_TOOLS);
- the MCP server answers each output of a tool as its own content;
- the MCP input schemas are ones a client can satisfy;
- the image cache writes atomically, encodes PNG fast and encodes a picture once;
- a component a handler has updated (its choices, say) keeps its id in the session, so a link to the view
  (gr.DeepLinkButton) saves what the component shows;
- a component's value saved for such a link is the one the newest event gave it: an event that joined the
  queue earlier and runs later (behind a concurrency limit) no longer writes its older input over it;
- the queue, when it has nothing to do, looks for work every 20 ms instead of every millisecond, and is woken
  at once when an event joins it or ends.

`install()` applies them all (idempotent); each patch carries what it replaced (`originals()` reads them, for
the tests). Nothing here keeps state of its own: the image cache's files are explorer.core.atomic.WrittenOnce's,
the queue's wake-up explorer.core.wake.Wake's."""

from __future__ import annotations

import contextvars
import hashlib
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from gradio import mcp as gradio_mcp
from gradio import processing_utils as pu
from gradio.blocks import Block, Blocks
from gradio.components import State
from gradio.mcp import GradioMCPServer
from gradio.queueing import Queue
from gradio.state_holder import SessionState
from gradio.utils import run_coro_in_background, set_task_name

from explorer.analysis import render
from explorer.core import atomic
from explorer.core.wake import Wake

GRADIO_VERSION = "6.31"  # the Gradio these patches were written against (requirements.txt pins it)
REPLACED = "_explorer_replaced"  # each patch's attribute: the function it replaced


def _patch(patch: Callable, original: Callable) -> Callable:
    """`patch`, marked as ours and carrying `original`: installing it again changes nothing."""
    setattr(patch, REPLACED, original)
    return patch


def _patched(function) -> bool:
    return hasattr(function, REPLACED)


def originals() -> dict[str, Callable]:
    """What each installed patch replaced, by its name (read from the patches themselves)."""
    now = {"get_tool_to_endpoint": GradioMCPServer.get_tool_to_endpoint,
           "_execute_tool_without_progress": GradioMCPServer._execute_tool_without_progress,
           "get_input_schema": GradioMCPServer.get_input_schema, "save_pil_to_cache": pu.save_pil_to_cache,
           "SessionState.__setitem__": SessionState.__setitem__, "Queue.__init__": Queue.__init__,
           "Queue.push": Queue.push, "Queue.process_events": Queue.process_events,
           "Queue.start_processing": Queue.start_processing, "Blocks.process_api": Blocks.process_api,
           "SessionState._update_value_in_config": SessionState._update_value_in_config}
    return {name: getattr(function, REPLACED) for name, function in now.items() if _patched(function)}


def install() -> None:
    """Applies every patch (once: a second call changes nothing)."""
    install_image_cache()
    install_tool_list()
    install_mcp_outputs()
    install_mcp_schemas()
    install_session_ids()
    install_value_order()
    install_idle_queue()


# Public API endpoints that are not MCP tools: a fine-tune run is long and belongs to one visitor's page
# and its queue, and MCP calls all come through one Gradio session, so one assistant's Cancel would be
# another's. gradio_client scripts call them as API endpoints. The Trust tab's cell clicks are a click on the
# page's table (Gradio's SelectData), which a tool's caller has no way to send.
NOT_TOOLS = ("/finetune", "/cancel", "/download_checkpoint", "/trust_cell_a", "/trust_cell_b")


def install_tool_list() -> None:
    """Gradio makes every public endpoint a tool; this leaves out NOT_TOOLS (neither listed nor callable)."""
    server = gradio_mcp.GradioMCPServer
    if _patched(server.get_tool_to_endpoint):
        return
    original = server.get_tool_to_endpoint

    def get_tool_to_endpoint(self) -> dict[str, str]:
        return {tool: endpoint for tool, endpoint in original(self).items() if endpoint not in NOT_TOOLS}

    server.get_tool_to_endpoint = _patch(get_tool_to_endpoint, original)


def install_mcp_outputs() -> None:
    """Gradio 6.31's MCP server, when a client sends no progress token (most do not), wraps a tool's
    outputs in one list and takes them after gradio_client has downloaded its files: a tool with several
    outputs answers one text holding local paths, instead of its texts and images. This reads the final
    outputs from the job's updates, as Gradio's own path with a progress token does, so every client gets
    each output as its own content (pictures as images)."""
    server = gradio_mcp.GradioMCPServer
    if _patched(server._execute_tool_without_progress):
        return
    original = server._execute_tool_without_progress

    async def without_progress(self, job) -> list:
        output = None
        async for update in job:
            if update.type == "output" and update.final:
                output = update.outputs
                if not update.success:
                    raise RuntimeError(": ".join(m for m in (output.get("title"), output.get("error")) if m)
                                       or "Error!")
        if job.exception():
            raise job.exception()
        return output["data"]

    server._execute_tool_without_progress = _patch(without_progress, original)


def install_mcp_schemas() -> None:
    """Gradio 6.31 describes a dropdown's input as {"type": "string", "enum": its choices} whatever the
    choices are, so a layer (choices 0..5) or a tau factor (0.25..4) can be sent neither as a number (not
    a string) nor as a string (not in the enum): the MCP server refuses every call. And a dropdown that
    takes any value (a model slot: a Hub id, a run made later) is limited to the choices it had at start.
    This types a numeric enum as numbers, drops the enum of a dropdown that takes custom values, and drops
    a file input's default (the server's own path to the page's first image)."""
    server = gradio_mcp.GradioMCPServer
    if _patched(server.get_input_schema):
        return
    original = server.get_input_schema

    def get_input_schema(self, tool_name: str, parameters: dict[str, str] | None = None):
        schema, filedata_positions = original(self, tool_name, parameters)
        block_fn = self.get_block_fn_from_endpoint_name(self.tool_to_endpoint.get(tool_name, ""))
        components = [c for c in (block_fn.inputs if block_fn else []) if not isinstance(c, State)]
        properties = schema.get("properties", {})
        if len(components) != len(properties):  # not one property per component: left as Gradio made it
            return schema, filedata_positions
        for prop, component in zip(properties.values(), components, strict=True):
            enum = prop.get("enum") or []
            if enum and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in enum):
                prop["type"] = "integer" if all(isinstance(v, int) for v in enum) else "number"
            if getattr(component, "allow_custom_value", False):  # a layer past the first models' depth too
                prop.pop("enum", None)
            if isinstance(prop.get("default"), dict):
                prop.pop("default")
        return schema, filedata_positions

    server.get_input_schema = _patch(get_input_schema, original)


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
    if _patched(pu.save_pil_to_cache):
        return
    original, files = pu.save_pil_to_cache, atomic.WrittenOnce(1024)

    def encode(img, format):
        if format.lower() == "png" and img.mode == "RGB" and not img.info:
            return render.encode_png(np.asarray(img))
        return pu.encode_pil_to_bytes(img, format)

    def save_pil_to_cache(img, cache_dir, name="image", format="webp"):
        key = (str(cache_dir), name, format.lower(), img.mode, img.size,
               hashlib.blake2b(img.tobytes(), digest_size=16).digest())
        return files.path(key, lambda: encode(img, format),
                          lambda data: Path(cache_dir) / pu.hash_bytes(data) / f"{name}.{format}")

    pu.save_pil_to_cache = _patch(save_pil_to_cache, original)


def install_session_ids() -> None:
    """Gradio 6.31 keeps a session's components, and what each shows, by id: what a link to the view
    (gr.DeepLinkButton) saves. A handler's update of a component's properties (a dropdown's choices)
    replaces the session's component by a new one, with a new id; from then on every value the component
    takes, or a handler gives it, is saved under that new id, and the page's own id keeps the value the
    update left it (a dropdown's first choice): a link reopened a model slot on the list's first model,
    whatever the slot held. This gives the new component the id of the one it replaces."""
    if _patched(SessionState.__setitem__):
        return
    original = SessionState.__setitem__

    def __setitem__(self, key: int, value) -> None:
        replaced = self.blocks_config.blocks.get(key)
        if isinstance(value, Block) and replaced is not None and not isinstance(replaced, State) \
                and value._id != key:
            value._id = key
        original(self, key, value)

    SessionState.__setitem__ = _patch(__setitem__, original)


# The event being processed: when it joined the queue (time.monotonic(); an event outside the queue: when it began).
_EVENT_ORDER: contextvars.ContextVar[float | None] = contextvars.ContextVar("explorer_event_order", default=None)
WRITTEN = "_explorer_written"  # a session's {component id: the order of the event that last gave it its value}


def install_value_order() -> None:
    """Gradio 6.31 saves, for a link to the view (gr.DeepLinkButton), each component's value as the last event
    *processed* gave it, as an input or an output. Events are processed out of the order they were sent in:
    one that waits behind a concurrency limit runs after later ones. So after a Sample (its output: a new
    image in the upload), an analysis the previous image had queued still wrote that image back as its input,
    and a link copied then reopened the previous image. Here an event's write of a value counts only if no
    event that joined the queue later has written that component's value (events outside the queue are
    ordered by when they began, which is when they were sent)."""
    if _patched(Blocks.process_api):
        return
    process_api, update = Blocks.process_api, SessionState._update_value_in_config

    async def ordered_process_api(self, *args, **kwargs):
        event_id = kwargs.get("event_id")
        queue = getattr(self, "_queue", None)
        event = queue.event_ids_to_events.get(event_id) if queue is not None and event_id else None
        token = _EVENT_ORDER.set(event.enqueue_time if event is not None else time.monotonic())
        try:
            return await process_api(self, *args, **kwargs)
        finally:
            _EVENT_ORDER.reset(token)

    def _update_value_in_config(self, key: int, value) -> None:
        order = _EVENT_ORDER.get()
        if order is not None:
            written = self.__dict__.setdefault(WRITTEN, {})
            if written.get(key, float("-inf")) > order:
                return  # a later event's value stays
            written[key] = order
        update(self, key, value)

    Blocks.process_api = _patch(ordered_process_api, process_api)
    SessionState._update_value_in_config = _patch(_update_value_in_config, update)


# How often an idle queue looks for work and for progress to send (s): Gradio 6.31's own on Linux (pinned by
# tests/test_gradio_patches.py; bench/idle_app.py runs the app with them), and the app's. Gradio's own on
# Windows is 0.05 and 0.1.
GRADIO_IDLE_POLLS = (0.001, 0.01)
IDLE_QUEUE_POLL = 0.02
IDLE_PROGRESS_POLL = 0.1


def install_idle_queue() -> None:
    """Gradio 6.31's queue, on Linux, looks for a new event every millisecond and for progress to send every
    10 ms, whether anything is queued or not: an app nobody uses takes 3-4 % of a CPU (a Space between
    visitors; a slow host's test suite, with several apps waiting). This polls every IDLE_QUEUE_POLL s and
    IDLE_PROGRESS_POLL s, so an idle app takes a quarter to a third of the CPU it did (bench/idle_app.py), and
    wakes the queue at once when an event joins it or one ends (a worker or a concurrency slot comes free):
    an event starts as soon as it can, not at the next poll (up to 20 ms later, which pushed a query click
    past gradio_client's 50 ms tick). A progress update waits at most 90 ms more to be sent (a run's page
    redraws every 0.5 s)."""
    if _patched(Queue.__init__):
        return
    original, push, process_events = Queue.__init__, Queue.push, Queue.process_events

    def __init__(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        self.sleep_when_free = max(self.sleep_when_free, IDLE_QUEUE_POLL)
        self.progress_update_sleep_when_free = max(self.progress_update_sleep_when_free, IDLE_PROGRESS_POLL)
        self.explorer_wake = Wake()

    async def woken_push(self, *args, **kwargs):
        try:
            return await push(self, *args, **kwargs)
        finally:
            self.explorer_wake.set()

    async def woken_process_events(self, *args, **kwargs):
        try:
            return await process_events(self, *args, **kwargs)
        finally:
            self.explorer_wake.set()

    Queue.__init__ = _patch(__init__, original)
    Queue.push = _patch(woken_push, push)
    Queue.process_events = _patch(woken_process_events, process_events)
    Queue.start_processing = _patch(_start_processing, Queue.start_processing)


async def _idle(queue: Queue) -> None:
    """The queue's pause while it has nothing it can start: until woken, at most its idle poll."""
    await queue.explorer_wake.wait(queue.sleep_when_free)


async def _start_processing(self: Queue) -> None:
    """Gradio 6.31's Queue.start_processing, line for line, with each of its idle sleeps a wakeable `_idle`."""
    try:
        while not self.stopped:
            if len(self) == 0:
                await _idle(self)
                continue

            if None not in self.active_jobs:
                await _idle(self)
                continue

            # Using mutex to avoid editing a list in use
            async with self.delete_lock:
                event_batch = self.get_events()

            if event_batch:
                events, batch, concurrency_id = event_batch
                self.active_jobs[self.active_jobs.index(None)] = events
                event_queue = self.event_queue_per_concurrency_id[concurrency_id]
                event_queue.current_concurrency += 1
                start_time = time.time()
                fn = events[0].fn
                event_queue.start_times_per_fn[fn].add(start_time)
                for event in events:
                    if (a := self.event_analytics.get(event._id)) is not None:
                        a["status"] = "processing"
                process_event_task = run_coro_in_background(self.process_events, events, batch, start_time, fn)
                set_task_name(process_event_task, events[0].session_hash, fn._id, events[0]._id, batch)

                self._asyncio_tasks.add(process_event_task)
                process_event_task.add_done_callback(self._asyncio_tasks.discard)
                if self.live_updates:
                    self.broadcast_estimations(concurrency_id)
            else:
                await _idle(self)
    finally:
        self.stopped = True
        self._cancel_asyncio_tasks()
