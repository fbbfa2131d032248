"""The launched app as MCP tools, through the real `mcp` client library over streamable HTTP."""

from __future__ import annotations

import ast
import asyncio
import base64
import io
import shutil

import pytest
from gradio_client import Client, handle_file
from PIL import Image

from explorer.checkpoints.finetuned import REFUSED, owner_key
from explorer.data.samples import examples
from tests.helpers import pair_folder, start_app

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
A, B = "cifar10-vanilla", "cifar10-spt_lsa"
# The explorer's questions, one tool each; nothing of the page's own wiring.
TOOLS = {"compare", "disagreements", "sample", "patches", "attention", "locality", "what_if", "evidence",
         "shift_strip", "robustness", "tau", "models", "trust_report", "trust_corruptions", "trust_faithfulness"}


def mcp(url: str, work):
    """Runs `work(session)` in an MCP client session with the app at `url`."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def main():
        async with streamable_http_client(f"{url}gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await work(session)
    return asyncio.run(main())


def call(url: str, tool: str, **arguments):
    async def work(session):
        return await session.call_tool(tool, arguments)
    return mcp(url, work)


def texts(result) -> list[str]:
    return [c.text for c in result.content if c.type == "text"]


def data_url(path: str) -> str:
    return "data:image/png;base64," + base64.b64encode(open(path, "rb").read()).decode()


@pytest.fixture(scope="module")
def example():
    found = examples()
    assert found, "the bundled examples are missing"
    return found[0].path


def test_the_tools_are_the_curated_set_each_described(app_url):
    async def work(session):
        return (await session.list_tools()).tools
    tools = mcp(app_url, work)
    assert {t.name for t in tools} == TOOLS
    for tool in tools:
        assert len(tool.description) >= 60, tool.name
        properties = tool.inputSchema.get("properties", {})
        for name, schema in properties.items():
            assert len(schema.get("description", "")) >= 10, (tool.name, name)
    by_name = {t.name: t for t in tools}
    # Inputs a client can satisfy: model slots take any reference (a Hub id, a run made later), numbers
    # are numbers, and no default leaks a server path.
    for tool in tools:
        for name, schema in tool.inputSchema.get("properties", {}).items():
            assert "/tmp" not in str(schema.get("default", "")), (tool.name, name)
            if name.startswith("ref_"):
                assert schema["type"] == "string" and "enum" not in schema, (tool.name, name)
            for value in schema.get("enum", []):
                assert isinstance(value, str) == (schema["type"] == "string"), (tool.name, name)
    assert by_name["attention"].inputSchema["properties"]["layer"]["type"] == "integer"
    assert by_name["what_if"].inputSchema["properties"]["factor_b"]["type"] == "number"
    assert list(by_name["compare"].inputSchema["properties"]) == ["file", "ref_a", "ref_b"]
    assert set(by_name["attention"].inputSchema["properties"]) == {"file", "ref_a", "ref_b", "layer", "head", "qy",
                                                                    "qx", "layer_b"}
    assert by_name["models"].inputSchema.get("properties", {}) == {}
    # the fine-tune runs are in the API, not tools: not callable through MCP either
    refused = call(app_url, "cancel")
    assert refused.isError and "Unknown tool" in " ".join(texts(refused))


def test_compare_gives_both_top5_as_the_page_does(app_url, client, example):
    result = call(app_url, "compare", file=data_url(example), ref_a=A, ref_b=B)
    assert not result.isError, texts(result)
    top_a, top_b, verdict = texts(result)
    page_a, page_b, page_verdict = client.predict(handle_file(example), A, B, api_name="/compare")
    for tool, page in ((ast.literal_eval(top_a), page_a), (ast.literal_eval(top_b), page_b)):
        assert tool["label"] == page["label"]
        assert [(c["label"], round(c["confidence"], 6)) for c in tool["confidences"]] == \
               [(c["label"], round(c["confidence"], 6)) for c in page["confidences"]]
        assert len(tool["confidences"]) == 5
    assert verdict.split("\n\n")[0] == page_verdict.split("\n\n")[0]


def test_attention_returns_images(app_url, example):
    result = call(app_url, "attention", file=data_url(example), ref_a=A, ref_b=B, layer=1, head="all heads",
                  qy=16, qx=16)
    assert not result.isError, texts(result)
    images = [c for c in result.content if c.type == "image"]
    assert len(images) == 2 and all(c.mimeType == "image/png" for c in images)  # maps and rollout
    maps = Image.open(io.BytesIO(base64.b64decode(images[0].data)))
    assert maps.width > 200 and maps.height > 100


def test_plots_arrive_as_images_and_models_lists_the_checkpoints(app_url, client):
    result = call(app_url, "tau", ref_a=A, ref_b=B)
    assert not result.isError, texts(result)
    assert sum(c.type == "image" for c in result.content) == 2
    listing = ast.literal_eval(texts(call(app_url, "models"))[0])
    refs = {m["ref"]: m for m in listing["models"]}
    offered = client.predict(A, B, api_name="/refresh")[0]["choices"]  # what the page's slots offer
    assert [(m["label"], m["ref"]) for m in listing["models"]] == [tuple(c) for c in offered]
    assert {A, B} <= set(refs) and refs[B]["variant"] == "spt_lsa" and 0 < refs[B]["test_top1"] <= 1
    assert refs[B]["loaded"] is True
    assert listing["page_default"] == {"ref_a": A, "ref_b": B}


def test_a_bad_reference_is_a_tool_error_with_a_reason(app_url, example):
    result = call(app_url, "compare", file=data_url(example), ref_a=A, ref_b="nobody/nothing-here")
    assert result.isError and "model not available" in " ".join(texts(result))


def test_off_with_the_flag(app_checkpoints, tmp_path):
    proc, url, _ = start_app(app_checkpoints, env_extra={"EXPLORER_MCP": "0"}, prewarm=False)
    try:
        import urllib.error
        import urllib.request
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{url}gradio_api/mcp/schema", timeout=10)
        assert Client(url, verbose=False).predict(api_name="/models")["models"]  # the API itself stays
    finally:
        proc.terminate()
        proc.wait(10)


def test_shared_mode_tools_see_what_a_new_visitor_sees(tmp_path, tiny_checkpoints, data_dir):
    """On a public Space a tool call is a visitor of its own: another visitor's run is neither listed nor
    loadable, with the visitors' one message that names no path."""
    root = pair_folder(tmp_path / "checkpoints", tiny_checkpoints)
    visitor_id = "v" * 24
    mine = f"finetuned/{owner_key(visitor_id)}/mine"
    shutil.copytree(tiny_checkpoints["vanilla"], root / mine)
    proc, url, _ = start_app(root, data_dir=data_dir, prewarm=False, env_extra={"EXPLORER_SHARED": "1",
                                                                  "EXPLORER_BROWSER_SECRET": "test-secret"})
    try:
        owner = Client(url, verbose=False)
        choices = owner.predict(visitor_id, api_name="/visitor")[1]["choices"]
        assert mine in [c[1] for c in choices]  # its owner lists it: the check below can fail
        listing = ast.literal_eval(texts(call(url, "models"))[0])
        assert {m["ref"] for m in listing["models"]} == {A, B}
        for ref in (mine, str(root / mine), f"../{root.name}/{mine}"):
            result = call(url, "tau", ref_a=A, ref_b=ref)
            message = " ".join(texts(result))
            assert result.isError and REFUSED in message and str(root) not in message, message
        assert not call(url, "tau", ref_a=A, ref_b=B).isError
    finally:
        proc.terminate()
        proc.wait(10)
