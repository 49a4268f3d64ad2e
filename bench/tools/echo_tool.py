"""The xcsh-run side of the benchmark's echo calls (loaded by path, in a worker)."""

import msgspec

from xcsh_run.pi import CustomTool


class EchoParams(msgspec.Struct, forbid_unknown_fields=True):
    x: int = 0


def factory(api):
    def echo(tool_call_id, params: EchoParams, on_update, ctx, signal):
        return {"content": [], "details": {"x": params.x}}

    def echo_schema(tool_call_id, params, on_update, ctx, signal):
        return {"content": [], "details": {"x": params["x"]}}

    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    return [
        CustomTool(name="echo", description="echo x (msgspec Struct parameters)", parameters=EchoParams, execute=echo),
        CustomTool(
            name="echo_schema", description="echo x (JSON Schema parameters)", parameters=schema, execute=echo_schema
        ),
    ]
