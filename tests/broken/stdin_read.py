import sys

from worker.pi import CustomTool

DATA = sys.stdin.read()


def factory(api):
    return CustomTool(
        name="stdin_at_import",
        description="read stdin at import",
        parameters={"type": "object"},
        execute=lambda *a: repr(DATA),
    )
