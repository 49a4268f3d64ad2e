"""Tools that use the host API: UI, logger, ctx.abort, exec, session events, render hooks, pending actions."""

import os
import time

from worker.pi import CustomTool

OBJ = {"type": "object"}
EVENTS = []
MARKER = []


def factory(api):
    def ask(tcid, params, on_update, ctx, signal):
        on_update({"content": [{"type": "text", "text": "asking"}], "details": None})
        answer = api.ui.confirm("Proceed?", params.get("message", "really?"))
        choice = api.ui.select("Pick", ["a", "b"])
        api.ui.notify("asked", "info")
        return {
            "content": [{"type": "text", "text": "answered"}],
            "details": {"confirm": answer, "select": choice, "has_ui": api.has_ui},
        }

    async def ask_async(tcid, params, on_update, ctx, signal):
        answer = await api.ui.confirm("Proceed?", "async")
        text = await api.ui.input("Name", "placeholder")
        await api.ui.set_status("k", "v")
        return {"content": [], "details": {"confirm": answer, "input": text, "has_ui": api.has_ui}}

    def has_ui(tcid, params, on_update, ctx, signal):
        return {"content": [], "details": api.has_ui}

    def log(tcid, params, on_update, ctx, signal):
        for i in range(params.get("count", 3)):
            api.logger.warning("record %d from %s", i, tcid)
        return "logged"

    def abort(tcid, params, on_update, ctx, signal):
        ctx.abort(params.get("reason", "enough"))
        time.sleep(60)
        return "not aborted"

    def sleeper(tcid, params, on_update, ctx, signal):
        on_update({"content": [{"type": "text", "text": "started"}], "details": None})
        time.sleep(60)
        return "slept"

    def exec_tree(tcid, params, on_update, ctx, signal):
        script = "sleep 300 & sleep 300 & (setsid sleep 300 &) ; echo started; wait"
        res = api.exec("sh", ["-c", script], timeout=params.get("timeout", 0.5))
        return {"content": [], "details": {"stdout": res.stdout, "code": res.code, "killed": res.killed}}

    def exec_status(tcid, params, on_update, ctx, signal):
        res = api.exec("sh", ["-c", params["script"]], input=params.get("input"))
        return {
            "content": [],
            "details": {"stdout": res.stdout, "stderr": res.stderr, "code": res.code, "killed": res.killed},
        }

    async def exec_async(tcid, params, on_update, ctx, signal):
        res = await api.exec("sh", ["-c", "echo async-$((1+2))"])
        return {"content": [], "details": {"stdout": res.stdout, "code": res.code}}

    def exec_missing(tcid, params, on_update, ctx, signal):
        api.exec("no-such-program-xyz", [])
        return "unreachable"

    def on_session(event, ctx):
        EVENTS.append({"reason": event["reason"], "ctx": ctx.state})
        if "marker" in event:  # from then on, every event is also written there
            MARKER.append(event["marker"])
        for path in MARKER:
            with open(path, "a") as f:
                f.write(event["reason"] + "\n")

    def broken_on_session(event, ctx):
        raise ValueError("on_session broke")

    def events(tcid, params, on_update, ctx, signal):
        return {"content": [], "details": EVENTS}

    def render_call(args, theme):
        return f"<call {args}>"

    def render_result(result, options, theme, args):
        return f"<result {result['content'][0]['text']} partial={options['is_partial']}>"

    def render_forever(result, options, theme, args):
        while True:
            pass

    def render_garbage(args, theme):
        return 42

    def propose(tcid, params, on_update, ctx, signal):
        def apply(reason):
            return {
                "content": [{"type": "text", "text": f"applied {params['label']}: {reason}"}],
                "details": {"pid": os.getpid()},
            }

        def reject(reason):
            if params.get("reject_returns"):
                return f"rejected {params['label']}"
            return None

        api.push_pending_action(
            {
                "label": params["label"],
                "apply": apply,
                "reject": reject,
                "details": {"diff": "+1 -1"},
                "source_tool_name": "propose",
            }
        )
        return {"content": [{"type": "text", "text": "preview ready"}], "details": {"pid": os.getpid()}}

    def die(tcid, params, on_update, ctx, signal):
        os._exit(5)

    tools = [
        CustomTool(name=fn.__name__, description=fn.__name__, parameters=OBJ, execute=fn)
        for fn in (
            ask,
            ask_async,
            has_ui,
            log,
            abort,
            sleeper,
            exec_tree,
            exec_status,
            exec_async,
            exec_missing,
            events,
            die,
        )
    ]
    tools += [
        CustomTool(
            name="session_tool",
            description="records session events",
            parameters=OBJ,
            execute=events,
            on_session=on_session,
        ),
        CustomTool(
            name="broken_session",
            description="raises in on_session",
            parameters=OBJ,
            execute=events,
            on_session=broken_on_session,
        ),
        CustomTool(
            name="rendered",
            label="Rendered",
            description="has render hooks",
            parameters=OBJ,
            execute=lambda *a: "plain",
            render_call=render_call,
            render_result=render_result,
        ),
        CustomTool(
            name="render_hangs",
            description="render_result loops",
            parameters=OBJ,
            execute=lambda *a: "plain",
            render_result=render_forever,
        ),
        CustomTool(
            name="render_garbage",
            label="Garbage",
            description="render_call returns an int",
            parameters=OBJ,
            execute=lambda *a: "plain",
            render_call=render_garbage,
        ),
        CustomTool(
            name="propose", description="pushes a pending action", parameters=OBJ, execute=propose, deferrable=True
        ),
    ]
    return tools
