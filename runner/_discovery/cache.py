"""What each module defines, remembered between runs, so unchanged modules are not imported again.

An entry is keyed on the module's resolved path and is valid only while its
*fingerprint* matches: the content hash of the file (every ``.py`` file, for a
package folder; every source file and ``.json`` outside ``node_modules``, for
a JavaScript folder, with the Bun and JS worker that load it), the interpreter
version, the xcsh-run version, and how it is loaded (entry-point module name
and factory). Any change to the file, even one that keeps its size and mtime,
gives a new fingerprint. Sibling helper modules a tool imports are not part of
it: after editing only a helper, touch the tool or clear the cache
(``~/.cache/xcsh-run``).
A module's PEP 723 ``# /// script`` block is part of its content, and the
environment it selects is made from this interpreter (``xcsh_run._discovery.tool_envs``), so
the fingerprint also settles which environment the module's tools come from.

The cache is an optimisation and never a source of failure: a corrupt entry
or an unwritable directory is ignored with a warning, and the module is
loaded in a worker as if there were no cache.

A tool runs as the user and can replace any entry (``xcsh_run._safe_read``). An
entry is read only if it is a regular file, not a symlink, of at most
``ENTRY_MAX_BYTES``; anything else (a FIFO, a link to ``/dev/zero``, a huge
sparse file, a directory) is a miss with a warning, removed so that the load
writes the entry again. A tool source is fingerprinted only while it is a
regular file (a symlink to one is fine: a user's tool may be one) within
``SOURCE_MAX_BYTES``, and a module within ``MODULE_MAX_BYTES`` in all; past
either, the module has no fingerprint and is loaded in a worker every run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Final

import msgspec

from xcsh_run._discovery import bun as _bun
from xcsh_run._discovery.finder import Candidate
from xcsh_run._safe_read import SOURCE_MAX_BYTES, UnsafeFile, read_capped, remove_replaced
from xcsh_run.worker import protocol as p

# Part of every fingerprint: bumped when what an entry holds changes shape (2:
# tools gained output_schema, annotations and icons; 3: approval and ignored_fields,
# so that a cached tool never skips its approval), so that an entry written
# by an older xcsh-run is never read as a complete one.
FORMAT: Final = 3
_MAX_PACKAGE_FILES: Final = 2000
_JS_SOURCES: Final = frozenset({".ts", ".tsx", ".mts", ".cts", ".js", ".jsx", ".mjs", ".cjs", ".json"})
# An entry holds one load result, which reached the host as one frame, plus its errors: twice a frame is
# more than any entry this host writes, and small enough to read and decode.
ENTRY_MAX_BYTES: Final = 2 * p.DEFAULT_MAX_FRAME_BYTES
# Every file of one module together: a fingerprint hashes at most this much (about a second of sha256).
MODULE_MAX_BYTES: Final = 256 << 20


class CachedLoad(msgspec.Struct, frozen=True):
    """One module's remembered load: its tools and factory-entry errors, or its load error."""

    fingerprint: str
    result: p.LoadResult | None = None
    load_error: str | None = None
    schema_errors: dict[str, str] = {}


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xcsh-run"


def fingerprint(candidate: Candidate, version: str) -> str | None:
    """A digest of everything that decides what the module defines; None if unreadable."""
    h = hashlib.sha256()
    h.update(f"{FORMAT}\0{version}\0{sys.version}\0{sys.executable}\0".encode())
    h.update(f"{candidate.module}\0{candidate.sys_path}\0{candidate.factory}\0".encode())
    path = Path(candidate.resolved)
    js = candidate.kind == "js"
    if js:
        # Which Bun and which JS worker describe it (none: a load error that installing Bun must clear).
        runtime = _bun.locate()
        h.update(f"js\0{runtime.bun if runtime else ''}\0{runtime.main if runtime else ''}\0".encode())
        if runtime is not None:
            # The JS loader decides what a module defines (and its load errors' text): an edit to the
            # worker's sources in a checkout must not leave a stale entry (a release changes `version`).
            for source in sorted(Path(runtime.main).parent.glob("*.ts")):
                with contextlib.suppress(OSError):
                    st = source.stat()
                    h.update(f"{source.name}\0{st.st_mtime_ns}\0{st.st_size}\0".encode())
    try:
        if path.is_dir() and js:
            # Its own sources and package.json, as a package's .py files; not what npm installed.
            files = sorted(f for f in path.rglob("*") if f.suffix in _JS_SOURCES and "node_modules" not in f.parts)
            if len(files) > _MAX_PACKAGE_FILES:
                return None
        elif path.is_dir():
            files = sorted(f for f in path.rglob("*.py") if "__pycache__" not in f.parts)
            if len(files) > _MAX_PACKAGE_FILES:
                return None
        else:
            files = [path]
        budget = MODULE_MAX_BYTES
        for f in files:
            h.update(str(f.relative_to(path) if f != path else "").encode() + b"\0")
            data = read_capped(f, min(SOURCE_MAX_BYTES, budget), follow=True)
            budget -= len(data)
            h.update(data)
    except OSError:  # UnsafeFile too: a FIFO, a device or an oversized source is not fingerprinted
        return None
    return h.hexdigest()


class ModuleCache:
    """A directory of one small file per module. Never raises: problems become warnings."""

    def __init__(self, directory: Path, warnings: list[str]) -> None:
        self.directory = directory / "modules"
        self._warnings = warnings
        self._write_failed = False

    def _file(self, candidate: Candidate) -> Path:
        key = hashlib.sha256(f"{candidate.resolved}\0{candidate.module}".encode()).hexdigest()[:32]
        return self.directory / f"{key}.json"

    def get(self, candidate: Candidate, fp: str) -> CachedLoad | None:
        path = self._file(candidate)
        try:
            data = read_capped(path, ENTRY_MAX_BYTES)
        except FileNotFoundError:
            return None
        except UnsafeFile as exc:
            self._warnings.append(
                f"module cache: {path} is {exc.strerror}, which this host never writes; "
                "ignoring it, loading the module in a worker and writing the entry again"
            )
            self._remove(path)
            return None
        except OSError as exc:
            self._warnings.append(f"module cache: cannot read {path} ({exc.strerror}); loading without it")
            return None
        try:
            entry = msgspec.json.decode(data, type=CachedLoad)
        except msgspec.DecodeError:
            self._warnings.append(f"module cache: {path} is corrupt; ignoring it")
            return None
        return entry if entry.fingerprint == fp else None

    def _remove(self, path: Path) -> None:
        # Gone before the load that rewrites it: a rename cannot replace a directory, and an entry whose
        # load fails (not cached) must not be read again by the next run.
        try:
            remove_replaced(path)
        except OSError as exc:
            self._warnings.append(f"module cache: cannot remove {path} ({exc.strerror}); remove it by hand")

    def put(self, candidate: Candidate, entry: CachedLoad) -> None:
        if self._write_failed:
            return
        path = self._file(candidate)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # Write-then-rename: a concurrent reader sees the old entry or the
            # new one, never half of one.
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(msgspec.json.encode(entry))
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as exc:
            self._write_failed = True
            self._warnings.append(
                f"module cache: cannot write to {self.directory} ({exc.strerror}); "
                "every run will import the modules again"
            )
