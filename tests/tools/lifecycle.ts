// The lifecycle sweep's tools for the Bun worker (twins of lifecycle.py): as cheap as a call can be, and a stream.

const OBJ = { type: "object" };

const pause = (ms: number, signal: AbortSignal) =>
  new Promise<boolean>((resolve) => {
    if (signal.aborted) return resolve(true);
    const timer = setTimeout(() => resolve(false), ms);
    signal.addEventListener("abort", () => (clearTimeout(timer), resolve(true)), { once: true });
  });

export default (pi: any) => [
  {
    name: "ping",
    label: "ping",
    description: "answers pong with its worker's pid",
    parameters: OBJ,
    async execute() {
      return { content: [{ type: "text", text: "pong" }], details: process.pid };
    },
  },
  {
    name: "stream",
    label: "stream",
    description: "sends `count` partial results and log records, `interval` s apart, then answers",
    parameters: OBJ,
    // As lifecycle.py's: `count` partial results, each followed by a log record, `interval` seconds
    // apart (so the host receives and delivers them one by one); it stops as soon as it is cancelled.
    async execute(_id: string, params: any, onUpdate: any, _ctx: any, signal: AbortSignal) {
      const count = params.count ?? 8;
      const ms = (params.interval ?? 0.001) * 1000;
      for (let i = 0; i < count; i++) {
        onUpdate?.({ content: [{ type: "text", text: `part ${i} of ${count}` }], details: i });
        if (await pause(ms, signal)) break;
        pi.logger.info(`sent part ${i} of ${count}`);
        if (await pause(ms, signal)) break;
      }
      return { content: [{ type: "text", text: "streamed" }], details: count };
    },
  },
];
