"""explorer.ui.gradio_patches: each patch does what it says, and each test of Gradio's own behaviour under a
patch fails when a Gradio upgrade changes it (the patch is then wrong or no longer needed: read it again)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from gradio import processing_utils as pu
from gradio.mcp import GradioMCPServer
from gradio_client.client import Job
from gradio_client.utils import OutputUpdate
from PIL import Image

from explorer.analysis import render
from explorer.ui import gradio_patches
from explorer.ui.gradio_patches import NOT_TOOLS, originals

gradio_patches.install()


def layer_view(layer: int, model: str) -> str:
    """One layer of a model.

    Args:
        layer: which layer
        model: which model
    """
    return f"{model}:{layer}"


def finetune(model: str) -> str:
    """Fine-tunes a model.

    Args:
        model: which model
    """
    return model


@pytest.fixture(scope="module")
def server():
    """Gradio's MCP server on a page with a numeric dropdown, a dropdown taking any value, and /finetune."""
    with gr.Blocks() as demo:
        layer = gr.Dropdown([0, 1, 2, 3], value=0)
        model = gr.Dropdown(["a", "b"], value="a", allow_custom_value=True)
        out = gr.Textbox()
        gr.Button().click(layer_view, [layer, model], out, api_name="layer_view")
        gr.Button().click(finetune, [model], out, api_name="finetune")
    return GradioMCPServer(demo)


def test_install_twice_patches_once():
    before = originals()
    gradio_patches.install()
    assert originals() == before and set(before) == {"get_tool_to_endpoint", "_execute_tool_without_progress",
                                                      "get_input_schema", "save_pil_to_cache",
                                                      "SessionState.__setitem__", "Queue.__init__", "Queue.push",
                                                      "Queue.process_events", "Queue.start_processing",
                                                      "Blocks.process_api", "SessionState._update_value_in_config"}


def test_gradio_makes_every_public_endpoint_a_tool_and_the_patch_leaves_out_the_run_endpoints(server):
    assert "/finetune" in NOT_TOOLS
    assert originals()["get_tool_to_endpoint"](server) == {"layer_view": "/layer_view", "finetune": "/finetune"}, \
        "Gradio no longer lists every public endpoint as a tool: install_tool_list may be wrong or unneeded"
    assert server.get_tool_to_endpoint() == {"layer_view": "/layer_view"}


def test_gradio_types_a_numeric_dropdown_as_a_string_enum_and_the_patch_makes_it_callable(server):
    schema, _ = originals()["get_input_schema"](server, "layer_view")
    layer, model = schema["properties"]["layer"], schema["properties"]["model"]
    assert (layer["type"], layer["enum"]) == ("string", [0, 1, 2, 3]) and model["enum"] == ["a", "b"], \
        f"Gradio's dropdown schema changed ({schema}): install_mcp_schemas may be wrong or unneeded"
    schema, _ = server.get_input_schema("layer_view")
    layer, model = schema["properties"]["layer"], schema["properties"]["model"]
    assert layer == {"type": "integer", "enum": [0, 1, 2, 3]}
    assert "enum" not in model and model["type"] == "string"  # a slot takes any Hub id or later run


class FakeJob(Job):
    """A finished job of two outputs, as gradio_client's Job gives them: `result()`, and its updates when
    iterated (`async for`), the last the final OutputUpdate."""

    def __init__(self, outputs: list, success: bool = True):  # no Job.__init__: no client behind it
        self._outputs, self._success = outputs, success

    def result(self, timeout=None):
        return tuple(self._outputs)

    def exception(self, timeout=None):
        return None

    def __aiter__(self):
        async def updates():
            yield OutputUpdate(outputs={"data": self._outputs[:1]}, success=True, final=False)
            data = {"data": self._outputs} if self._success else {"title": "Error", "error": "bad layer"}
            yield OutputUpdate(outputs=data, success=self._success, final=True)
        return updates()


def test_gradio_answers_a_tools_outputs_as_one_item_and_the_patch_as_one_each(server):
    job = FakeJob(["a text", "/tmp/a-picture.png"])
    original = originals()["_execute_tool_without_progress"]
    assert asyncio.run(original(server, job)) == [("a text", "/tmp/a-picture.png")], \
        "Gradio's MCP path without a progress token changed: install_mcp_outputs may be wrong or unneeded"
    assert asyncio.run(server._execute_tool_without_progress(job)) == ["a text", "/tmp/a-picture.png"]
    with pytest.raises(RuntimeError, match="Error: bad layer"):
        asyncio.run(server._execute_tool_without_progress(FakeJob(["x"], success=False)))
    # What the patch reads: gradio_client's jobs iterate their updates, the final output with these fields.
    assert hasattr(Job, "__aiter__") and {"outputs", "success", "type", "final"} <= set(OutputUpdate.__annotations__)


