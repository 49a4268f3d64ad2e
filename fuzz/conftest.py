"""Hypothesis settings profiles for the fuzz suite.

Pick one with ``HYPOTHESIS_PROFILE`` (default ``dev``):

* ``dev``  -- a few hundred examples per property; the whole suite runs in seconds.
* ``ci``   -- more examples, still a short run.
* ``long`` -- a soak run for hunting rare bugs by hand.

``deadline`` is off everywhere (timing on shared CI machines is noise) and so is
``derandomize``: every run explores new inputs, and failures are replayed from
the example database and reported with ``@reproduce_failure``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {
    "deadline": None,
    "derandomize": False,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}

settings.register_profile("dev", max_examples=200, **_COMMON)
settings.register_profile("ci", max_examples=1000, print_blob=True, **_COMMON)
settings.register_profile("long", max_examples=20000, print_blob=True, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# --- the stateful runner campaign (fuzz/test_runner_stateful.py) ----------------------
#
# Its examples drive real worker processes: each one opens a runner and makes
# dozens of calls, some of which start, crash, time out or kill workers. It gets
# its own, much smaller, budget per profile; `dev` keeps it well under a minute.
STATEFUL_BUDGETS = {
    "dev": {"max_examples": 10, "stateful_step_count": 15},
    "ci": {"max_examples": 25, "stateful_step_count": 25},
    "long": {"max_examples": 300, "stateful_step_count": 50},
}
# pytest-timeout seconds for it: a passing dev run takes ~10 s, but shrinking a
# failure replays whole runs and must be allowed to finish its report. 0: none.
STATEFUL_TIMEOUTS = {"dev": 600, "ci": 1800, "long": 0}


def _profile() -> str:
    name = os.environ.get("HYPOTHESIS_PROFILE", "dev")
    return name if name in STATEFUL_BUDGETS else "dev"


def stateful_settings() -> settings:
    """The current profile, with the stateful campaign's budget for it."""
    return settings(settings.default, **STATEFUL_BUDGETS[_profile()])


def stateful_timeout() -> int:
    return STATEFUL_TIMEOUTS[_profile()]


# Every process a fuzz test starts carries the test session's marker (set when
# tests.conftest is imported), and no test may leave one behind.
from tests.conftest import marked_processes as marked_processes  # noqa: E402
from tests.conftest import no_survivors as no_survivors  # noqa: E402
