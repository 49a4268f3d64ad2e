"""A worker's private directory (its HOME and TMPDIR): made, removed, and swept after a dead host.

A workdir is named ``xcsh-run-w<host pid>-t<host start time>_<random>``, so
that a host that died without removing its workdirs (SIGKILL, OOM) is
recognised by the next one to start (:func:`sweep_stale_workdirs`). The pid
alone does not do: pids are recycled (``pid_max`` is 32768 on many machines,
and a container's host is the same pid at every restart), and a dead host
whose pid a live process had taken was never swept. The start time (clock
ticks since boot, ``/proc/<pid>/stat``) tells the two apart; a zombie host
counts as dead. Removal is built for trees a tool made
to be hard to remove (:func:`remove_workdir`). Nothing here raises: a workdir
left behind is logged by the caller, never a reason to fail a call.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import tempfile
import time
from pathlib import Path
from typing import Final

_WORKDIR_PREFIX: Final = "xcsh-run-w"


def _start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    # fields[0] is field 3 (state) of proc(5); starttime is field 22.
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def _own_prefix() -> str:
    me = os.getpid()
    start = _start_time(me)
    # Without /proc, the older name: never a start time that matches nobody.
    return f"{_WORKDIR_PREFIX}{me}-t{start}_" if start is not None else f"{_WORKDIR_PREFIX}{me}-"


def make_workdir() -> Path:
    """A private directory for one worker: ``home/`` and ``tmp/``, removed with the worker."""
    workdir = Path(tempfile.mkdtemp(prefix=_own_prefix()))
    (workdir / "home").mkdir()
    (workdir / "tmp").mkdir()
    return workdir


def hand_over_workdir(workdir: Path, uid: int, gid: int) -> None:
    """Give ``home/`` and ``tmp/`` to the uid a strict worker drops to, so that its HOME and TMPDIR work.

    The workdir itself stays ours (the sweep after a dead host removes only
    workdirs owned by the host's uid) and becomes searchable, not listable,
    by others. The host removes it all as root, whoever owns what inside.
    Raises OSError.
    """
    workdir.chmod(0o711)
    for sub in ("home", "tmp"):
        os.chown(workdir / sub, uid, gid, follow_symlinks=False)


def _workdir_host(name: str) -> tuple[int, int | None] | None:
    """The host pid and start time in a workdir's name (None: an older name without it), or None for any other name."""
    if not name.startswith(_WORKDIR_PREFIX):
        return None
    pid, sep, rest = name[len(_WORKDIR_PREFIX) :].partition("-")
    if not sep or not rest or not pid.isdigit() or not pid.isascii():
        return None
    start, sep, random = rest.partition("_")
    if sep and random and start[:1] == "t" and start[1:].isdigit() and start[1:].isascii():
        return int(pid), int(start[1:])
    return int(pid), None


def _host_alive(pid: int, start: int | None) -> bool:
    """Is the host that made a workdir alive? By pid and start time; by pid alone for an older name."""
    if start is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # alive, but another user's
            return True
        return True
    return _start_time(pid) == start


def sweep_stale_workdirs(tmpdir: str | os.PathLike[str] | None = None, *, timeout: float = 1.0) -> list[str]:
    """Remove the workdirs left in ``tmpdir`` (default: the temp dir) by hosts that are dead.

    Only directories (never symlinks) owned by this uid and named
    ``xcsh-run-w<pid>-t<start>_...`` whose host (that pid, started then) is
    not alive, or ``xcsh-run-w<pid>-...`` (an older name) with ``pid``
    neither this process nor a live one, are touched: a live host's workdirs are its own business. Costs one
    listdir when there is nothing to sweep. ``timeout`` bounds the whole
    sweep; what it leaves, a later sweep goes on with. Never raises;
    returns the paths it could not remove entirely (for the caller to log).
    """
    left: list[str] = []
    try:
        _sweep(os.fspath(tmpdir) if tmpdir is not None else tempfile.gettempdir(), timeout, left)
    except Exception:
        pass  # a sweep is a courtesy: it must never stop a runner from opening
    return left


def _sweep(base: str, timeout: float, left: list[str]) -> None:
    deadline = time.monotonic() + timeout
    me, uid = os.getpid(), os.geteuid()
    for name in os.listdir(base):
        host = _workdir_host(name)
        # Our own pid with another start time: a host before us that had our
        # pid (a container restarted), dead like any other.
        if host is None or (host[0] == me and host[1] is None) or _host_alive(*host):
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue
        # Claimed first, by an atomic rename to a name carrying our pid: of
        # hosts starting together, one sweeps it and the others skip it (our
        # pid is alive); should we die mid-sweep, the next host takes it over.
        claimed = os.path.join(base, f"{_own_prefix()}-swept-{secrets.token_hex(4)}")
        try:
            os.rename(path, claimed)
        except OSError:
            continue  # another host claimed it first
        if not remove_workdir(claimed, timeout=max(0.0, deadline - time.monotonic())):
            left.append(claimed)


def remove_workdir(path: str | os.PathLike[str], *, timeout: float = 10.0) -> bool:
    """Remove the directory tree ``path``; True when it is gone, False when some of it is left.

    Made for trees a tool built to be hard to remove, which ``shutil.rmtree``
    is not (on Python 3.11 it recurses, and raises RecursionError at about
    a thousand nested folders):

    - iterative, with one open directory fd at a time (descends by opening the
      child and closing the parent, climbs back with ``..``), so neither the
      depth of the tree nor the length of its paths matters;
    - never follows a symlink, nor crosses into another filesystem (a mount);
    - makes a directory a tool set to mode 0 (or read-only) removable again;
    - gives up at ``timeout`` seconds, leaving the rest.

    Never raises: a failure is a False, for the caller to log.
    """
    try:
        return _WorkdirRemoval(time.monotonic() + timeout).remove(os.path.abspath(os.fspath(path)))
    except Exception:
        return False


_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _WorkdirRemoval:
    """One removal: walks down a tree with a single directory fd, bounded by ``deadline``."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.complete = True  # False once anything had to be left behind

    def remove(self, path: str) -> bool:
        parent_path, name = os.path.split(path)
        if not name:
            return False  # "/": not a workdir
        try:
            parent = os.open(parent_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        try:
            try:
                top = self._open_dir(name, parent)
            except FileNotFoundError:
                return True
            except OSError as exc:
                if not _is_symlink_or_file(exc):
                    raise
                # A symlink (or a file) where the workdir was: remove the link, never its target.
                os.unlink(name, dir_fd=parent)
                return True
            if top is None:
                return False
            self._empty_tree(*top)
            if self.complete:
                try:
                    os.rmdir(name, dir_fd=parent)
                except FileNotFoundError:
                    pass  # a concurrent sweep removed it first
            return self.complete
        finally:
            os.close(parent)

    def _expired(self) -> bool:
        if time.monotonic() > self.deadline:
            self.complete = False
            return True
        return False

    def _open_dir(self, name: str, dir_fd: int, dev: int | None = None) -> tuple[int, os.stat_result] | None:
        """Open directory ``name`` in ``dir_fd``, never through a symlink, and make it ours to empty.

        None if it is on another filesystem than ``dev`` (a mount: what is
        mounted there is not the tool's) or its mode cannot be fixed; either
        leaves it in place.
        """
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except PermissionError:
            # No read permission (a tool's chmod 000). Fixed through an O_PATH
            # fd, which needs none and is never a symlink's target, so that
            # the chmod cannot land outside the tree.
            path_fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
            except OSError:
                self.complete = False
                return None
            finally:
                os.close(path_fd)
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        try:
            st = os.fstat(fd)
            if st.st_dev != (os.fstat(dir_fd).st_dev if dev is None else dev):
                self.complete = False
                os.close(fd)
                return None
            if st.st_mode & 0o700 != 0o700:
                # Unlinking in a directory needs write and search permission on it.
                os.fchmod(fd, 0o700)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def _scan(self, fd: int) -> list[str] | None:
        """Unlink every non-directory in ``fd``; return its subdirectories (None once the deadline passed)."""
        subdirs: list[str] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                if self._expired():
                    return None
                try:
                    if entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.name)
                    else:
                        os.unlink(entry.name, dir_fd=fd)
                except IsADirectoryError:  # became a directory since it was listed
                    subdirs.append(entry.name)
                except FileNotFoundError:
                    pass
                except OSError:
                    self.complete = False
        return subdirs

    def _empty_tree(self, top: int, top_st: os.stat_result) -> None:
        """Remove everything below the directory ``top`` (whose fd this closes)."""
        fd, here = top, (top_st.st_dev, top_st.st_ino)
        try:
            subdirs = self._scan(fd)
            if subdirs is None:
                return
            # One entry per level below ``top``, down to the current directory:
            # its name in its parent, and its parent's (st_dev, st_ino), to check
            # that ".." leads back where we came from.
            path: list[tuple[str, tuple[int, int]]] = []
            # Per level from ``top``: the subdirectories still to visit.
            pending: list[list[str]] = [subdirs]
            # Directories an rmdir found written to after their scan: rescanned once, then left.
            rescanned: set[tuple[tuple[int, int], str]] = set()
            while not self._expired():
                if pending[-1]:
                    name = pending[-1].pop()
                    try:
                        child = self._open_dir(name, fd, here[0])
                    except FileNotFoundError:
                        continue
                    except OSError as exc:
                        if not _is_symlink_or_file(exc):
                            raise
                        try:  # a symlink or a file since it was listed
                            os.unlink(name, dir_fd=fd)
                        except FileNotFoundError:
                            pass
                        continue
                    if child is None:
                        continue
                    os.close(fd)
                    path.append((name, here))
                    fd, here = child[0], (child[1].st_dev, child[1].st_ino)
                    subdirs = self._scan(fd)
                    if subdirs is None:
                        return
                    pending.append(subdirs)
                    continue
                if not path:
                    return  # back at the top, and it is empty
                name, identity = path.pop()
                pending.pop()
                parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = parent
                st = os.fstat(fd)
                here = (st.st_dev, st.st_ino)
                if here != identity:
                    # A directory of the tree was moved while we were below it:
                    # ".." is not where we came from, and nothing there is ours.
                    self.complete = False
                    return
                try:
                    os.rmdir(name, dir_fd=fd)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    key = (identity, name)
                    if exc.errno == errno.ENOTEMPTY and key not in rescanned:
                        rescanned.add(key)
                        pending[-1].append(name)
                    else:
                        self.complete = False
        finally:
            os.close(fd)


def _is_symlink_or_file(exc: OSError) -> bool:
    # O_NOFOLLOW on a symlink fails with ELOOP; O_DIRECTORY on anything but a directory with ENOTDIR.
    return exc.errno in (errno.ELOOP, errno.ENOTDIR)
