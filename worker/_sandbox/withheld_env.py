"""The variables the sandbox did not pass: a tool that reads one is told which, and how to pass it.

The host gives a sandboxed worker an allow-list of its environment (see
``xcsh_run._sandbox.policy.build_env``) and the names (never the values) of what it
left out. ``os.environ`` is replaced by a mapping that behaves exactly like it
(same data, same KeyError for a missing name, same ``get`` default) but notes
every lookup of a left-out name, so that a call or a load that then fails can
say why: ``GITHUB_TOKEN`` was read, and was not passed.

Only lookups through ``os.environ`` (``os.environ[...]``, ``.get``, ``in``,
``os.getenv``) are seen: a C extension's ``getenv(3)`` is not.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import ClassVar, Final

_Environ = type(os.environ)


class _WatchedEnviron(_Environ):  # type: ignore[misc,valid-type]  # os._Environ is private and untyped
    """``os.environ``, noting lookups of the names in ``_dropped`` that found nothing."""

    _dropped: ClassVar[frozenset[str]] = frozenset()
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _reads: ClassVar[set[str]] = set()

    def __getitem__(self, key: str) -> str:
        try:
            value: str = super().__getitem__(key)
        except KeyError:
            if key in self._dropped:
                with self._lock:
                    self._reads.add(key)
            raise
        return value


DROPPED_ENV: Final = "XCSH_RUN_DROPPED_ENV"  # set by the host (xcsh_run._sandbox.policy.DROPPED_ENV)


def watch_dropped() -> None:
    """Take the host's list of left-out names out of the environment, and watch lookups of them."""
    names = os.environ.pop(DROPPED_ENV, "")
    watch(name for name in names.split(",") if name)


def watch(dropped: Iterable[str]) -> None:
    """Replace ``os.environ`` by the watching mapping (before any tool code runs)."""
    names = frozenset(dropped)
    if not names or isinstance(os.environ, _WatchedEnviron):
        return
    watched = _WatchedEnviron.__new__(_WatchedEnviron)
    watched.__dict__.update(os.environ.__dict__)  # the same backing dict and codecs: one environment
    _WatchedEnviron._dropped = names  # one environment per process: class state is that state
    # Not a new environment (B003's worry): the same data, seen through a mapping that notes lookups.
    os.environ = watched  # noqa: B003


def take_reads() -> list[str]:
    """The left-out names read since the last call, sorted; forgets them."""
    environ = os.environ
    if not isinstance(environ, _WatchedEnviron):
        return []
    with _WatchedEnviron._lock:
        reads = sorted(_WatchedEnviron._reads)
        _WatchedEnviron._reads.clear()
    return reads


def hint(names: list[str]) -> str:
    """A sentence for an error message: what was read, and how to pass it."""
    listed = ", ".join(names)
    flags = " ".join(f"--pass-env {name}" for name in names)
    allowed = ", ".join(repr(name) for name in names)
    return (
        f" [the tool read the environment variable{'s' if len(names) > 1 else ''} {listed}, which the sandbox "
        f"does not pass to tools; pass {'them' if len(names) > 1 else 'it'} with `{flags}` "
        f"(embedding: SandboxPolicy(env_allow=({allowed},)))]"
    )
