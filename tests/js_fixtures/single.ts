export default (pi: any) => ({
  name: "single",
  label: "Single",
  description: "One tool, TypeBox parameters",
  parameters: pi.typebox
    ? pi.typebox.Type.Object({ n: pi.typebox.Type.Number() })
    : { type: "object", properties: { n: { type: "number" } }, required: ["n"] },
  execute: (_id: string, params: { n: number }) => `n=${params.n}`,
});
