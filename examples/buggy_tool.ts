/**
 * buggy_echo_ts: a TypeScript tool with two planted bugs, for `xcsh-run fuzz` to find
 * (the twin of buggy_tool.py; see docs/fuzzing.md and docs/typescript.md).
 *
 * It repeats a text. Its parameters are a TypeBox schema, which is JSON Schema: the host
 * validates every call against it, and the fuzzer generates arguments from it. It is fine
 * for most arguments, but:
 *
 * - an empty `text` has no first character: `match` returns null and reading `[0]` of it
 *   throws a TypeError;
 * - a negative `repeat` (the schema sets no minimum) makes `String.prototype.repeat` throw
 *   a RangeError.
 *
 * `xcsh-run fuzz buggy_echo_ts --tools examples/buggy_tool.ts` finds both in one run and
 * prints the minimal arguments of each, ready to rerun.
 */
import type { CustomToolFactory } from "@f5-sales-demo/xcsh";

const factory: CustomToolFactory = (pi) => {
  const { Type } = pi.typebox;
  return {
    name: "buggy_echo_ts",
    label: "Buggy Echo (TypeScript)",
    description: "Repeats a text (with two planted bugs)",
    parameters: Type.Object(
      {
        text: Type.String(),
        repeat: Type.Optional(Type.Integer({ maximum: 100 })), // no lower bound: that is bug 2
      },
      { additionalProperties: false },
    ),

    async execute(toolCallId, params) {
      const first = params.text.match(/./su)![0]; // planted bug 1: null on an empty text
      const text = params.text.repeat(params.repeat ?? 1); // planted bug 2: a negative count
      return {
        content: [{ type: "text", text }],
        details: { length: text.length, first },
      };
    },
  };
};

export default factory;
