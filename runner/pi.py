"""The authoring API for tool modules, also injected into factories as ``api.pi``.

A tool module defines ``factory(api)`` and returns one or more `CustomTool`:

```python
from xcsh_run.pi import CustomTool, ToolAPI, ToolContext, AbortSignal

def factory(api: ToolAPI) -> CustomTool:
    def execute(tool_call_id: str, params: dict, on_update, ctx: ToolContext, signal: AbortSignal) -> str:
        return f"hello {params['name']}"

    return CustomTool(name="hello", label="Hello", description="Greets",
                      parameters={"type": "object", "properties": {"name": {"type": "string"}},
                                  "required": ["name"]},
                      execute=execute)
```

**The factory contract.** The worker imports the module and calls
``factory(api)`` once, with the worker's single `ToolAPI` (shared by every
module the worker loads). The factory may be ``def`` or ``async def`` and
returns:

- one `CustomTool`;
- a ``list`` or ``tuple`` of them (one module, several tools);
- in place of any `CustomTool`, a ``dict`` with its keyword arguments.

An entry that is none of these, or whose fields are invalid, is a load error
for that entry alone (the others still load); a tool name defined twice keeps
the first. A factory that raises (or a module that fails to import) is a
``load_error`` naming the module, with the traceback. A plugin may name
another attribute than ``factory`` (``module:attr``, see `docs/architecture.md`).

Type annotations: `ToolAPI` (``api``), `UI` (``api.ui``), `ToolContext`
(``ctx``), `SessionManager` (``ctx.session_manager``), `AbortSignal`
(``signal``) and `ExecResult` (what ``api.exec`` returns) are importable
from here, for annotations and an IDE's completion.

This module imports only the standard library and msgspec: it runs inside the
worker, never in the host.

The names are defined in the worker's own package (``xcsh_run.worker.pi``);
this module is their public name, and importing it imports nothing of the
host (rule 1 of ``xcsh_run``).
"""

from typing import TYPE_CHECKING, Any

from xcsh_run.worker import pi as _pi
from xcsh_run.worker.pi import AbortSignal as AbortSignal
from xcsh_run.worker.pi import AudioContent as AudioContent
from xcsh_run.worker.pi import CustomTool as CustomTool
from xcsh_run.worker.pi import EmbeddedResource as EmbeddedResource
from xcsh_run.worker.pi import Icon as Icon
from xcsh_run.worker.pi import ImageContent as ImageContent
from xcsh_run.worker.pi import Requires as Requires
from xcsh_run.worker.pi import ResourceContents as ResourceContents
from xcsh_run.worker.pi import ResourceLink as ResourceLink
from xcsh_run.worker.pi import TextContent as TextContent
from xcsh_run.worker.pi import ToolAnnotations as ToolAnnotations
from xcsh_run.worker.pi import ToolCancelled as ToolCancelled
from xcsh_run.worker.pi import ToolError as ToolError
from xcsh_run.worker.pi import ToolResult as ToolResult

if TYPE_CHECKING:
    from xcsh_run.worker.pi import UI as UI
    from xcsh_run.worker.pi import EventBus as EventBus
    from xcsh_run.worker.pi import ExecResult as ExecResult
    from xcsh_run.worker.pi import SessionManager as SessionManager
    from xcsh_run.worker.pi import ToolAPI as ToolAPI
    from xcsh_run.worker.pi import ToolContext as ToolContext

__all__ = [
    "AbortSignal",
    "AudioContent",
    "CustomTool",
    "EmbeddedResource",
    "EventBus",
    "ExecResult",
    "Icon",
    "ImageContent",
    "Requires",
    "ResourceContents",
    "ResourceLink",
    "SessionManager",
    "TextContent",
    "ToolAPI",
    "ToolAnnotations",
    "ToolCancelled",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "UI",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'xcsh_run.pi' has no attribute {name!r}")
    value = getattr(_pi, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
