// Syscalls that name another process, from TypeScript through bun:ffi (the twin of the Python attack
// tool in tests/test_escape_pid.py). The one tool, `syscalls`, runs a list of raw syscalls given by
// number and arguments and answers, for each, {ret, errno}; it never throws. An argument is an integer,
// {buf: hex} (a buffer with those bytes, passed by address), {iov: n} (an iovec over n local bytes) or
// {pidfd: pid} (a pidfd of that process, opened here and closed after the call).
import { dlopen, FFIType, ptr, read } from "bun:ffi";

const libc = dlopen("libc.so.6", {
  syscall: {
    args: [FFIType.i64, FFIType.i64, FFIType.i64, FFIType.i64, FFIType.i64, FFIType.i64, FFIType.i64],
    returns: FFIType.i64,
  },
  __errno_location: { args: [], returns: FFIType.ptr },
  close: { args: [FFIType.i32], returns: FFIType.i32 },
  prctl: { args: [FFIType.i32, FFIType.u64, FFIType.u64, FFIType.u64, FFIType.u64], returns: FFIType.i32 },
  getuid: { args: [], returns: FFIType.u32 },
});
const SYS_PIDFD_OPEN = 434;
const PR_GET_SECCOMP = 21;

function errno(): number {
  return read.i32(libc.symbols.__errno_location()!, 0);
}

function sys(nr: number, args: (number | bigint)[]): { ret: number; errno: number } {
  const full = [...args, 0, 0, 0, 0, 0, 0].slice(0, 6).map((a) => BigInt(a));
  const ret = Number(libc.symbols.syscall(BigInt(nr), ...full));
  return { ret, errno: ret < 0 ? errno() : 0 };
}

function fromHex(hex: string): Uint8Array {
  const out = new Uint8Array(Math.max(hex.length / 2, 8));
  for (let i = 0; i < hex.length; i += 2) out[i / 2] = parseInt(hex.slice(i, i + 2), 16);
  return out;
}

function run(attack: any): { ret: number; errno: number } {
  const keep: Uint8Array[] = []; // referenced until the call returns
  const fds: number[] = [];
  try {
    const args: (number | bigint)[] = [];
    for (const a of attack.args) {
      if (typeof a === "number") {
        args.push(a);
      } else if ("buf" in a) {
        const buf = fromHex(a.buf);
        keep.push(buf);
        args.push(BigInt(ptr(buf)));
      } else if ("iov" in a) {
        const data = new Uint8Array(a.iov);
        const iov = new BigUint64Array([BigInt(ptr(data)), BigInt(a.iov)]);
        keep.push(data, new Uint8Array(iov.buffer));
        args.push(BigInt(ptr(iov)));
      } else if ("pidfd" in a) {
        const fd = sys(SYS_PIDFD_OPEN, [a.pidfd, 0]);
        if (fd.ret < 0) return { ret: -1, errno: fd.errno };
        fds.push(fd.ret);
        args.push(fd.ret);
      }
    }
    const out = sys(attack.nr, args);
    if (out.ret >= 0 && attack.returns_fd) libc.symbols.close(out.ret);
    return out;
  } finally {
    for (const fd of fds) libc.symbols.close(fd);
  }
}

export default function factory(pi: any) {
  return {
    name: "syscalls",
    description: "Runs raw syscalls and reports each one's return value and errno",
    parameters: pi.typebox.Type.Object({}, { additionalProperties: true }),
    async execute(_id: string, params: any): Promise<unknown> {
      const results: Record<string, { ret: number; errno: number }> = {};
      for (const attack of params.attacks ?? []) results[attack.id] = run(attack);
      // A thread of JavaScriptCore's own, started after the filter: Bun keeps working with it.
      const worker = new Worker(URL.createObjectURL(new Blob(["postMessage(6 * 7)"])));
      const answer = await new Promise((resolve) => (worker.onmessage = (e) => resolve(e.data)));
      worker.terminate();
      const details = {
        results,
        pid: process.pid,
        uid: libc.symbols.getuid(),
        seccomp: libc.symbols.prctl(PR_GET_SECCOMP, 0, 0, 0, 0),
        thread: answer,
      };
      return { content: [{ type: "text", text: JSON.stringify(details) }], details };
    },
  };
}
