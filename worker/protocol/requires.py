"""What a tool declares it needs from a ``strict`` sandbox: programs, paths, network.

Declaring grants nothing: ``xcsh-run describe`` and ``list`` show the needs,
a call whose needs the policy does not grant is run with a warning naming the
flags, and the user grants them (``--allow-exec``, ``--allow-read``,
``--allow-write``, ``--allow-connect``, or a config file).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

_NETWORK = re.compile(r"tcp:(\d{1,5})")


class Requires(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """A tool's needs under ``strict``; ``CustomTool(requires=...)`` takes this or a dict of the same keys.

    Attributes:
        programs: programs it runs, by name on PATH or absolute path (``--allow-exec``).
        read: paths it reads outside its folder and the project (``--allow-read``).
        write: paths it writes outside its private HOME and TMPDIR (``--allow-write``).
        network: ``"tcp:PORT"`` for each TCP port it connects to (``--allow-connect PORT``).

    A dict may also nest the paths as ``{"paths": {"read": [...], "write": [...]}}``.
    """

    programs: tuple[str, ...] = ()
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    network: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for field in ("programs", "read", "write"):
            if any(not isinstance(item, str) or not item for item in getattr(self, field)):
                raise ValueError(f"requires {field}: every entry must be a non-empty string")
        for entry in self.network:
            match = _NETWORK.fullmatch(entry) if isinstance(entry, str) else None
            if match is None or not 0 < int(match.group(1)) < 65536:
                raise ValueError(f"requires network: {entry!r} is not 'tcp:PORT' with a port from 1 to 65535")

    def ports(self) -> list[int]:
        """The TCP ports in ``network``."""
        return [int(entry.split(":", 1)[1]) for entry in self.network]


def coerce(value: object, tool: str) -> Requires:
    """``value`` (a Requires, or a dict of its keys) checked; raises ValueError naming the tool."""
    if isinstance(value, Requires):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"tool {tool!r}: requires must be a Requires or a dict, got {type(value).__name__}")
    data: dict[str, Any] = dict(value)
    paths = data.pop("paths", None)
    if isinstance(paths, Mapping):
        for key, entries in paths.items():
            data[key] = [*data.get(key, ()), *entries] if isinstance(entries, list | tuple) else entries
    elif paths is not None:
        raise ValueError(f"tool {tool!r}: requires paths must be a dict with 'read' and 'write' lists")
    for key, entries in data.items():
        if isinstance(entries, str):
            raise ValueError(f"tool {tool!r}: requires {key} must be a list of strings, got the string {entries!r}")
    try:
        return msgspec.convert(data, Requires)
    except (msgspec.ValidationError, ValueError) as exc:
        raise ValueError(
            f"tool {tool!r}: requires: {exc} (keys: programs, read, write, network, or paths.read and paths.write)"
        ) from None
