"""How hard the load, sweep and fault tests push: short in ``make test``, long in ``make stress``.

``make stress`` sets ``XCSH_RUN_STRESS=1``; the same tests then run their long
versions (more rounds, more processes, every step instead of a stride).
"""

from __future__ import annotations

import os

STRESS = os.environ.get("XCSH_RUN_STRESS") == "1"


def scaled(short: int, long: int) -> int:
    """``long`` under ``make stress``, else ``short``."""
    return long if STRESS else short
