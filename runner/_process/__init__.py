"""One worker OS process: the only code that touches pids, fds, signals and cgroups.

Rules of the package:

1. **Every kill goes through the boundary** (``Boundary``: the worker's own
   cgroup, or its session where there is none), so a tool's grandchildren die
   with it; nothing above this package holds a pid.
2. **Teardown is bounded** (``teardown``): each step has a time limit, and a
   process that outlives them is killed, never waited for.
3. **Output is bounded** (``OutputTail``): what a worker prints is kept as a
   tail and a budget, never as much as it likes.
"""

from typing import TYPE_CHECKING, Any

# First, before any module of the package imports trio (rule 2 of ``xcsh_run``).
from xcsh_run import _startup  # noqa: F401

if TYPE_CHECKING:
    from xcsh_run._process.boundary import Boundary as Boundary
    from xcsh_run._process.boundary import CgroupRoot as CgroupRoot
    from xcsh_run._process.faults import fault_point as fault_point
    from xcsh_run._process.forkserver import ForkServer as ForkServer
    from xcsh_run._process.forkserver import forkserver_supported as forkserver_supported
    from xcsh_run._process.output import OutputTail as OutputTail
    from xcsh_run._process.supervised import SupervisedProcess as SupervisedProcess
    from xcsh_run._process.supervised import write_some as write_some
    from xcsh_run._process.teardown import TeardownStats as TeardownStats
    from xcsh_run._process.usage import HighWater as HighWater
    from xcsh_run._process.workdir import hand_over_workdir as hand_over_workdir
    from xcsh_run._process.workdir import make_workdir as make_workdir
    from xcsh_run._process.workdir import remove_workdir as remove_workdir
    from xcsh_run._process.workdir import sweep_stale_workdirs as sweep_stale_workdirs

__all__ = [
    "Boundary",
    "CgroupRoot",
    "ForkServer",
    "HighWater",
    "OutputTail",
    "SupervisedProcess",
    "TeardownStats",
    "fault_point",
    "forkserver_supported",
    "hand_over_workdir",
    "make_workdir",
    "remove_workdir",
    "sweep_stale_workdirs",
    "write_some",
]

# Each name is imported from its module on first use (PEP 562): importing one module of this
# package never loads the others, and a cold process pays only for what it touches.
_HOMES: dict[str, str] = {
    "Boundary": "boundary",
    "CgroupRoot": "boundary",
    "ForkServer": "forkserver",
    "HighWater": "usage",
    "OutputTail": "output",
    "SupervisedProcess": "supervised",
    "TeardownStats": "teardown",
    "fault_point": "faults",
    "forkserver_supported": "forkserver",
    "hand_over_workdir": "workdir",
    "make_workdir": "workdir",
    "remove_workdir": "workdir",
    "sweep_stale_workdirs": "workdir",
    "write_some": "supervised",
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
