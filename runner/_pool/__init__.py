"""Workers as the host sees them: the pool, the protocol link over each process, and the loader.

Rules of the package:

1. **One route to a worker** (``Loader``): discovery, calls and renders get a
   worker with its module loaded through it.
2. **The pool decides, the factory starts** (``WorkerPool``, ``WorkerFactory``):
   tests put fake workers behind the factory and run the pool's rules on
   trio's mock clock.
3. **The seam is ``PoolWorker``** (``interface``): what the pool and the calls
   may use of a worker; ``WorkerLink`` (``link``) is the real one.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run._pool.background import settle_leftovers as settle_leftovers
    from xcsh_run._pool.factory import ProcessFactory as ProcessFactory
    from xcsh_run._pool.housekeeping import Housekeeping as Housekeeping
    from xcsh_run._pool.interface import InFlight as InFlight
    from xcsh_run._pool.interface import PoolWorker as PoolWorker
    from xcsh_run._pool.loader import Loader as Loader
    from xcsh_run._pool.loader import LoadFailed as LoadFailed
    from xcsh_run._pool.worker_pool import PoolRules as PoolRules
    from xcsh_run._pool.worker_pool import Slot as Slot
    from xcsh_run._pool.worker_pool import WorkerFactory as WorkerFactory
    from xcsh_run._pool.worker_pool import WorkerPool as WorkerPool

__all__ = [
    "Housekeeping",
    "InFlight",
    "LoadFailed",
    "Loader",
    "PoolRules",
    "PoolWorker",
    "ProcessFactory",
    "Slot",
    "WorkerFactory",
    "WorkerPool",
    "settle_leftovers",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "Housekeeping": "housekeeping",
    "InFlight": "interface",
    "LoadFailed": "loader",
    "Loader": "loader",
    "PoolRules": "worker_pool",
    "PoolWorker": "interface",
    "ProcessFactory": "factory",
    "Slot": "worker_pool",
    "WorkerFactory": "worker_pool",
    "WorkerPool": "worker_pool",
    "settle_leftovers": "background",
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