def test_an_image_output_goes_through_the_patched_cache_and_is_written_once(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (64, 80, 3), dtype=np.uint8)
    # Gradio's Image reaches the cache through processing_utils' module attribute: the patched one encodes
    # with render.encode_png (other bytes than PIL's encoder).
    image = gr.Image(format="png")
    image.GRADIO_CACHE = str(tmp_path)
    first = image.postprocess(pixels).path
    assert Path(first).read_bytes() == render.encode_png(pixels), \
        "gr.Image no longer saves through processing_utils.save_pil_to_cache: install_image_cache does nothing"
    np.testing.assert_array_equal(np.asarray(Image.open(first)), pixels)
    mtime = Path(first).stat().st_mtime_ns
    assert pu.save_img_array_to_cache(pixels.copy(), str(tmp_path), format="png") == first
    assert Path(first).stat().st_mtime_ns == mtime  # the same picture again: not rewritten
    other = pu.save_img_array_to_cache(255 - pixels, str(tmp_path), format="png")
    assert other != first and np.array_equal(np.asarray(Image.open(other)), 255 - pixels)
    assert not list(tmp_path.rglob("*.tmp"))


def test_the_patched_cache_names_a_file_as_gradio_does(tmp_path):
    """Gradio serves a cached file from where it names it (its folder the hash of the bytes): a picture the
    patch encodes as Gradio would (not RGB) lands at Gradio's own path."""
    grey = Image.fromarray(np.arange(48 * 40, dtype=np.uint32).reshape(48, 40).astype(np.uint8), mode="L")
    ours = pu.save_pil_to_cache(grey, str(tmp_path / "ours"), format="png")
    gradios = originals()["save_pil_to_cache"](grey, str(tmp_path / "gradio"), format="png")
    assert Path(ours).relative_to(tmp_path / "ours") == Path(gradios).relative_to(tmp_path / "gradio"), \
        "Gradio names its cached images otherwise: install_image_cache must follow"


def saved_values(patched: bool) -> dict:
    """What a link to the view would save for a dropdown (its id's value, and any other id's) after a
    handler has updated its choices, then the visitor picked "c" and a handler answered "b"."""
    from gradio.state_holder import SessionState
    with gr.Blocks() as demo:
        slot = gr.Dropdown(["a", "b", "c"], value="b", allow_custom_value=True)
        gr.Button().click(lambda: gr.update(choices=["a", "b", "c"]), None, slot)
        slot.change(lambda ref: ref, slot, slot)
    lists, picked = demo.fns.values()
    setitem = SessionState.__setitem__
    if not patched:
        SessionState.__setitem__ = originals()["SessionState.__setitem__"]
    try:
        state = SessionState(demo)
        asyncio.run(demo.postprocess_data(lists, gr.update(choices=["a", "b", "c"]), state))
        asyncio.run(demo.preprocess_data(picked, ["c"], state))
        seen_c = {c["id"]: c["props"].get("value") for c in state.components if c["type"] == "dropdown"}
        asyncio.run(demo.postprocess_data(picked, "b", state))
        seen_b = {c["id"]: c["props"].get("value") for c in state.components if c["type"] == "dropdown"}
    finally:
        SessionState.__setitem__ = setitem
    return {"id": slot._id, "after_input": seen_c, "after_output": seen_b}


def test_gradio_saves_an_updated_components_values_under_a_new_id_and_the_patch_under_its_own():
    plain = saved_values(patched=False)
    assert plain["after_input"][plain["id"]] == "a"  # the update left the first choice under the page's id
    assert "c" in plain["after_input"].values() and len(plain["after_input"]) == 2
    assert plain["after_output"][plain["id"]] == "a" and "b" in plain["after_output"].values()
    patched = saved_values(patched=True)
    assert patched["after_input"] == {patched["id"]: "c"}
    assert patched["after_output"] == {patched["id"]: "b"}


