"""Tools for the Ray tests: each says which node and process served it."""

import json
import os
import subprocess

from worker.pi import CustomTool

OBJ = {"type": "object"}


def _where():
    return {"node": os.environ.get("XCSH_RUN_RAY_NODE"), "pid": os.getpid()}


def factory(api):
    def where(tcid, params, on_update, ctx, signal):
        return {"content": [{"type": "text", "text": str(params.get("text", ""))}], "details": _where()}

    def hold(tcid, params, on_update, ctx, signal):
        """Starts a child, says so in a file named by the call, then waits for ``release`` (a path) to appear."""
        child = subprocess.Popen(["sleep", "3600"])
        # One file per run of a call (its id and its worker's pid): a call run twice would leave two.
        marker = os.path.join(params["dir"], f"{tcid}.{os.getpid()}.json")
        with open(marker + ".tmp", "w") as f:
            json.dump({**_where(), "child": child.pid, "call": tcid}, f)
        os.rename(marker + ".tmp", marker)  # whole or absent: the test reads it as soon as it appears
        while not os.path.exists(params["release"]):
            if signal.wait(0.01):
                return "cancelled"  # the child is left running: the runner's tree kill must end it
        child.kill()
        child.wait()
        return {"content": [{"type": "text", "text": "released"}], "details": _where()}

    return [
        CustomTool(name="where", description="says where it runs", parameters=OBJ, execute=where),
        CustomTool(name="hold", description="holds until a file appears", parameters=OBJ, execute=hold),
    ]
