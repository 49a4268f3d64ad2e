// The worker's side of the host API (HostLink) through the real api.ts: a ui prompt
// answered by the host, pending actions resolved by it. Returns no tools while
// api.ts is the stub without these members.
export default (pi: any) => {
  if (typeof pi.pushPendingAction !== "function" || typeof pi.ui?.confirm !== "function") return [];
  const object = { type: "object", properties: {} };
  return [
    {
      name: "prompt",
      description: "Asks the user to confirm, through the host",
      parameters: object,
      async execute() {
        let refused = "";
        try {
          await pi.ui.input("Name", "placeholder");
        } catch (exc) {
          refused = (exc as Error).message;
        }
        const yes = await pi.ui.confirm("Deploy", "Deploy to prod?");
        return { content: [{ type: "text", text: `confirmed=${yes}` }], details: { refused } };
      },
    },
    {
      name: "defer",
      description: "Leaves a change pending",
      parameters: object,
      deferrable: true,
      execute() {
        pi.pushPendingAction({
          label: "rename x to y",
          details: { from: "x" },
          apply: async (reason: string) => `applied: ${reason}`,
          reject: (reason: string) => {
            throw new Error(`cannot discard: ${reason}`);
          },
        });
        pi.pushPendingAction({ label: "second", apply: () => null });
        pi.pushPendingAction({ label: "third", apply: () => "never", reject: () => ({ content: "not a list" }) });
        return "previewed";
      },
    },
  ];
};
