"""The keyword options of :func:`open_runner`, as one type the other openers pass on: :class:`RunnerOptions`.

``open_blocking_runner``, ``open_asyncio_runner`` and ``run_tool_sync`` take
``**options: Unpack[RunnerOptions]``: a type checker and an IDE know every
option and its type without a third copy of the parameter list, and
:func:`check_options` turns a misspelt one into the ``TypeError`` Python
would raise for a function of its own, with the name it was probably meant
to be. ``tests/structure/test_runner_parity.py`` keeps the keys and types
equal to ``open_runner``'s keyword parameters.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from typing import TypedDict

from xcsh_run._config import RunnerConfig
from xcsh_run._sandbox import SandboxPolicy


class RunnerOptions(TypedDict, total=False):
    """Every keyword option of `open_runner`, each optional: `RunnerConfig` documents them all.

    For a function of the program's own that passes options on to an opener,
    typed as the opener is:

    Example:
        ```python
        from typing import Unpack
        from xcsh_run import RunnerOptions, open_blocking_runner

        def tool_runner(**options: Unpack[RunnerOptions]):
            return open_blocking_runner(["tools/"], grace=1.0, **options)
        ```
    """

    cwd: str | os.PathLike[str] | None
    builtin_tool_names: Iterable[str]
    default_timeout: float
    grace: float
    load_timeout: float
    load_wall_timeout: float | None
    max_frame_bytes: int
    env: Mapping[str, str] | None
    discover_sources: bool | None
    cache: bool
    cache_dir: str | os.PathLike[str] | None
    home: str | os.PathLike[str] | None
    sandbox: SandboxPolicy | None
    tool_policies: Mapping[str, SandboxPolicy] | None
    max_workers: int | None
    queue_timeout: float | None
    max_calls_per_worker: int | None
    idle_timeout: float | None
    max_worker_rss_mb: int | None
    spare_workers: int
    wanted_tool: str | None
    forkserver: bool
    approve: bool
    config: RunnerConfig | None


def check_options(opener: str, options: Mapping[str, object]) -> None:
    """Raise ``TypeError`` for a keyword of ``options`` that is not an option, as ``opener()`` would name it.

    The message is Python's own for an unexpected keyword argument, and then
    the option it is closest to, if one is close (``did you mean 'default_timeout'?``).
    """
    known = RunnerOptions.__annotations__
    for name in options:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1)
        hint = (
            f"; did you mean {close[0]!r}?"
            if close
            else f"; its options are those of open_runner(): {', '.join(known)}"
        )
        raise TypeError(f"{opener}() got an unexpected keyword argument {name!r}{hint}")
