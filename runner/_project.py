"""Where the project is: the folder whose ``.xcsh/``, ``.claude/`` and ``.codex/`` tools and config are read.

Both discovery (which tool folders to walk) and the configuration (which
project config file may grant what) ask this one question, the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple


class ProjectRoot(NamedTuple):
    """The project root (see :func:`locate_project`) and whether a marker (``.xcsh/`` or ``.git``) found it."""

    path: Path
    marked: bool


def find_project_root(cwd: str | os.PathLike[str], home: str | os.PathLike[str]) -> Path | None:
    """The nearest folder from ``cwd`` up with a ``.xcsh/`` folder, else with ``.git``; None if neither.

    The walk stops below ``home`` (HOME's own ``.xcsh`` holds the user's
    tools and plugin registry, never a project's, and HOME is not a project
    even with a ``.git`` of dotfiles), at the filesystem root, and, as git's
    does, where the parent is on another filesystem (a mount point).
    """
    home_id: tuple[int, int] | None
    try:
        home_stat = os.stat(home)
        home_id = (home_stat.st_dev, home_stat.st_ino)
    except OSError:
        home_id = None  # no HOME on disk: nothing to stop below
    folder = os.path.abspath(cwd)
    try:
        here = os.stat(folder)
    except OSError:
        return None
    git = None
    while (here.st_dev, here.st_ino) != home_id:
        if os.path.isdir(os.path.join(folder, ".xcsh")):
            return Path(folder)
        if git is None and os.path.exists(os.path.join(folder, ".git")):  # a file in worktrees and submodules
            git = folder
        parent = os.path.dirname(folder)
        try:
            above = os.stat(parent)
        except OSError:
            break
        if parent == folder or above.st_dev != here.st_dev:
            break
        folder, here = parent, above
    return Path(git) if git is not None else None


def locate_project(cwd: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> ProjectRoot:
    """Where the project's ``.xcsh/tools``, ``.claude/tools`` and ``.codex/tools`` are read from.

    :func:`find_project_root` from ``cwd`` (``home`` defaults to ``$HOME``), else ``cwd`` itself.
    """
    found = find_project_root(cwd, home if home is not None else os.path.expanduser("~"))
    return ProjectRoot(found, True) if found is not None else ProjectRoot(Path(os.path.abspath(cwd)), False)


def project_root(cwd: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> str:
    """The project root as a string (see :func:`locate_project`)."""
    return str(locate_project(cwd, home).path)
