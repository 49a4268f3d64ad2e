// Escape probes in TypeScript (the twin of tests/tools/escape.py): the one tool, `probe`, tries one
// thing and answers {ok, code, errno, error, value}; it never throws.
import { readFileSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { dlopen, FFIType } from "bun:ffi";

/** prctl(PR_GET_DUMPABLE): 1 if another process of this uid could read this one's memory and fds. */
function dumpable(): number {
  const libc = dlopen("libc.so.6", {
    prctl: { args: [FFIType.i32, FFIType.u64, FFIType.u64, FFIType.u64, FFIType.u64], returns: FFIType.i32 },
  });
  try {
    return libc.symbols.prctl(3, 0, 0, 0, 0);
  } finally {
    libc.close();
  }
}

type Outcome = { ok: boolean; code: string | null; errno: number | null; error: string | null; value: unknown };

function tcpNodeNet(port: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve("connected");
    });
    socket.once("error", reject);
  });
}

async function tcpBunConnect(port: number): Promise<unknown> {
  const socket = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } });
  socket.end();
  return "connected";
}

async function tcpFetch(port: number): Promise<unknown> {
  const response = await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(1500) });
  return response.status;
}

export default function factory(pi: any) {
  const probes: Record<string, (a: any) => unknown> = {
    write_outside: (a) => {
      writeFileSync(a.path, "escaped");
      return null;
    },
    bun_write_outside: async (a) => Bun.write(a.path, "escaped"),
    read_file: (a) => readFileSync(a.path, "utf8").slice(0, 20),
    bun_read_file: async (a) => (await Bun.file(a.path).text()).slice(0, 20),
    tcp_net: (a) => tcpNodeNet(a.port),
    tcp_bun: (a) => tcpBunConnect(a.port),
    tcp_fetch: (a) => tcpFetch(a.port),
    exec: async (a) => {
      const result = await pi.exec(a.program, a.args ?? []);
      return { code: result.code, stdout: result.stdout };
    },
    dumpable: () => dumpable(),
    spawn_env: (a) => {
      // The handoff must reach no child, however the tool spawns it (env: undefined given explicitly too).
      const seen: string[] = [];
      for (const options of [undefined, {}, { env: undefined }]) {
        const out = Bun.spawnSync(["/usr/bin/env"], options as any).stdout.toString();
        seen.push(out.includes("XCSH_WORKER_INIT") ? "leaked" : "clean");
      }
      return seen;
    },
    surrogate: () => "ab\u{1F600}".slice(0, 3),
    write_tmp: (a) => {
      const path = `${process.env.TMPDIR}/inside.txt`;
      writeFileSync(path, a.text ?? "inside");
      return readFileSync(path, "utf8");
    },
  };
  return {
    name: "probe",
    description: "Tries one escape and reports what happened",
    parameters: pi.typebox.Type.Object({ name: pi.typebox.Type.String() }, { additionalProperties: true }),
    async execute(_id: string, params: any): Promise<unknown> {
      let outcome: Outcome;
      try {
        const value = await probes[params.name](params);
        outcome = { ok: true, code: null, errno: null, error: null, value: value ?? null };
      } catch (err: any) {
        outcome = {
          ok: false,
          code: typeof err?.code === "string" ? err.code : null,
          errno: typeof err?.errno === "number" ? err.errno : null,
          error: `${err?.name ?? typeof err}: ${err?.message ?? String(err)}`,
          value: null,
        };
      }
      return { content: [{ type: "text", text: JSON.stringify(outcome) }], details: outcome };
    },
  };
}
