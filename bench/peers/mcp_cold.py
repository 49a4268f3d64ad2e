"""A cold MCP call, as one whole process: import the SDK client, spawn the SDK server, initialize, one call_tool.

Usage: python bench/peers/mcp_cold.py   (exit status 0 on success; timed from outside by bench.run)
"""

import asyncio
import os
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SERVER = str(Path(__file__).resolve().parent / "mcp_server.py")


async def main() -> int:
    params = StdioServerParameters(command=sys.executable, args=[SERVER], env=dict(os.environ))
    with open(os.devnull, "w") as devnull:  # noqa: ASYNC230 - one small open
        async with stdio_client(params, errlog=devnull) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("echo", {"x": 1})
    return 1 if result.is_error else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
