"""Finding and describing tools, without importing them in the host.

Rules of the package:

1. **Precedence is fixed** (``finder``): configured paths, then the project's
   and the user's tool folders, then plugins; the first module of a name wins
   and the others are reported as shadowed.
2. **The host never imports a tool**: a module is described by a worker, or
   by the module cache's record of a worker's description (``cache``), whose
   fingerprint is the file's content.
3. **The catalog records, the pool loads** (``Catalog``): getting a worker with
   a module loaded is ``xcsh_run._pool``'s ``Loader``.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run._discovery.bun import ARKTYPE_VERSION as ARKTYPE_VERSION
    from xcsh_run._discovery.bun import BUN_ENV as BUN_ENV
    from xcsh_run._discovery.bun import BUN_VERSION as BUN_VERSION
    from xcsh_run._discovery.bun import TYPEBOX_VERSION as TYPEBOX_VERSION
    from xcsh_run._discovery.bun import ZOD_VERSION as ZOD_VERSION
    from xcsh_run._discovery.bun import BunError as BunError
    from xcsh_run._discovery.bun import JsRuntime as JsRuntime
    from xcsh_run._discovery.bun import default_prefix as default_prefix
    from xcsh_run._discovery.bun import install as install
    from xcsh_run._discovery.bun import js_env as js_env
    from xcsh_run._discovery.bun import locate as locate
    from xcsh_run._discovery.bun import missing as missing
    from xcsh_run._discovery.bun import version as version
    from xcsh_run._discovery.cache import CachedLoad as CachedLoad
    from xcsh_run._discovery.cache import ModuleCache as ModuleCache
    from xcsh_run._discovery.cache import default_dir as default_dir
    from xcsh_run._discovery.cache import fingerprint as fingerprint
    from xcsh_run._discovery.catalog import BUILTIN_MODULE as BUILTIN_MODULE
    from xcsh_run._discovery.catalog import LAST_STDERR as LAST_STDERR
    from xcsh_run._discovery.catalog import RESOLVE_TOOL as RESOLVE_TOOL
    from xcsh_run._discovery.catalog import Catalog as Catalog
    from xcsh_run._discovery.catalog import LoadError as LoadError
    from xcsh_run._discovery.catalog import Outcome as Outcome
    from xcsh_run._discovery.catalog import ToolInfo as ToolInfo
    from xcsh_run._discovery.catalog import check_schemas as check_schemas
    from xcsh_run._discovery.catalog import describe as describe
    from xcsh_run._discovery.catalog import from_load as from_load
    from xcsh_run._discovery.catalog import last_line as last_line
    from xcsh_run._discovery.catalog import metadata_file as metadata_file
    from xcsh_run._discovery.changes import ToolFilesState as ToolFilesState
    from xcsh_run._discovery.changes import read_tool_files_state as read_tool_files_state
    from xcsh_run._discovery.changes import tool_files_state as tool_files_state
    from xcsh_run._discovery.changes import wait_for_change as wait_for_change
    from xcsh_run._discovery.expectation import snippet as snippet
    from xcsh_run._discovery.finder import Candidate as Candidate
    from xcsh_run._discovery.finder import ToolSource as ToolSource
    from xcsh_run._discovery.finder import discover_custom_tool_paths as discover_custom_tool_paths
    from xcsh_run._discovery.finder import expand as expand
    from xcsh_run._discovery.finder import search_path as search_path
    from xcsh_run._discovery.finder import use_search_path as use_search_path
    from xcsh_run._discovery.finder import walk as walk
    from xcsh_run._discovery.schemas import ArgumentValidator as ArgumentValidator
    from xcsh_run._discovery.schemas import SchemaProblem as SchemaProblem
    from xcsh_run._discovery.schemas import check_details as check_details
    from xcsh_run._discovery.tool_envs import EnvError as EnvError
    from xcsh_run._discovery.tool_envs import ToolEnv as ToolEnv
    from xcsh_run._discovery.tool_envs import js_hint as js_hint
    from xcsh_run._discovery.tool_envs import readable_for_drop as readable_for_drop
    from xcsh_run._discovery.tool_envs import runtime_for as runtime_for
    from xcsh_run._discovery.tool_envs import show_builds_on_stderr as show_builds_on_stderr
    from xcsh_run._discovery.tool_envs import worker_command as worker_command

__all__ = [
    "ArgumentValidator",
    "BUILTIN_MODULE",
    "BUN_ENV",
    "BUN_VERSION",
    "BunError",
    "CachedLoad",
    "Candidate",
    "Catalog",
    "EnvError",
    "JsRuntime",
    "LAST_STDERR",
    "RESOLVE_TOOL",
    "LoadError",
    "ModuleCache",
    "Outcome",
    "SchemaProblem",
    "TYPEBOX_VERSION",
    "ZOD_VERSION",
    "ARKTYPE_VERSION",
    "ToolEnv",
    "ToolFilesState",
    "ToolInfo",
    "ToolSource",
    "check_details",
    "check_schemas",
    "default_dir",
    "default_prefix",
    "describe",
    "discover_custom_tool_paths",
    "expand",
    "fingerprint",
    "from_load",
    "install",
    "js_env",
    "js_hint",
    "last_line",
    "locate",
    "metadata_file",
    "missing",
    "read_tool_files_state",
    "readable_for_drop",
    "runtime_for",
    "show_builds_on_stderr",
    "snippet",
    "tool_files_state",
    "version",
    "wait_for_change",
    "search_path",
    "use_search_path",
    "walk",
    "worker_command",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "ArgumentValidator": "schemas",
    "BUILTIN_MODULE": "catalog",
    "BUN_ENV": "bun",
    "BUN_VERSION": "bun",
    "BunError": "bun",
    "CachedLoad": "cache",
    "Candidate": "finder",
    "Catalog": "catalog",
    "EnvError": "tool_envs",
    "JsRuntime": "bun",
    "LAST_STDERR": "catalog",
    "RESOLVE_TOOL": "catalog",
    "LoadError": "catalog",
    "ModuleCache": "cache",
    "Outcome": "catalog",
    "SchemaProblem": "schemas",
    "TYPEBOX_VERSION": "bun",
    "ZOD_VERSION": "bun",
    "ARKTYPE_VERSION": "bun",
    "ToolEnv": "tool_envs",
    "ToolFilesState": "changes",
    "ToolInfo": "catalog",
    "ToolSource": "finder",
    "check_details": "schemas",
    "check_schemas": "catalog",
    "default_dir": "cache",
    "default_prefix": "bun",
    "describe": "catalog",
    "discover_custom_tool_paths": "finder",
    "expand": "finder",
    "fingerprint": "cache",
    "from_load": "catalog",
    "install": "bun",
    "js_env": "bun",
    "js_hint": "tool_envs",
    "last_line": "catalog",
    "locate": "bun",
    "metadata_file": "catalog",
    "missing": "bun",
    "read_tool_files_state": "changes",
    "readable_for_drop": "tool_envs",
    "runtime_for": "tool_envs",
    "snippet": "expectation",
    "show_builds_on_stderr": "tool_envs",
    "tool_files_state": "changes",
    "version": "bun",
    "wait_for_change": "changes",
    "search_path": "finder",
    "use_search_path": "finder",
    "walk": "finder",
    "worker_command": "tool_envs",
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
