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
