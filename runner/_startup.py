"""What importing the host does to a fresh process, kept to what it needs.

trio, when first imported, asks ``ctypes.util.find_library("pthread")`` for
the function that names its threads. On Linux that runs ``/sbin/ldconfig -p``
in a subprocess (and, if that finds nothing, ``gcc`` or ``ld``): a fork and
an exec on every cold ``xcsh-run``, even for a ``list`` that otherwise starts
no process at all. :func:`import_trio` answers that one question itself, for
the duration of trio's import, by asking the dynamic loader directly.

Every host package's face imports this module before anything else (as does
``xcsh_run``'s own loader), so trio is imported here, once, whichever part of
the package a program imports first. The worker never imports it.

It also gives the ``xcsh_run`` logger its :data:`QUIET` handler, as the
logging HOWTO asks of a library: a program that configured no logging sees
none of the host's records (a call that timed out is its result, not a line
on stderr), and one that did (``logging.basicConfig()``) sees them all.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Final

# Where glibc has pthread_setname_np: its own stub library before 2.34 and after
# (the stub depends on libc.so.6, where the function now lives).
_PTHREAD: Final = "libpthread.so.0"


def _pthread_without_ldconfig(original: Callable[[str], str | None]) -> Callable[[str], str | None]:
    def find_library(name: str) -> str | None:
        if name != "pthread" or not sys.platform.startswith("linux"):
            return original(name)
        import ctypes

        try:
            ctypes.CDLL(_PTHREAD)  # dlopen searches as find_library's answer would be searched
        except OSError:
            # musl: no such library; trio then tries libc.so itself, as it
            # does when find_library finds nothing.
            return None
        return _PTHREAD

    return find_library


def import_trio() -> None:
    """Import trio, without the ``ldconfig`` subprocess its import would start, and without collecting.

    The import allocates a few hundred thousand objects (trio, attrs, ssl),
    none of them garbage, and the cyclic collector would walk them many times
    over: pausing it saves a tenth of the import's CPU time.
    """
    if "trio" in sys.modules:
        return
    import ctypes.util
    import gc

    original = ctypes.util.find_library
    collecting = gc.isenabled()
    ctypes.util.find_library = _pthread_without_ldconfig(original)  # type: ignore[assignment]
    gc.disable()
    try:
        import trio  # noqa: F401
    finally:
        ctypes.util.find_library = original
        if collecting:
            gc.enable()


import_trio()


QUIET: Final = logging.NullHandler()
"""On the ``xcsh_run`` logger, so that logging's last resort (WARNING and up to stderr) never speaks for it.

An application that wants that last resort back (the CLI does) removes it.
"""
logging.getLogger("xcsh_run").addHandler(QUIET)
