"""Calls on a Ray cluster (the ``ray`` extra): one runner per node, least-loaded routing.

Ray itself is imported only when a Ray runner opens. See ``docs/scale-out.md``.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run.ray._driver import RayRunner as RayRunner
    from xcsh_run.ray._launch import RayMissing as RayMissing
    from xcsh_run.ray._launch import connect_and_ship as connect_and_ship
    from xcsh_run.ray._launch import import_ray as import_ray
    from xcsh_run.ray._launch import open_ray_runner as open_ray_runner
    from xcsh_run.ray._launch import stage_tools as stage_tools

__all__ = [
    "RayMissing",
    "RayRunner",
    "open_ray_runner",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "RayMissing": "_launch",
    "RayRunner": "_driver",
    "connect_and_ship": "_launch",
    "import_ray": "_launch",
    "open_ray_runner": "_launch",
    "stage_tools": "_launch",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
