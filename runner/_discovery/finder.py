"""Finding tool modules on disk, without importing any of them.

This module only lists candidate modules and where they came from. Importing
a module and calling its factory always happen in a worker (see ``_host``).

Sources, in precedence order (SPEC §3):

1. native: ``<root>/.xcsh/tools``, then ``~/.xcsh/agent/tools``
2. Claude: ``~/.claude/tools``, then ``<root>/.claude/tools``
3. Claude marketplace plugins: ``<installPath>/tools`` of each enabled plugin,
   from the project registry first, then ``~/.claude/plugins/installed_plugins.json``
   with entries replaced per plugin id by ``~/.xcsh/plugins/installed_plugins.json``
4. Codex: ``~/.codex/tools``, then ``<root>/.codex/tools``
5. installed plugin packages: entry points in the group ``xcsh.tools``, in the
   host's environment and in the plugin prefix ``~/.xcsh/plugins``
6. oh-my-pi: ``<root>/.omp/tools``, then ``~/.omp/agent/tools``
7. pi-mono: ``<root>/.pi/tools``, then ``~/.pi/agent/tools``
8. configured paths (CLI ``--tools``, API ``tool_paths``), relative to ``cwd``

Sources 6 and 7 come after the original design's own (1-5), so a tool a user
already has there keeps its name; each searches its project folder before its
user folder, as oh-my-pi and pi-mono do, and takes what they take there: a
``.ts`` file, or a folder with an ``index.ts``.

``<root>`` is the project root (:func:`project_root`): the nearest folder
from ``cwd`` up with ``.xcsh/``, else with ``.git``, else ``cwd`` itself, the
way git and uv find theirs.

Rules:

- Candidates are ``*.py`` files and package folders (Python), and ``*.ts``,
  ``*.js`` and ``*.mjs`` files and folders with a ``package.json`` or an
  ``index.ts`` (JavaScript, run by Bun: ``xcsh_run._discovery.bun``); a folder with an
  ``__init__.py`` is Python whatever else it holds. Hidden and ``_private``
  entries, ``node_modules`` and ``.d.ts`` files are skipped. ``.md`` and
  ``.json`` files are metadata: they are never candidates, so they can never
  hide a module of the same name. In one folder, a Python module comes before
  a JavaScript one of the same name (which it shadows in sources 1-4, 6 and 7), so
  adding a ``.ts`` file never hides a Python tool; otherwise by file name.
- Within sources 1-4, 6 and 7, a module whose name (file stem) was already found by a
  higher-precedence place is *shadowed*: not loaded, and reported as such.
- One file reached twice (symlinks resolved) is listed once, at its first place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from xcsh_run._discovery.bun import JS_SUFFIXES, is_js_folder, is_js_module, module_stem
from xcsh_run._project import ProjectRoot, locate_project
from xcsh_run._safe_read import METADATA_MAX_BYTES, UnsafeFile, read_capped, remove_replaced, write_replacing

ENTRY_POINT_GROUP: Final = "xcsh.tools"


class ToolSource(msgspec.Struct, frozen=True):
    """Where a candidate module was found.

    Attributes:
        provider: ``native``, ``claude``, ``claude-plugins``, ``codex``, ``plugin``, ``omp``, ``pi`` or ``config``.
        provider_name: a human name (for a marketplace plugin, its id).
        level: ``user`` or ``project``.
    """

    provider: str
    provider_name: str
    level: str


class Candidate(msgspec.Struct, frozen=True):
    """A module to load: its path as found, its resolved path, and its source.

    For an entry-point plugin, ``module`` is the dotted module name to import,
    ``sys_path`` the folder to import it from, and ``factory`` the attribute to call.
    """

    path: str
    resolved: str
    source: ToolSource
    module: str | None = None
    sys_path: str | None = None
    factory: str = "factory"

    @property
    def name(self) -> str:
        """The module's name, as used for shadowing: the file or folder stem."""
        base = os.path.basename(self.resolved.rstrip(os.sep))
        if base == "__init__.py":
            base = os.path.basename(os.path.dirname(self.resolved))
        return module_stem(base)

    @property
    def kind(self) -> str:
        """``python`` or ``js`` (run by Bun): how its worker is started."""
        return "js" if self.module is None and is_js_module(self.resolved) else "python"


class Shadowed(msgspec.Struct, frozen=True):
    """A module not loaded because a higher-precedence place has one of the same name."""

    path: str
    source: ToolSource
    shadowed_by: str


class Discovery(msgspec.Struct, frozen=True):
    """What discovery found: candidates in precedence order, shadowed modules, warnings."""

    candidates: list[Candidate]
    shadowed: list[Shadowed]
    warnings: list[str]


