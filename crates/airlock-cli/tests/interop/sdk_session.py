"""The official MCP Python SDK (PyPI `mcp`) driving a session of `airlock mcp`.

    sdk_session.py AIRLOCK_BINARY PROJECT_DIR OUTPUT

Starts `slowstart` (a REPL that shows its prompt after 2 s) with a progress
token and closes it; then starts a `pysession` (a python3 REPL over
data/sample.csv), sends one
interaction that takes a while with a progress token (the SDK's progress
callback), finalizes with save() (publishing OUTPUT), and prints one JSON
object with what the SDK saw. The Rust test `interop::*` makes the
assertions.
"""

import asyncio
import json
import os
import sys
from contextlib import AsyncExitStack

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def structured(result):
    r = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {"isError": bool(r.get("isError")), "structured": r.get("structuredContent")}


async def main(argv):
    airlock, project, output = argv[1], argv[2], argv[3]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if "AIRLOCK_RESOLVER" in os.environ:
        env["AIRLOCK_RESOLVER"] = os.environ["AIRLOCK_RESOLVER"]
    progress = []

    async def on_progress(done, total, message):
        progress.append({"progress": done, "total": total, "message": message})

    async with AsyncExitStack() as stack:
        params = StdioServerParameters(command=airlock, args=["mcp"], cwd=project, env=env)
        streams = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        await session.initialize()
        start_progress = []

        async def on_start_progress(done, total, message):
            start_progress.append({"progress": done, "total": total, "message": message})

        slow = structured(await session.call_tool(
            "session_start", {"tool": "slowstart", "arguments": {"input": "data/slow.py"}},
            progress_callback=on_start_progress,
        ))
        slow_id = (slow["structured"] or {}).get("content", {}).get("session")
        await session.call_tool("session_close", {"session": slow_id})
        args = {"input": "data/sample.csv", "output": output}
        started = structured(await session.call_tool("session_start", {"tool": "pysession", "arguments": args}))
        sid = (started["structured"] or {}).get("content", {}).get("session")
        sent = structured(await session.call_tool(
            "session_send",
            {"session": sid, "command": "eval",
             "arg": "import time; time.sleep(2); summary['rows'] = len(rows)"},
            progress_callback=on_progress,
        ))
        finalized = structured(await session.call_tool("session_finalize", {"session": sid, "arg": "save()"}))
        print(json.dumps({"slow_start": slow, "start_progress": start_progress, "start": started, "send": sent,
                          "finalize": finalized, "progress": progress}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv))
