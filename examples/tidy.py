"""tidy: strips trailing whitespace from a text file, after showing what would change.

It uses the host API end to end: ``api.exec`` (grep finds the lines), ``on_update``
(progress), ``api.ui.confirm`` (asks before preparing the change), and a pending
action (the change is only a preview until ``resolve`` applies it).
"""

import os

import msgspec


class Params(msgspec.Struct, forbid_unknown_fields=True):
    path: str


def factory(api):
    def execute(tool_call_id, params: Params, on_update, ctx, signal):
        path = os.path.join(api.cwd, params.path)
        on_update({"content": [{"type": "text", "text": f"Looking at {params.path}..."}], "details": None})
        found = api.exec("grep", ["-n", "[[:space:]]$", path], signal=signal)
        if found.code == 2:
            raise RuntimeError(found.stderr.strip() or f"cannot read {params.path}")
        lines = [line.split(":", 1)[0] for line in found.stdout.splitlines()]
        if not lines:
            return f"{params.path}: no trailing whitespace"
        on_update({"content": [{"type": "text", "text": f"{len(lines)} lines to tidy"}], "details": None})
        if api.has_ui and not api.ui.confirm("tidy", f"Prepare a fix for {len(lines)} lines of {params.path}?"):
            return f"{params.path}: left alone"

        def apply(reason):
            with open(path) as f:
                text = f.read()
            tidied = "\n".join(line.rstrip() for line in text.split("\n"))
            with open(path, "w") as f:
                f.write(tidied)
            return f"tidied {len(lines)} lines of {params.path} ({reason})"

        api.push_pending_action(
            {
                "label": f"strip trailing whitespace from {len(lines)} lines of {params.path}",
                "apply": apply,
                "reject": lambda reason: f"kept {params.path} as it was ({reason})",
                "details": {"path": params.path, "lines": lines},
                "source_tool_name": "tidy",
            }
        )
        return {
            "content": [
                {
                    "type": "text",
                    "text": f"Preview: lines {', '.join(lines)} of {params.path} have trailing "
                    'whitespace. Call the `resolve` tool with {"action": "apply"} to make the change, or '
                    '{"action": "discard"} to leave the file as it is, and a "reason".',
                }
            ],
            "details": {"lines": lines},
        }

    return api.pi.CustomTool(
        name="tidy",
        label="Tidy",
        description="Strips trailing whitespace from a file (preview first)",
        parameters=Params,
        execute=execute,
        deferrable=True,
    )
