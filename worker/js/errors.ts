/**
 * Errors a tool raises on purpose. The worker reports them as `tool_error` with
 * `deliberate: true`, so `xcsh-run fuzz` does not count them as bugs (as
 * `xcsh_run.pi.ToolError` for Python tools). Tools reach it as `pi.ToolError`.
 */
export class ToolError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ToolError";
  }
}
