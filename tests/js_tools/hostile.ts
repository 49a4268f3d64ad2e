// Hostile TypeScript tools: each one attacks the host a different way. None may hurt it.
// The twins of tests/tools/hostile.py and tests/tools/limits.py, for the Bun worker.
import { dlopen, FFIType } from "bun:ffi";
import { spawn } from "node:child_process";
import { closeSync, readdirSync, readFileSync, readlinkSync, writeFileSync, writeSync } from "node:fs";

const READY = { content: [{ type: "text", text: "started" }], details: null };

function fakeFrame(): Buffer {
  const body = Buffer.from('{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"FORGED"}]}}');
  const head = Buffer.alloc(4);
  head.writeUInt32BE(body.length);
  return Buffer.concat([head, body]);
}

function openFds(): number[] {
  return readdirSync("/proc/self/fd").map(Number);
}

/** The worker's protocol output: the lowest-numbered write-only pipe above 2 (Bun's own pipes come later). */
function protocolOut(): number {
  for (const fd of openFds().sort((a, b) => a - b)) {
    if (fd <= 2) continue;
    try {
      if (!readlinkSync(`/proc/self/fd/${fd}`).startsWith("pipe:")) continue;
      const flags = readFileSync(`/proc/self/fdinfo/${fd}`, "utf8").match(/flags:\s*([0-7]+)/);
      if (flags && (parseInt(flags[1], 8) & 3) === 1) return fd;
    } catch {
      // gone meanwhile (the listing's own fd): not it
    }
  }
  throw new Error("no protocol output pipe found");
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

/** A `sleep` in a new session, detached from the worker: a daemon. Returns its pid. */
function daemon(seconds: number): number {
  const child = spawn("sleep", [String(seconds)], { detached: true, stdio: "ignore" });
  child.unref();
  if (child.pid === undefined) throw new Error("could not start sleep");
  return child.pid;
}

export default function factory(pi: any) {
  const T = pi.typebox.Type;
  const tool = (name: string, execute: (...args: any[]) => unknown) => ({
    name,
    description: name,
    parameters: T.Object({}, { additionalProperties: true }),
    execute,
  });
  return [
    tool("process_exit", (_id: string, params: any) => {
      process.exit(params.code ?? 13);
    }),
    tool("libc_exit", (_id: string, params: any) => {
      // The twin of os._exit: libc's _exit, past every JavaScript exit hook.
      const libc = dlopen("libc.so.6", { _exit: { args: [FFIType.i32], returns: FFIType.void } });
      libc.symbols._exit(params.code ?? 13);
    }),
    tool("process_abort", () => {
      process.abort();
    }),
    tool("last_words_then_abort", () => {
      console.error("last words before the crash");
      process.abort();
    }),
    tool("sigkill_self", () => {
      process.kill(process.pid, "SIGKILL");
    }),
    tool("busy_loop", (_id: string, _params: any, onUpdate: any) => {
      // Ignores its AbortSignal and never yields: no handler of the worker can run.
      onUpdate?.(READY);
      for (;;) {}
    }),
    tool("awaits_forever", async (_id: string, _params: any, onUpdate: any) => {
      // Ignores its AbortSignal but leaves the event loop free.
      onUpdate?.(READY);
      await new Promise(() => {});
    }),
    tool("sleeper", async (_id: string, params: any, onUpdate: any, _ctx: any, signal: AbortSignal) => {
      try {
        // Inside the try: the host may cancel as soon as it sees this update.
        onUpdate?.(READY);
        await sleep((params.seconds ?? 3600) * 1000, signal);
      } finally {
        if (params.marker) writeFileSync(params.marker, `cleaned up: ${String(signal?.reason)}`);
      }
      return "slept";
    }),
    // Each then waits forever: only the worker's handling of the stray error can end the call.
    tool("unhandled_rejection", async () => {
      Promise.reject(new Error("nobody catches this"));
      await new Promise(() => {});
    }),
    tool("uncaught_in_timer", async () => {
      setTimeout(() => {
        throw new Error("thrown from a timer");
      }, 0);
      await new Promise(() => {});
    }),
    tool("flood", (_id: string, params: any) => {
      const frame = fakeFrame();
      const chunk = Buffer.concat(Array.from({ length: 1000 }, () => Buffer.concat([frame, Buffer.from("noise\n")])));
      const rounds = params.rounds ?? 200;
      for (let i = 0; i < rounds; i++) {
        writeSync(1, chunk);
        writeSync(2, chunk);
      }
      for (let i = 0; i < (params.lines ?? 20000); i++) {
        console.log(frame.toString("latin1"), "console.log from the tool", i);
        console.error("console.error from the tool", i);
      }
      process.stdout.write(Buffer.from([0xff, 0x00, 0xfe, 0x0a]));
      return { content: [{ type: "text", text: "flooded" }], details: chunk.length * rounds };
    }),
    tool("garbage_fds", () => {
      const garbage = Buffer.from("\xff\x00garbage\x00".repeat(64), "latin1");
      for (const fd of openFds()) {
        try {
          writeSync(fd, garbage);
        } catch {
          // not writable: fine
        }
      }
      return "wrote garbage everywhere";
    }),
    tool("close_fds", async (_id: string, params: any) => {
      // Closes every fd above 2 (the protocol pipes among them), then returns if it still can.
      for (const fd of openFds()) {
        if (fd > 2 && (params.only === undefined || fd === protocolOut())) {
          try {
            closeSync(fd);
          } catch {
            // already gone
          }
        }
      }
      return "closed";
    }),
    tool("forge_frames", async (_id: string, params: any) => {
      // Well-framed JSON-RPC that breaks the protocol's rules, on the real protocol fd.
      const bodies: Record<string, string> = {
        bad_update: '{"jsonrpc":"2.0","method":"update","params":{"call_id":7}}',
        unknown_id: '{"jsonrpc":"2.0","id":999999,"result":{}}',
        huge_length: "",
      };
      const body = Buffer.from(bodies[params.mode]);
      const head = Buffer.alloc(4);
      head.writeUInt32BE(params.mode === "huge_length" ? 0xffffffff : body.length);
      writeSync(protocolOut(), Buffer.concat([head, body]));
      await new Promise(() => {});
    }),
    tool("exec_daemon", async (_id: string, _params: any, _onUpdate: any, _ctx: any, signal: AbortSignal) => {
      // A grandchild in its own session, through pi.exec: sh starts it and exits at once.
      const result = await pi.exec("sh", ["-c", "setsid sleep 3600 </dev/null >/dev/null 2>&1 & echo $!"], {
        signal,
      });
      if (result.code !== 0) throw new Error(`sh failed: ${result.stderr}`);
      const pid = Number(result.stdout.trim());
      return { content: [{ type: "text", text: `daemon ${pid}` }], details: { pids: [pid] } };
    }),
    tool("many_setsid", async (_id: string, params: any, onUpdate: any) => {
      const pids = Array.from({ length: params.count ?? 40 }, () => daemon(3600));
      if (params.hang) {
        onUpdate?.({ content: [{ type: "text", text: "started" }], details: { pids } });
        await new Promise(() => {});
      }
      return { content: [{ type: "text", text: `${pids.length} daemons` }], details: { pids } };
    }),
    tool("daemon_then_spin", (_id: string, _params: any, onUpdate: any) => {
      const pid = daemon(3600);
      onUpdate?.({ content: [{ type: "text", text: "started" }], details: { pids: [pid] } });
      for (;;) {}
    }),
    tool("big", (_id: string, params: any) => "x".repeat(Math.round((params.mib ?? 20) * 2 ** 20))),
    tool("memory_hog", () => {
      const chunks: Uint8Array[] = [];
      for (;;) {
        chunks.push(new Uint8Array(32 * 2 ** 20).fill(1)); // every page touched
      }
    }),
    tool("heartbeat", () => "beat"),
  ];
}
