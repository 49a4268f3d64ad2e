// Records, in the project directory, each session event its worker sees.
import { appendFileSync } from "node:fs";
import { join } from "node:path";

export default function factory(pi: any) {
  return {
    name: "session_probe",
    label: "Session Probe",
    description: "Answers with its worker's pid; its onSession hook appends each event to session-events.log",
    parameters: pi.typebox.Type.Object({}),
    async execute() {
      return `pid ${process.pid}`;
    },
    async onSession(event: { reason: string }) {
      appendFileSync(join(pi.cwd, "session-events.log"), `${event.reason} ${process.pid}\n`);
    },
  };
}
