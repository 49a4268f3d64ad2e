function typeboxOf(pi: any): any {
  try {
    return pi.typebox?.Type; // the real TypeBox when the worker has it
  } catch {
    return undefined;
  }
}

export default (pi: any) => {
  const Type = typeboxOf(pi);
  return {
    name: "single",
    label: "Single",
    description: "One tool, TypeBox parameters",
    parameters: Type
      ? Type.Object({ n: Type.Number() })
      : { type: "object", properties: { n: { type: "number" } }, required: ["n"] },
    execute: (_id: string, params: { n: number }) => `n=${params.n}`,
  };
};
