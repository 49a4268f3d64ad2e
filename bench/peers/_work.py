"""The functions the process-pool peers run in their workers (importable by reference, for pickling)."""

from __future__ import annotations

import functools

BIG_BYTES = 10 * 2**20  # the 10 MiB result


def echo(x: int) -> dict[str, int]:
    return {"x": x}


@functools.cache
def _big() -> str:
    return "x" * BIG_BYTES


def big() -> str:
    return _big()


def busy() -> None:
    while True:
        pass