def value_after_a_late_event(patched: bool) -> str:
    """What a link to the view would save for an upload after a Sample put "second.png" in it while an analysis
    of "first.png" still waited in the queue: the Sample joined the queue after the analysis, ran first (the
    analysis waited behind a concurrency limit), and the analysis ran last with its older input."""
    from types import SimpleNamespace

    from gradio.blocks import Blocks
    from gradio.state_holder import SessionState
    with gr.Blocks() as demo:
        upload = gr.Textbox()
        shown = gr.Textbox()
        gr.Button().click(lambda: "second.png", None, upload)  # Sample
        upload.change(lambda path: path, upload, shown)  # an analysis of the image
    demo.queue()
    sample, analysis = demo.fns.values()
    demo._queue.event_ids_to_events.update({"analysis": SimpleNamespace(enqueue_time=1.0),
                                            "sample": SimpleNamespace(enqueue_time=2.0)})
    process_api, update = Blocks.process_api, SessionState._update_value_in_config
    if not patched:
        Blocks.process_api = originals()["Blocks.process_api"]
        SessionState._update_value_in_config = originals()["SessionState._update_value_in_config"]
    try:
        state = SessionState(demo)
        asyncio.run(demo.process_api(sample, [], state, event_id="sample"))
        asyncio.run(demo.process_api(analysis, ["first.png"], state, event_id="analysis"))
        return next(c["props"]["value"] for c in state.components if c["id"] == upload._id)
    finally:
        Blocks.process_api, SessionState._update_value_in_config = process_api, update


def test_gradio_saves_the_input_of_an_earlier_event_that_ran_late_and_the_patch_the_newest_value():
    assert value_after_a_late_event(patched=False) == "first.png"
    assert value_after_a_late_event(patched=True) == "second.png"


def test_gradio_polls_an_idle_queue_every_millisecond_and_the_patch_every_20_ms():
    from gradio.queueing import Queue
    with gr.Blocks() as demo:
        gr.Button().click(lambda: None)
    plain = Queue.__new__(Queue)
    originals()["Queue.__init__"](plain, True, 1, 1.0, None, demo)
    assert (plain.sleep_when_free, plain.progress_update_sleep_when_free) == gradio_patches.GRADIO_IDLE_POLLS == (
        0.001, 0.01)
    patched = Queue(True, 1, 1.0, None, demo)
    assert (patched.sleep_when_free, patched.progress_update_sleep_when_free) == (
        gradio_patches.IDLE_QUEUE_POLL, gradio_patches.IDLE_PROGRESS_POLL) == (0.02, 0.1)


def _body(function, replace: tuple[str, str] = ("", "")) -> str:
    """The statements of `function` (its docstring left out) as an AST dump: its code, not its layout."""
    import ast
    import inspect
    import textwrap
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)).replace(*replace))
    body = tree.body[0].body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]))


def test_the_patched_queue_loop_is_gradios_with_its_idle_sleeps_wakeable():
    gradios = originals()["Queue.start_processing"]
    assert _body(gradios).count("sleep_when_free") == 3
    assert _body(gradios, ("await asyncio.sleep(self.sleep_when_free)", "await _idle(self)")) == _body(
        gradio_patches._start_processing)


def test_an_event_starts_when_it_joins_and_when_a_slot_comes_free_not_at_the_next_poll(monkeypatch):
    """With a minute's idle poll, two events on a one-at-a-time queue both end within seconds: the first wakes
    the queue when it joins, the second when the first ends (each would wait for the poll otherwise)."""
    import time

    from gradio_client import Client
    monkeypatch.setattr(gradio_patches, "IDLE_QUEUE_POLL", 60.0)
    with gr.Blocks() as demo:
        box = gr.Textbox()
        gr.Button().click(lambda x: time.sleep(0.5) or x + "!", box, box, api_name="slow", concurrency_limit=1)
    demo.queue(default_concurrency_limit=1)
    _, url, _ = demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        assert demo._queue.sleep_when_free == 60.0
        client = Client(url, verbose=False)
        time.sleep(0.5)  # the queue's loop is asleep now
        start = time.perf_counter()
        jobs = [client.submit("a", api_name="/slow"), client.submit("b", api_name="/slow")]
        assert [job.result(timeout=30) for job in jobs] == ["a!", "b!"]
        assert time.perf_counter() - start < 20  # a poll's minute would be 60 s for the first alone
        client.close()
    finally:
        demo.close()


def test_a_wake_up_ends_a_wait_at_once_on_each_loop_that_waits():
    """The queue's Wake: a wait of a minute ends when set() is called, on a first loop and on a second one (a
    server closed and launched again), and a wait nobody wakes ends at its timeout."""
    import time

    from explorer.core.wake import Wake
    wake = Wake()

    async def woken() -> float:
        asyncio.get_running_loop().call_later(0.05, wake.set)
        start = time.perf_counter()
        await wake.wait(60.0)
        return time.perf_counter() - start

    assert asyncio.run(woken()) < 10 and asyncio.run(woken()) < 10
    asyncio.run(wake.wait(0.01))  # nobody wakes it: its timeout ends it
