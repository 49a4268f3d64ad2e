"""Where xcsh-run runs: Linux only, said once, at start, in one sentence.

The sandbox (namespaces, seccomp, Landlock), the kill boundary (cgroups v2)
and the worker's lifeline (``PR_SET_PDEATHSIG``, pidfds) are Linux's, and
nothing else offers what they guarantee. So on any other ``sys.platform`` the
CLI (``xcsh_run._cli.main``, before it imports a command) and ``open_runner``
(before it probes anything) stop with `unsupported_platform`'s sentence,
instead of failing somewhere inside with a traceback. What is read here is
``sys.platform`` at the time of the call, so a test can stand in for another
system by setting it.
"""

from __future__ import annotations

import sys
from typing import Final

from xcsh_run._errors import UnsupportedPlatform

_NAMES: Final = {"darwin": "macOS", "win32": "Windows", "cygwin": "Windows (Cygwin)"}


def unsupported_platform() -> str | None:
    """Why xcsh-run cannot run on this system, as one sentence; None on Linux."""
    platform = sys.platform
    if platform == "linux":
        return None
    name = _NAMES.get(platform, platform)
    return (
        f"xcsh-run runs on Linux only (its sandbox and kill boundary are Linux's namespaces, seccomp, Landlock "
        f"and cgroups), and this is {name} (sys.platform {platform!r}): run it inside a Linux VM or container "
        "(on Windows, WSL2) and point your MCP client at it there, as docs/install.md shows"
    )


def require_linux() -> None:
    """Raise `UnsupportedPlatform` with the sentence of `unsupported_platform` unless this is Linux."""
    problem = unsupported_platform()
    if problem is not None:
        raise UnsupportedPlatform(problem)
