"""The MCP tools: Gradio serves the public endpoints (the explorer's questions, each documented in its
handler's docstring) as tools at /gradio_api/mcp/; the page's own wiring is unlisted (context.UNLISTED).
Installed here: which public endpoints are not tools, and two fixes to Gradio's MCP server (each output
its own content; input schemas a client can satisfy)."""

from __future__ import annotations

# Public API endpoints that are not MCP tools: a fine-tune run is long and belongs to one visitor's page
# and its queue, and MCP calls all come through one Gradio session, so one assistant's Cancel would be
# another's. gradio_client scripts call them as API endpoints. The Trust tab's cell clicks are a click on the
# page's table (Gradio's SelectData), which a tool's caller has no way to send.
NOT_TOOLS = ("/finetune", "/cancel", "/download_checkpoint", "/trust_cell_a", "/trust_cell_b")


def install_tool_list() -> None:
    """Gradio makes every public endpoint a tool; this leaves out NOT_TOOLS (neither listed nor callable)."""
    from gradio import mcp as gradio_mcp

    server = gradio_mcp.GradioMCPServer
    if getattr(server.get_tool_to_endpoint, "_explorer", False):
        return
    original = server.get_tool_to_endpoint

    def get_tool_to_endpoint(self) -> dict[str, str]:
        return {tool: endpoint for tool, endpoint in original(self).items() if endpoint not in NOT_TOOLS}

    get_tool_to_endpoint._explorer = True
    server.get_tool_to_endpoint = get_tool_to_endpoint


def install_mcp_outputs() -> None:
    """Gradio 6.31's MCP server, when a client sends no progress token (most do not), wraps a tool's
    outputs in one list and takes them after gradio_client has downloaded its files: a tool with several
    outputs answers one text holding local paths, instead of its texts and images. This reads the final
    outputs from the job's updates, as Gradio's own path with a progress token does, so every client gets
    each output as its own content (pictures as images)."""
    from gradio import mcp as gradio_mcp

    server = gradio_mcp.GradioMCPServer
    if getattr(server._execute_tool_without_progress, "_explorer", False):
        return

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

    without_progress._explorer = True
    server._execute_tool_without_progress = without_progress


def install_mcp_schemas() -> None:
    """Gradio 6.31 describes a dropdown's input as {"type": "string", "enum": its choices} whatever the
    choices are, so a layer (choices 0..5) or a tau factor (0.25..4) can be sent neither as a number (not
    a string) nor as a string (not in the enum): the MCP server refuses every call. And a dropdown that
    takes any value (a model slot: a Hub id, a run made later) is limited to the choices it had at start.
    This types a numeric enum as numbers, drops the enum of a dropdown that takes custom values, and drops
    a file input's default (the server's own path to the page's first image)."""
    from gradio import mcp as gradio_mcp
    from gradio.components import State

    server = gradio_mcp.GradioMCPServer
    if getattr(server.get_input_schema, "_explorer", False):
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
            if getattr(component, "allow_custom_value", False):
                prop.pop("enum", None)
            enum = prop.get("enum") or []
            if enum and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in enum):
                prop["type"] = "integer" if all(isinstance(v, int) for v in enum) else "number"
            if isinstance(prop.get("default"), dict):
                prop.pop("default")
        return schema, filedata_positions

    get_input_schema._explorer = True
    server.get_input_schema = get_input_schema
