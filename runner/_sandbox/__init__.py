"""The host's half of the sandbox: the policy, what this machine can enforce, and the grants.

The worker applies the sandbox to itself (``xcsh_run.worker._sandbox``); this
package decides what it is told to apply. Rules:

1. **A policy is a value** (``SandboxPolicy``, frozen): the same one gives the
   same worker, and it keys the pool's idle lists.
2. **What cannot be enforced is said, never assumed** (``check``, ``Probe``):
   a level this machine cannot give is refused (``SandboxUnavailable``) or
   reported as weakened, by name.
3. **Grants come from the user, never from a tool** (``grants``): a tool's
   ``requires`` is shown, and granted only by a config file the user trusts.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run._sandbox.grants import config_paths as config_paths
    from xcsh_run._sandbox.grants import granted_policies as granted_policies
    from xcsh_run._sandbox.grants import reaches as reaches
    from xcsh_run._sandbox.grants import ungranted_note as ungranted_note
    from xcsh_run._sandbox.grants import withheld_note as withheld_note
    from xcsh_run._sandbox.host_guard import protect_host as protect_host
    from xcsh_run._sandbox.policy import DROPPED_ENV as DROPPED_ENV
    from xcsh_run._sandbox.policy import HOST_ONLY_ENV as HOST_ONLY_ENV
    from xcsh_run._sandbox.policy import LEVELS as LEVELS
    from xcsh_run._sandbox.policy import MiB as MiB
    from xcsh_run._sandbox.policy import Probe as Probe
    from xcsh_run._sandbox.policy import SandboxPolicy as SandboxPolicy
    from xcsh_run._sandbox.policy import SandboxUnavailable as SandboxUnavailable
    from xcsh_run._sandbox.policy import build_env as build_env
    from xcsh_run._sandbox.policy import check as check
    from xcsh_run._sandbox.policy import dropped_env as dropped_env
    from xcsh_run._sandbox.policy import for_javascript as for_javascript
    from xcsh_run._sandbox.policy import probe as probe
    from xcsh_run._sandbox.policy import weakened as weakened
    from xcsh_run._sandbox.policy import worker_config as worker_config
    from xcsh_run._sandbox.strict_paths import WORKER_SIDE_MODULES as WORKER_SIDE_MODULES
    from xcsh_run._sandbox.strict_paths import project_folder as project_folder
    from xcsh_run._sandbox.strict_paths import tool_node_modules as tool_node_modules

__all__ = [
    "WORKER_SIDE_MODULES",
    "DROPPED_ENV",
    "HOST_ONLY_ENV",
    "LEVELS",
    "MiB",
    "Probe",
    "SandboxPolicy",
    "SandboxUnavailable",
    "build_env",
    "check",
    "config_paths",
    "dropped_env",
    "for_javascript",
    "granted_policies",
    "probe",
    "project_folder",
    "tool_node_modules",
    "protect_host",
    "reaches",
    "ungranted_note",
    "weakened",
    "withheld_note",
    "worker_config",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "WORKER_SIDE_MODULES": "strict_paths",
    "DROPPED_ENV": "policy",
    "HOST_ONLY_ENV": "policy",
    "LEVELS": "policy",
    "MiB": "policy",
    "Probe": "policy",
    "SandboxPolicy": "policy",
    "SandboxUnavailable": "policy",
    "build_env": "policy",
    "config_paths": "grants",
    "check": "policy",
    "dropped_env": "policy",
    "for_javascript": "policy",
    "granted_policies": "grants",
    "probe": "policy",
    "project_folder": "strict_paths",
    "tool_node_modules": "strict_paths",
    "protect_host": "host_guard",
    "reaches": "grants",
    "ungranted_note": "grants",
    "weakened": "policy",
    "withheld_note": "grants",
    "worker_config": "policy",
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
