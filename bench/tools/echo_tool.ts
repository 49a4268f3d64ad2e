// The Bun worker's side of the benchmark's echo calls (loaded by path, in a worker): the twin of
// echo_tool.py's echo_schema, with a TypeBox schema (JSON Schema, validated in the host).
export default (pi: any) => ({
  name: "echo",
  description: "echo x (TypeBox parameters)",
  parameters: pi.typebox.Type.Object({ x: pi.typebox.Type.Integer() }),
  execute: async (_toolCallId: string, params: { x: number }) => ({ content: [], details: { x: params.x } }),
});
