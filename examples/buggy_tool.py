"""buggy_echo: a tool with two planted bugs, for `xcsh-run fuzz` to find (see docs/fuzzing.md).

It repeats a text. It is fine for most arguments, but:

* an empty ``text`` makes the worker exit on the spot (``os._exit``), as a
  careless C extension or a stray ``sys.exit`` would: the call ends ``crashed``;
* a negative ``repeat`` sends it into an endless loop: the call ends ``timeout``.

``xcsh-run fuzz buggy_echo --tools examples/buggy_tool.py --timeout 1`` finds
both in one run, whatever the seed (the search goes on after the first
failure), and prints the minimal arguments, ``{"text": ""}`` and
``{"text": "0", "repeat": -1}``. About a third of the arguments it generates
hang, each costing the timeout: the run stops early at ``--max-timeouts``.
"""

import os
import time
from typing import Annotated

import msgspec


class Params(msgspec.Struct, forbid_unknown_fields=True):
    text: str
    repeat: Annotated[int, msgspec.Meta(le=100)] = 1  # no lower bound: that is the bug


def factory(api):
    def execute(tool_call_id, params: Params, on_update, ctx, signal):
        if not params.text:
            os._exit(3)  # planted bug 1: a crash on empty input
        count = params.repeat
        while count < 0:  # planted bug 2: a hang on a negative number
            time.sleep(0.01)
        return {
            "content": [{"type": "text", "text": params.text * count}],
            "details": {"length": len(params.text) * count},
        }

    return api.pi.CustomTool(
        name="buggy_echo",
        label="Buggy Echo",
        description="Repeats a text (with two planted bugs)",
        parameters=Params,
        execute=execute,
    )
