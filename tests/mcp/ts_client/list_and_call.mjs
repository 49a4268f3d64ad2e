// The official TypeScript SDK's client (v2) against an xcsh-run MCP server: connect, list, call.
// Usage: node list_and_call.mjs <http URL | stdio JSON [command, ...args]> <legacy | auto | REVISION>
// Prints one JSON line: the revision negotiated, the names listed and what the calls answered.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const [where, era] = process.argv.slice(2);
const mode = era === "legacy" || era === "auto" ? era : { pin: era };
const transport = where.startsWith("http")
  ? new StreamableHTTPClientTransport(new URL(where))
  : (() => {
      const [command, ...args] = JSON.parse(where);
      return new StdioClientTransport({ command, args, stderr: "ignore" });
    })();
const client = new Client({ name: "ts-sdk-test", version: "1.0.0" }, { versionNegotiation: { mode } });
await client.connect(transport);
const listed = await client.listTools();
const echoed = await client.callTool({ name: "echo", arguments: { text: "from TypeScript" } });
const failed = await client.callTool({ name: "raises", arguments: {} });
console.log(
  JSON.stringify({
    version: client.getNegotiatedProtocolVersion(),
    tools: listed.tools.map((tool) => tool.name),
    echo: echoed.content,
    error: { isError: failed.isError, text: failed.content[0]?.text },
  }),
);
await client.close();
