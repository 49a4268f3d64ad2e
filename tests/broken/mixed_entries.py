from worker.pi import CustomTool


def factory(api):
    def ok(tcid, params, on_update, ctx, signal):
        return "ok"

    return [
        CustomTool(name="good_one", description="fine", parameters={"type": "object"}, execute=ok),
        42,
        CustomTool(name="bad name!", description="bad", parameters={"type": "object"}, execute=ok),
        {"name": "dict_tool", "description": "from a dict", "parameters": {"type": "object"}, "execute": ok},
        CustomTool(name="good_one", description="duplicate", parameters={"type": "object"}, execute=ok),
        CustomTool(name="bad_schema", description="bad", parameters="nope", execute=ok),
    ]