def _is_candidate(entry: Path) -> bool:
    name = entry.name
    if name.startswith((".", "_")) or name == "node_modules":
        return False
    if entry.is_dir():
        return (entry / "__init__.py").is_file() or is_js_folder(entry)
    if name.endswith(".d.ts"):
        return False  # type declarations: no code
    return name.endswith((".py", *JS_SUFFIXES)) and entry.is_file()


def module_folder(path: Path) -> bool:
    """Is this folder a module itself (a Python package, or a JS folder), rather than a folder of modules?"""
    return (path / "__init__.py").is_file() or is_js_folder(path)


def modules_in(folder: Path) -> list[Path]:
    """Candidate modules directly inside ``folder``, sorted by name; a Python module before a JS one of its name."""
    try:
        entries = sorted(folder.iterdir(), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    found = [e for e in entries if _is_candidate(e)]
    python = {module_stem(e.name) for e in found if not is_js_module(str(e))}
    late = [e for e in found if module_stem(e.name) in python and is_js_module(str(e))]
    if not late:
        return found
    ordered = [e for e in found if e not in late]
    for entry in late:  # right after the last Python module of its name, so precedence stays by name otherwise
        stem = module_stem(entry.name)
        at = max(i for i, e in enumerate(ordered) if module_stem(e.name) == stem)
        ordered.insert(at + 1, entry)
    return ordered


def expand(path: str, cwd: str, home: str | None = None) -> Path:
    """Resolve a configured path: ``~`` expanded, relative to ``cwd``."""
    if home is not None and (path == "~" or path.startswith("~/")):
        path = home + path[1:]
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else Path(cwd) / p


# --- Claude marketplace registries ------------------------------------------------


def _read_registry(path: Path, warnings: list[str]) -> dict[str, list[dict[str, Any]]]:
    try:
        data = json.loads(read_capped(path, METADATA_MAX_BYTES, follow=True).decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        warnings.append(f"{path}: unreadable plugin registry ({exc}); its plugins are skipped")
        return {}
    plugins = data.get("plugins") if isinstance(data, dict) else None
    if not isinstance(plugins, dict):
        warnings.append(f'{path}: plugin registry has no "plugins" object; its plugins are skipped')
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for plugin_id, entries in plugins.items():
        if "@" not in plugin_id:
            warnings.append(f"{path}: plugin id {plugin_id!r} is not <plugin>@<marketplace>; skipped")
            continue
        if isinstance(entries, dict):
            entries = [entries]
        if not isinstance(entries, list):
            warnings.append(f"{path}: plugin {plugin_id!r} has no list of installs; skipped")
            continue
        out[plugin_id] = [e for e in entries if isinstance(e, dict)]
    return out


def plugin_roots(project: Path | None, home: Path, warnings: list[str]) -> list[tuple[str, Path, str]]:
    """``(plugin id, install path, level)`` of every enabled marketplace plugin, in precedence order.

    ``project`` is the root a marker found (None: no project registry).
    """
    roots: list[tuple[str, Path, str]] = []
    seen_ids: set[str] = set()

    def add(registry: dict[str, list[dict[str, Any]]], level: str | None, where: Path) -> None:
        for plugin_id, entries in registry.items():
            if plugin_id in seen_ids:
                continue  # an earlier registry (the project's) has this plugin
            seen_ids.add(plugin_id)
            paths: set[str] = set()
            for entry in entries:
                if entry.get("enabled") is False:
                    continue
                install = entry.get("installPath")
                if not isinstance(install, str) or not install:
                    warnings.append(f"{where}: plugin {plugin_id!r} has an install without installPath; skipped")
                    continue
                if install in paths:
                    continue
                paths.add(install)
                scope = level or ("project" if entry.get("scope") == "project" else "user")
                roots.append((plugin_id, Path(install), scope))

    if project is not None:
        registry = project / ".xcsh" / "plugins" / "installed_plugins.json"
        add(_read_registry(registry, warnings), "project", registry)
    claude = home / ".claude" / "plugins" / "installed_plugins.json"
    ours = home / ".xcsh" / "plugins" / "installed_plugins.json"
    # Ours is authoritative: it replaces Claude's entries plugin by plugin.
    merged = {**_read_registry(claude, warnings), **_read_registry(ours, warnings)}
    add(merged, None, ours)
    return roots


# --- entry-point plugins -------------------------------------------------------------


def plugin_site_dirs(home: Path) -> list[Path]:
    """Where ``pip install --target ~/.xcsh/plugins`` (or ``--prefix``) puts packages."""
    prefix = home / ".xcsh" / "plugins"
    dirs = [prefix]
    dirs += sorted(prefix.glob("lib/python3*/site-packages"))
    return [d for d in dirs if d.is_dir()]


def _locate_module(module: str, search: Iterable[str]) -> tuple[Path, str] | None:
    """Find ``module``'s file without importing anything: (file, the sys.path entry it is under)."""
    rel = Path(*module.split("."))
    for entry in search:
        base = Path(entry or ".")
        for candidate in (base / rel.with_suffix(".py"), base / rel / "__init__.py"):
            if candidate.is_file():
                return candidate, str(base)
    return None


class _ScanResult(msgspec.Struct):
    key: str
    candidates: list[Candidate]
    warnings: list[str]


# The interpreter path entry points are read from (source 5): this process's own, or, in the
# daemon's host, its client's for the length of a call. A client is a console script whose sys.path
# is what a call without the daemon would have had (its PYTHONPATH, its script's folder); the
# host's own, set when the daemon started, is another's, and would also key the scan's cache
# differently from the calls made without the daemon, each rewriting it for the other.
_client_search_path: list[str] | None = None


def search_path() -> list[str]:
    """The interpreter path entry points are read from: the client's in the daemon's host, else ``sys.path``."""
    return list(sys.path if _client_search_path is None else _client_search_path)


def use_search_path(path: Sequence[str] | None) -> None:
    """Read entry points on ``path`` from now on (the daemon's host, for a call); None: on ``sys.path`` again."""
    global _client_search_path  # process-wide, as sys.path itself: a host runs one call at a time
    _client_search_path = None if path is None else list(path)


def cached_entry_point_candidates(home: Path, warnings: list[str], cache_dir: Path | None) -> list[Candidate]:
    """:func:`entry_point_candidates`, remembered while no searched folder changed.

    Scanning every installed distribution costs ~25 ms per run; installing or
    removing one changes its folder's mtime, which changes the key.
    """
    places = [*search_path(), *(str(d) for d in plugin_site_dirs(home))]
    stamps = []
    for place in places:
        try:
            stamps.append(f"{place}\0{os.stat(place or '.').st_mtime_ns}")
        except OSError:
            stamps.append(f"{place}\0-")
    key = hashlib.sha256("\n".join([sys.version, *stamps]).encode()).hexdigest()
    path = cache_dir / "entry-points.json" if cache_dir is not None else None
    if path is not None:
        try:
            # Written by this host alone, never a link: anything else there is a miss (xcsh_run._safe_read).
            cached = msgspec.json.decode(read_capped(path, METADATA_MAX_BYTES), type=_ScanResult)
            if cached.key == key:
                warnings.extend(cached.warnings)
                return cached.candidates
        except UnsafeFile as exc:
            warnings.append(f"entry-point cache: {path} is {exc.strerror}; scanning again and replacing it")
            with contextlib.suppress(OSError):
                remove_replaced(path)
        except (OSError, msgspec.DecodeError):
            pass
    found: list[str] = []
    candidates = list(entry_point_candidates(home, found))
    warnings.extend(found)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_replacing(path, msgspec.json.encode(_ScanResult(key=key, candidates=candidates, warnings=found)))
        except OSError:
            pass  # the module cache reports an unwritable directory already
    return candidates


def entry_point_candidates(home: Path, warnings: list[str]) -> Iterator[Candidate]:
    """Entry points of the group ``xcsh.tools``: names and values are read, nothing is imported."""
    from importlib import metadata

    places: list[tuple[list[str], str]] = [(search_path(), "environment")]
    places += [([str(d)], "plugin prefix") for d in plugin_site_dirs(home)]
    for search, where in places:
        try:
            dists = list(metadata.distributions(path=search))
        except Exception as exc:  # a broken .dist-info must not stop discovery
            warnings.append(f"reading installed distributions in the {where} failed: {exc}")
            continue
        for dist in sorted(dists, key=lambda d: (d.metadata["Name"] or "").lower()):
            for ep in dist.entry_points:
                if ep.group != ENTRY_POINT_GROUP:
                    continue
                module, _, attr = ep.value.partition(":")
                module = module.strip()
                found = _locate_module(module, search)
                if found is None:
                    warnings.append(
                        f"entry point {ep.name!r} of {dist.metadata['Name']} names module {module!r}, "
                        f"which is not installed in the {where}; skipped"
                    )
                    continue
                path, sys_path = found
                yield Candidate(
                    path=f"{dist.metadata['Name']}:{ep.name} ({ep.value})",
                    resolved=os.path.realpath(path),
                    source=ToolSource("plugin", str(dist.metadata["Name"]), "user"),
                    module=module,
                    sys_path=sys_path,
                    factory=attr.strip() or "factory",
                )


# --- all together -------------------------------------------------------------------


def walk(
    configured_paths: Sequence[str],
    cwd: str,
    warnings: list[str],
    *,
    home: str | None = None,
    include_sources: bool = True,
    cache_dir: Path | None = None,
    root: ProjectRoot | None = None,
) -> Iterator[Candidate | Shadowed]:
    """:func:`discover`, one module at a time, in precedence order; ``warnings`` grows as sources are read.

    A source is read only when the walk reaches it: a caller that stops early
    (the tool it wants is settled) never lists, parses or scans what comes after.
    ``root``: the project root, if the caller has located it already.
    """
    home_path = Path(home if home is not None else os.path.expanduser("~"))
    seen: set[str] = set()
    names: dict[str, str] = {}

    def place(paths: Iterable[Path], source: ToolSource, *, by_name: bool) -> Iterator[Candidate | Shadowed]:
        for path in paths:
            resolved = os.path.realpath(path)
            if resolved in seen:
                continue
            seen.add(resolved)
            candidate = Candidate(path=str(path), resolved=resolved, source=source)
            if by_name:
                first = names.get(candidate.name)
                if first is not None:
                    yield Shadowed(path=str(path), source=source, shadowed_by=first)
                    continue
                names[candidate.name] = str(path)
            yield candidate

    if include_sources:
        project = root if root is not None else locate_project(cwd, home_path)
        yield from place(
            modules_in(project.path / ".xcsh" / "tools"), ToolSource("native", "xcsh", "project"), by_name=True
        )
        yield from place(
            modules_in(home_path / ".xcsh" / "agent" / "tools"), ToolSource("native", "xcsh", "user"), by_name=True
        )
        yield from place(
            modules_in(home_path / ".claude" / "tools"), ToolSource("claude", "Claude", "user"), by_name=True
        )
        yield from place(
            modules_in(project.path / ".claude" / "tools"), ToolSource("claude", "Claude", "project"), by_name=True
        )
        for plugin_id, install, level in plugin_roots(project.path if project.marked else None, home_path, warnings):
            yield from place(
                modules_in(install / "tools"), ToolSource("claude-plugins", plugin_id, level), by_name=True
            )
        yield from place(modules_in(home_path / ".codex" / "tools"), ToolSource("codex", "Codex", "user"), by_name=True)
        yield from place(
            modules_in(project.path / ".codex" / "tools"), ToolSource("codex", "Codex", "project"), by_name=True
        )
        for candidate in cached_entry_point_candidates(home_path, warnings, cache_dir):
            if candidate.resolved not in seen:
                seen.add(candidate.resolved)
                yield candidate
        for folder, provider, name in ((".omp", "omp", "oh-my-pi"), (".pi", "pi", "pi-mono")):
            yield from place(
                modules_in(project.path / folder / "tools"), ToolSource(provider, name, "project"), by_name=True
            )
            yield from place(
                modules_in(home_path / folder / "agent" / "tools"), ToolSource(provider, name, "user"), by_name=True
            )
    config = ToolSource("config", "Config", "project")
    for configured in configured_paths:
        path = expand(configured, cwd, str(home_path))
        if path.is_dir() and not module_folder(path):
            yield from place(modules_in(path), config, by_name=False)
        else:
            # A named file is taken as asked, even if it is not a .py file, so
            # that the user gets a precise load error instead of silence.
            yield from place([path], config, by_name=False)


def discover(
    configured_paths: Sequence[str],
    cwd: str,
    *,
    home: str | None = None,
    include_sources: bool = True,
    cache_dir: Path | None = None,
) -> Discovery:
    """Every candidate in precedence order, each resolved file once, plus shadowed modules.

    Args:
        configured_paths: explicit files or folders (source 6), relative to ``cwd``.
        cwd: the current directory; the project's sources are under its :func:`project_root`.
        home: the user's home (default: ``$HOME``).
        include_sources: False searches only ``configured_paths`` (``load_custom_tools``).
        cache_dir: where the scan of installed entry points is remembered (None: scan every time).
    """
    warnings: list[str] = []
    walked = walk(configured_paths, cwd, warnings, home=home, include_sources=include_sources, cache_dir=cache_dir)
    return collect(walked, warnings)


def collect(walked: Iterable[Candidate | Shadowed], warnings: list[str]) -> Discovery:
    """What :func:`walk` yields (all of it, or as far as the caller went), as one :class:`Discovery`."""
    candidates: list[Candidate] = []
    shadowed: list[Shadowed] = []
    for found in walked:
        if isinstance(found, Shadowed):
            shadowed.append(found)
        else:
            candidates.append(found)
    return Discovery(candidates=candidates, shadowed=shadowed, warnings=warnings)


def discover_custom_tool_paths(configured_paths: Sequence[str], cwd: str) -> list[Candidate]:
    """Every candidate module in precedence order (paths only; nothing is imported)."""
    return discover(configured_paths, cwd).candidates
