// A stand-in for worker/js/main.ts, for the host-side tests of the launch step
// (tests/test_js_host.py): it speaks just enough of docs/protocol.md. It reads
// XCSH_WORKER_INIT, answers initialize, loads one fixed tool whatever the
// module, and answers a call with what it was given plus what the process sees.
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";

const init = JSON.parse(process.env.XCSH_WORKER_INIT ?? "null");
delete process.env.XCSH_WORKER_INIT;
if (init === null) {
  process.stderr.write("js stub: no XCSH_WORKER_INIT\n");
  process.exit(3);
}
process.on("SIGTERM", () => process.exit(0));

function send(message: Record<string, unknown>): void {
  const body = Buffer.from(JSON.stringify({ ...message, jsonrpc: "2.0" }));
  const header = Buffer.alloc(4);
  header.writeUInt32BE(body.length);
  fs.writeSync(init.fd_out, Buffer.concat([header, body]));
}

let pending: Buffer = Buffer.from(init.buffered, "base64");
const chunk = Buffer.alloc(1 << 16);

function next(): Record<string, any> | null {
  for (;;) {
    if (pending.length >= 4) {
      const n = pending.readUInt32BE(0);
      if (pending.length >= 4 + n) {
        const body = pending.subarray(4, 4 + n);
        pending = pending.subarray(4 + n);
        return JSON.parse(body.toString("utf8"));
      }
    }
    let got = 0;
    try {
      got = fs.readSync(init.fd_in, chunk, 0, chunk.length, null);
    } catch (err: any) {
      if (err.code === "EAGAIN") continue;
      return null;
    }
    if (got === 0) return null;
    pending = Buffer.concat([pending, chunk.subarray(0, got)]);
  }
}

send({
  id: init.id,
  result: {
    protocol_version: 1,
    pid: process.pid,
    python: `bun ${Bun.version}`,
    unenforced: init.unenforced,
    supervisor: init.supervisor,
  },
});

let loaded = "";
let loadKeys: string[] = [];
for (;;) {
  const msg = next();
  if (msg === null) {
    if (init.kill_fd >= 0) {
      try {
        fs.writeSync(init.kill_fd, "1");
      } catch {}
    }
    process.exit(4);
  }
  if (msg.id === undefined) continue; // a notification
  if (msg.method === "load") {
    loaded = msg.params.path;
    loadKeys = Object.keys(msg.params).sort();
    send({
      id: msg.id,
      result: {
        tools: [
          {
            name: "stub_echo",
            label: "Stub echo",
            description: "Echoes its arguments (a test stub of the JS worker)",
            parameters: { type: "object", properties: { text: { type: "string" } } },
            params_kind: "json_schema",
          },
        ],
      },
    });
  } else if (msg.method === "call") {
    let child: string | null = null;
    let bunChild: string | null = null;
    if (msg.params.arguments.spawn) {
      // What a tool's subprocess inherits: fds (by a shell's own listing) and environment.
      const script = "ls /proc/$$/fd; echo ---; env";
      child = spawnSync("/bin/sh", ["-c", script]).stdout.toString();
      // Bun.spawn without `env` passes the environment Bun started with, not process.env.
      bunChild = Bun.spawnSync(["/bin/sh", "-c", script]).stdout.toString();
    }
    const seen = {
      arguments: msg.params.arguments,
      module: loaded,
      load_params: loadKeys,
      init,
      child,
      bun_child: bunChild,
      pid: process.pid,
      uid: process.getuid?.() ?? null,
      sig_ign: fs.readFileSync("/proc/self/status", "utf8").match(/^SigIgn:\s*([0-9a-f]+)/m)?.[1] ?? null,
      init_visible: process.env.XCSH_WORKER_INIT !== undefined,
      env_keys: Object.keys(process.env).sort(),
      home: process.env.HOME ?? null,
      argv: process.argv,
    };
    send({ id: msg.id, result: { content: [{ type: "text", text: JSON.stringify(seen) }], details: seen } });
  } else if (msg.method === "shutdown") {
    send({ id: msg.id, result: null });
    process.exit(0);
  } else {
    send({ id: msg.id, error: { code: -32601, message: `stub: no method ${msg.method}` } });
  }
}
