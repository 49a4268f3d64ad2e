"""What a CLI subprocess may leave behind: cgroups named after its pid, workdirs in its TMPDIR.

The autouse ``no_survivors`` fixture checks processes (every CLI and worker
carries the session's mark) and the test process's own cgroups; a CLI's
cgroups carry the CLI's pid instead, so CLI tests check them here.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")


def _hierarchies() -> list[Path]:
    # As in conftest.own_cgroup_dirs: the hybrid layout's v2 and limit
    # hierarchies, or the v2 mount itself when it is the only one.
    found = [CGROUP_FS / h for h in ("unified", "memory", "pids") if (CGROUP_FS / h).is_dir()]
    if (CGROUP_FS / "cgroup.controllers").exists():
        found.append(CGROUP_FS)
    return found


def cgroup_dirs(pids: Iterable[int]) -> list[str]:
    """The ``xcsh-run.<pid>.*`` cgroup directories of these host pids still present."""
    wanted = {str(pid) for pid in pids}
    found: set[str] = set()
    for base in _hierarchies():
        for path in base.glob("**/xcsh-run.*"):
            pid = path.name.removeprefix("xcsh-run.").split(".")[0]
            if pid in wanted:
                found.add(str(path))
    return sorted(found)


def remove_cgroups(paths: Iterable[str]) -> None:
    """Best-effort removal of a killed host's (empty) cgroups, deepest first, so they fail one test only."""
    for path in sorted(paths, key=len, reverse=True):
        try:
            for child in sorted(Path(path).glob("**/"), key=lambda p: len(str(p)), reverse=True):
                child.rmdir()
        except OSError:
            pass


def workdirs(tmpdir: Path) -> list[str]:
    """Worker workdirs (``xcsh-run-w*``) in a CLI's own TMPDIR."""
    return sorted(p.name for p in tmpdir.glob("xcsh-run-w*"))
