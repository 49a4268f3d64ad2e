"""The MCP peer's server: the official SDK's ``MCPServer`` (mcp 2.x; FastMCP in 1.x) over stdio.

Run as a script by the SDK client (``bench.peers.mcp_sdk``). Default settings,
as a user would write it.
"""

import functools

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench")


@functools.cache
def _big() -> str:
    return "x" * (10 * 2**20)


@server.tool()
def echo(x: int) -> dict[str, int]:
    """Echo x."""
    return {"x": x}


@server.tool()
def big() -> str:
    """A 10 MiB text result."""
    return _big()


if __name__ == "__main__":
    server.run("stdio")
