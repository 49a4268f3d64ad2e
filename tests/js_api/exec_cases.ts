/** api.exec cases for tests/test_js_api.py: each returns a JSON-able report. */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { makeApi } from "../../worker/js/api.ts";
import { FakeLink } from "./fake_link.ts";

type Exec = (command: string, args?: string[], options?: Record<string, unknown>) => Promise<Record<string, unknown>>;

function apiExec(cwd?: string): Exec {
  const { api } = makeApi(new FakeLink(cwd), { typeboxDir: "" });
  return api.exec as Exec;
}

function stat(pid: number): { state: string; session: number } | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "latin1");
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
    return { state: fields[0]!, session: Number(fields[3]) };
  } catch {
    return null;
  }
}

async function waitForFile(path: string, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!existsSync(path)) {
    if (Date.now() > deadline) throw new Error(`harness: ${path} did not appear within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function rejection(p: Promise<unknown>): Promise<Record<string, unknown>> {
  try {
    return { resolved: await p };
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    return { name: e.name, message: e.message, code: e.code ?? null };
  }
}

// The shell writes its pids (a grandchild in its group, a setsid() grandchild, itself) then waits.
function treeScript(ignoreTerm: boolean): string {
  return (
    (ignoreTerm ? "trap '' TERM; " : "") +
    'sleep 1000 & echo $! > "$D/pids"; setsid sleep 1000 & echo $! >> "$D/pids"; ' +
    'echo $$ >> "$D/pids"; mv "$D/pids" "$D/ready"; sleep 1000'
  );
}

async function tree(dir: string, how: "abort" | "timeout", ignoreTerm: boolean): Promise<Record<string, unknown>> {
  const exec = apiExec();
  const controller = new AbortController();
  const env = { ...process.env, D: dir } as Record<string, string>;
  const t0 = performance.now();
  const options: Record<string, unknown> = { env };
  if (how === "abort") options.signal = controller.signal;
  else options.timeout = 2000;
  const running = exec("sh", ["-c", treeScript(ignoreTerm)], options);
  await waitForFile(join(dir, "ready"), 10_000);
  const pids = readFileSync(join(dir, "ready"), "utf8").trim().split("\n").map(Number);
  // The pid is written before the grandchild's setsid() runs: wait until it has its own session.
  const deadline = Date.now() + 10_000;
  while (stat(pids[1]!)?.session !== pids[1]) {
    if (Date.now() > deadline) throw new Error("harness: the setsid() grandchild never left the session");
    await new Promise((r) => setTimeout(r, 10));
  }
  const before = pids.map((pid) => stat(pid));
  if (how === "abort") controller.abort();
  const result = await running;
  return { result, pids, before, ms: performance.now() - t0 };
}

export const execCases: Record<string, (arg: string) => Promise<unknown>> = {
  async basic() {
    const exec = apiExec();
    return {
      mixed: await exec("sh", ["-c", "echo out; echo err >&2; exit 3"]),
      ok: await exec("printf", ["%s|", "a b", "*", "$HOME"]),
      utf8: await exec("printf", ["caf\\303\\251 \\377"]),
    };
  },
  async signal_code() {
    const exec = apiExec();
    return {
      kill9: await exec("sh", ["-c", "kill -9 $$"]),
      term: await exec("sh", ["-c", "kill -TERM $$"]),
    };
  },
  async options(dir: string) {
    const exec = apiExec(dir);
    return {
      env: await exec("sh", ["-c", 'echo "$FOO|${HOME-unset}"'], { env: { FOO: "bar", PATH: process.env.PATH } }),
      inherit: await exec("sh", ["-c", 'echo "$XCSH_JSAPI_PROBE"']),
      input: await exec("cat", [], { input: "line1\nline2" }),
      bytes: await exec("od", ["-An", "-tx1"], { input: new Uint8Array([0, 255, 10]) }),
      noInput: await exec("cat", []),
      cwd: await exec("pwd", [], { cwd: "/" }),
      defaultCwd: await exec("pwd", []),
    };
  },
  async enoent(dir: string) {
    const exec = apiExec(dir);
    return {
      program: await rejection(exec("no-such-program-xcsh", ["x"])),
      path: await rejection(exec("/nonexistent/prog", [])),
      cwd: await rejection(exec("true", [], { cwd: join(dir, "missing") })),
      args: await rejection(exec("true", "x" as unknown as string[])),
    };
  },
  async timeout(dir: string) {
    return tree(dir, "timeout", false);
  },
  async abort_tree(dir: string) {
    return tree(dir, "abort", false);
  },
  async abort_tree_stubborn(dir: string) {
    return tree(dir, "abort", true);
  },
  async pre_aborted(dir: string) {
    const exec = apiExec();
    const controller = new AbortController();
    controller.abort();
    const marker = join(dir, "ran");
    const result = await exec("touch", [marker], { signal: controller.signal });
    return { result, ran: existsSync(marker) };
  },
  async daemon() {
    // The program exits at once, its background grandchild keeps stdout open.
    const exec = apiExec();
    const t0 = performance.now();
    const result = await exec("sh", ["-c", "sleep 1000 & echo $!"]);
    const ms = performance.now() - t0;
    const pid = Number(String(result.stdout).trim());
    const alive = stat(pid) !== null;
    process.kill(pid, "SIGKILL"); // exec leaves a program that exited normally alone, as the Python worker
    return { result, ms, alive };
  },
};
