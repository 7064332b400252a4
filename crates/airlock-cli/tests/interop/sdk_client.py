"""The official MCP Python SDK (PyPI `mcp`) as a client of `airlock mcp`.

    sdk_client.py stdio AIRLOCK_BINARY PROJECT_DIR OUTPUT
    sdk_client.py http URL TOKEN OUTPUT

Lists the tools, calls `copy` (data/in.txt -> OUTPUT), calls it again (the
output now exists: a refusal), and prints one JSON object with what the SDK
saw. The Rust test `interop::*` makes the assertions.
"""

import asyncio
import json
import os
import sys
from contextlib import AsyncExitStack

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
# The SDK's own client factory (its default timeouts), whichever HTTP
# library this SDK version is built on.
from mcp.shared._httpx_utils import create_mcp_http_client


def as_json(model):
    """The SDK's model as it travelled on the wire (camelCase keys)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def result_summary(result):
    r = as_json(result)
    return {
        "isError": bool(r.get("isError")),
        "text": [c.get("text") for c in r.get("content", []) if c.get("type") == "text"],
        "structured": r.get("structuredContent"),
    }


async def main(argv):
    mode = argv[1]
    async with AsyncExitStack() as stack:
        if mode == "stdio":
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
            if "AIRLOCK_RESOLVER" in os.environ:
                env["AIRLOCK_RESOLVER"] = os.environ["AIRLOCK_RESOLVER"]
            params = StdioServerParameters(command=argv[2], args=["mcp"], cwd=argv[3], env=env)
            streams = await stack.enter_async_context(stdio_client(params))
        elif mode == "http":
            # Every request carries the server's bearer token.
            http = await stack.enter_async_context(
                create_mcp_http_client(headers={"Authorization": f"Bearer {argv[3]}"}))
            streams = await stack.enter_async_context(streamable_http_client(argv[2], http_client=http))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        output = argv[-1]
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        init = await session.initialize()
        listed = await session.list_tools()
        tools = {}
        for tool in listed.tools:
            t = as_json(tool)
            hints = t.get("annotations", {})
            tools[t["name"]] = {
                "required": t["inputSchema"].get("required"),
                "readOnlyHint": hints.get("readOnlyHint"),
                "destructiveHint": hints.get("destructiveHint"),
                "openWorldHint": hints.get("openWorldHint"),
            }
        first = await session.call_tool("copy", {"input": "data/in.txt", "output": output})
        again = await session.call_tool("copy", {"input": "data/in.txt", "output": output})
        print(json.dumps({
            "server": as_json(init)["serverInfo"]["name"],
            "tools": tools,
            "call": result_summary(first),
            "refusal": result_summary(again),
        }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv))
