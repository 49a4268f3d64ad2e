"""The authoring API for tool modules: ``from xcsh_run.pi import CustomTool, ToolAPI``.

The same objects a factory receives as ``api.pi``. They are defined in the
worker's own package (``xcsh_run.worker.pi``), which runs inside the worker and
imports only the standard library and msgspec; this module is their public
name. Importing it imports nothing of the host (rule 1 of ``xcsh_run``), and a
name is looked up in the worker's module on first use, so that the types that
module loads lazily stay lazy here too.
"""

from typing import TYPE_CHECKING, Any

from xcsh_run.worker import pi as _pi
from xcsh_run.worker.pi import __all__ as __all__

if TYPE_CHECKING:
    from xcsh_run.worker.pi import *  # noqa: F403
else:

    def __getattr__(name: str) -> Any:
        if name not in __all__:
            raise AttributeError(f"module 'xcsh_run.pi' has no attribute {name!r}")
        value = getattr(_pi, name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
