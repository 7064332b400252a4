"""The official MCP Python SDK (PyPI `mcp`) reading what airlock tells an agent.

    sdk_envelope.py AIRLOCK_BINARY PROJECT_DIR

Starts `airlock mcp` over stdio, lists the tools (with their input and
output schemas), calls `count` (a success the SDK validates against the
tool's outputSchema itself) and `badfilter` (a tool that writes jq's error
to stderr and exits 3), and prints one JSON object with what it saw. The
Rust test `everyday_envelope::*` makes the assertions.
"""

import asyncio
import json
import os
import sys
from contextlib import AsyncExitStack

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

# The same summaries as the interop client (this script's directory).
from sdk_client import as_json, result_summary


async def main(argv):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if "AIRLOCK_RESOLVER" in os.environ:
        env["AIRLOCK_RESOLVER"] = os.environ["AIRLOCK_RESOLVER"]
    params = StdioServerParameters(command=argv[1], args=["mcp"], cwd=argv[2], env=env)
    async with AsyncExitStack() as stack:
        streams = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        init = as_json(await session.initialize())
        listed = await session.list_tools()
        tools = {}
        for tool in listed.tools:
            t = as_json(tool)
            tools[t["name"]] = {"inputSchema": t["inputSchema"], "outputSchema": t.get("outputSchema")}
        # call_tool validates a success's structuredContent against the
        # tool's outputSchema and raises if it does not conform.
        count = await session.call_tool("count", {"input": "data/in.txt"})
        bad = await session.call_tool("badfilter", {"input": "data/in.txt"})
        print(json.dumps({
            "instructions": init.get("instructions"),
            "tools": tools,
            "count": result_summary(count),
            "badfilter": result_summary(bad),
        }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv))
