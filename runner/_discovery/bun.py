"""Bun, the runtime of JavaScript and TypeScript tools: where it is, and installing it from the npm registry.

:func:`locate` looks, in this order, and takes the first that is an executable file:

1. the environment variable ``XCSH_RUN_BUN``;
2. ``bun = "/path/to/bun"`` under ``[runtime]`` in ``~/.xcsh/config.toml``
   (the user's file only: a project's file must not choose what runs its tools);
3. the project's own install: ``$XDG_CACHE_HOME/xcsh-run/bun`` (default
   ``~/.cache/xcsh-run/bun``) holding ``node_modules/bun/bin/bun.exe``, which
   ``xcsh-run install-bun`` puts there;
4. ``bun`` on ``PATH``.

TypeBox (``@sinclair/typebox``, the tool API's ``typebox``) is the
``node_modules/@sinclair/typebox`` of a folder above the real path of that Bun
(an npm install puts both in one ``node_modules``), else of the default install
dir. It may be absent: the API's ``typebox`` then throws, saying how to get it.

The JavaScript worker's entry point is ``worker/js/main.ts``; the environment
variable ``XCSH_RUN_JS_MAIN`` names another (for tests, and for alternative
workers that speak the same handoff).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import msgspec

from xcsh_run._safe_read import CONFIG_MAX_BYTES, read_capped

BUN_VERSION: Final = "1.4.5"
TYPEBOX_VERSION: Final = "0.34.52"
# The schema libraries of pi.zod and pi.arktype, installed beside TypeBox (their folder is its node_modules).
ZOD_VERSION: Final = "4.1.12"
ARKTYPE_VERSION: Final = "2.1.25"
BUN_ENV: Final = "XCSH_RUN_BUN"
MAIN_ENV: Final = "XCSH_RUN_JS_MAIN"
_CONFIGURED: Final = "[runtime] bun in ~/.xcsh/config.toml"
_IN_PREFIX: Final = ("node_modules", "bun", "bin", "bun.exe")
_TYPEBOX: Final = ("node_modules", "@sinclair", "typebox")
HOW_TO_GET: Final = (
    "install it with `xcsh-run install-bun` (or `make bun` in a checkout), put bun on PATH, "
    f"or set {BUN_ENV} (or bun under [runtime] in ~/.xcsh/config.toml) to a Bun executable"
)


JS_SUFFIXES: Final = (".ts", ".js", ".mjs")
JS_FOLDER_MARKERS: Final = ("package.json", "index.ts")


def is_js_module(path: str) -> bool:
    """Is this module (file or folder) JavaScript/TypeScript, run by Bun? (A Python package folder is not.)"""
    if path.endswith(".py"):
        return False  # without a look at the disk: the common case
    if path.endswith(JS_SUFFIXES):
        return not os.path.isdir(path) or is_js_folder(Path(path))
    return os.path.isdir(path) and is_js_folder(Path(path))


def is_js_folder(folder: Path) -> bool:
    if (folder / "__init__.py").is_file():
        return False
    return any((folder / marker).is_file() for marker in JS_FOLDER_MARKERS)


def module_stem(base: str) -> str:
    """A module's name from its file or folder name: without ``.py``, ``.ts``, ``.js`` or ``.mjs``."""
    for suffix in (".py", *JS_SUFFIXES):
        if base.endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    return base


# How Bun starts is the worker's to decide, at every level, as ``python -I`` ignores
# PYTHONPATH and its kin for Python workers: these would preload code (before the
# worker takes XCSH_WORKER_INIT out of the environment), add module paths or change
# the engine under every JS tool. A tool's own subprocesses do not get them either.
# BUN_INSPECT* opens a debugger port (a VS Code debug terminal sets it), NODE_CHANNEL_FD
# names an fd to talk to a parent the worker does not have, BUN_FEATURE_FLAG_* switch
# the runtime's behaviour.
_STARTUP_ENV: Final = (
    "BUN_OPTIONS", "NODE_OPTIONS", "NODE_PATH", "BUN_JSC_*", "BUN_INSPECT*", "NODE_CHANNEL_FD", "BUN_FEATURE_FLAG_*",
)  # fmt: skip


def js_env(env: Mapping[str, str]) -> dict[str, str]:
    """A JS worker's environment: ``env`` without the variables that change how Bun starts."""
    return {k: v for k, v in env.items() if not any(fnmatch.fnmatchcase(k, pat) for pat in _STARTUP_ENV)}


class BunError(Exception):
    """Bun could not be installed; the message says why and what to do."""


class JsRuntime(msgspec.Struct, frozen=True):
    """How a JavaScript worker runs: Bun (real path), the worker's entry point, TypeBox's folder ("" if absent)."""

    bun: str
    main: str
    typebox: str = ""
    found_by: str = ""

    def worker_args(self) -> list[str]:
        """What ``python -m xcsh_run.worker`` is given on top of its fds (``xcsh_run.worker._runtime.handoff``)."""
        args = ["--bun", self.bun, "--js-main", self.main]
        return [*args, "--typebox", self.typebox] if self.typebox else args

    def read_paths(self) -> list[str]:
        """What ``strict`` must let a JS worker read on top of a Python one's: the worker and TypeBox.

        Not Bun's folder: the exec rule already lets Bun read its own binary, and
        that folder may be a home (``XCSH_RUN_BUN=~/bun``), which strict never grants.
        """
        return [p for p in (os.path.dirname(self.main), *schema_libraries(self.typebox)) if p]


def schema_libraries(typebox: str) -> list[str]:
    """TypeBox's folder and, with zod or arktype installed beside it, the install folder that holds them.

    arktype's modules import its own packages (``@ark/schema``, ...) by name,
    and Bun's resolver finds them only by listing the install folder, so that
    folder is granted whole (what ``install-bun`` put there: Bun, the schema
    libraries and npm's lock file). Never a home directory or a folder holding
    one: there only the packages' own folders are granted, and arktype fails to
    load at strict, with Bun's message.
    """
    if not typebox:
        return []
    modules = os.path.dirname(os.path.dirname(typebox))  # node_modules/@sinclair/typebox
    extra = [
        p for p in (os.path.join(modules, name) for name in ("zod", "arktype", "arkregex", "@ark")) if os.path.isdir(p)
    ]
    prefix = os.path.realpath(os.path.dirname(modules))
    homes = {os.path.realpath(os.path.expanduser("~"))}
    if (
        extra
        and not any(home == prefix or home.startswith(prefix.rstrip("/") + "/") for home in homes)
        and prefix != "/"
    ):
        return [typebox, prefix]
    return [typebox, *extra]


def default_prefix() -> Path:
    """Where ``xcsh-run install-bun`` installs by default (``$XDG_CACHE_HOME/xcsh-run/bun``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xcsh-run" / "bun"


def bun_in(prefix: str | os.PathLike[str]) -> Path:
    return Path(prefix, *_IN_PREFIX)


def worker_main() -> str:
    """The JavaScript worker's entry point: ``XCSH_RUN_JS_MAIN``, else ``worker/js/main.ts``."""
    override = os.environ.get(MAIN_ENV)
    if override:
        return os.path.abspath(override)
    import xcsh_run.worker as worker

    return os.path.join(os.path.dirname(os.path.abspath(worker.__file__)), "js", "main.ts")


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def configured(home: str | None = None) -> str | None:
    """``[runtime] bun`` of ``~/.xcsh/config.toml`` (``~`` expanded, relative to the home folder), or None."""
    folder = home if home is not None else os.path.expanduser("~")
    try:
        data = read_capped(os.path.join(folder, ".xcsh", "config.toml"), CONFIG_MAX_BYTES, follow=True)
        raw = tomllib.loads(data.decode())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None  # an unreadable or broken file is reported where its grants are read
    runtime = raw.get("runtime")
    value = runtime.get("bun") if isinstance(runtime, dict) else None
    if not isinstance(value, str) or not value:
        return None
    return os.path.join(folder, os.path.expanduser(value))


def _candidates() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    env = os.environ.get(BUN_ENV)
    if env:
        found.append((env, BUN_ENV))
    config = configured()
    if config is not None:
        found.append((config, _CONFIGURED))
    found.append((str(bun_in(default_prefix())), "the xcsh-run install dir"))
    on_path = shutil.which("bun")
    if on_path is not None:
        found.append((on_path, "PATH"))
    return found


def _typebox_for(bun: str) -> str:
    for folder in Path(bun).parents:
        candidate = folder.joinpath(*_TYPEBOX)
        if (candidate / "package.json").is_file():
            return str(candidate)
    fallback = default_prefix().joinpath(*_TYPEBOX)
    return str(fallback) if (fallback / "package.json").is_file() else ""


_cache: dict[tuple[str | None, ...], JsRuntime | None] = {}


def locate() -> JsRuntime | None:
    """The Bun to run JavaScript tools with, found as the module's docstring says; None if there is none.

    Remembered per process (for the environment variables it depends on) once found;
    not found is looked for again each time, so a Bun installed meanwhile (``make bun``,
    npm) is seen by a running ``serve``.
    """
    key = tuple(os.environ.get(name) for name in (BUN_ENV, MAIN_ENV, "HOME", "XDG_CACHE_HOME", "PATH"))
    if key in _cache:
        return _cache[key]
    runtime: JsRuntime | None = None
    for path, how in _candidates():
        if _executable(path):
            real = os.path.realpath(path)
            runtime = JsRuntime(bun=real, main=worker_main(), typebox=_typebox_for(real), found_by=how)
            break
    if runtime is not None:
        _cache[key] = runtime
    return runtime


def missing() -> str:
    """Why there is no Bun, and how to get one (for a JS module's load error and ``doctor``)."""
    bad = [f"{how} names {path}, which is not an executable file" for path, how in _candidates()
           if not _executable(path) and how in (BUN_ENV, _CONFIGURED)]  # fmt: skip
    why = f" ({'; '.join(bad)})" if bad else ""
    return f"no Bun to run JavaScript/TypeScript tools with{why}; {HOW_TO_GET}"


def version(bun: str, timeout: float = 10.0) -> str:
    """``bun --version``; raises BunError if it does not run."""
    try:
        done = subprocess.run([bun, "--version"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BunError(f"{bun} --version failed: {exc}") from None
    if done.returncode != 0:
        raise BunError(f"{bun} --version exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()


def install(prefix: str | os.PathLike[str] | None = None, *, timeout: float = 600.0) -> Path:
    """Install the pinned Bun, TypeBox, zod and arktype from npm into ``prefix`` (default :func:`default_prefix`).

    Returns the Bun executable, checked with ``--version``. Raises BunError.
    npm 11 skips the ``bun`` package's postinstall step; its
    ``bin/bun.exe`` is the real binary all the same (the check proves it).
    """
    target = Path(prefix) if prefix is not None else default_prefix()
    npm = shutil.which("npm")
    if npm is None:
        raise BunError(
            "npm is not on PATH, and installing Bun needs it: install Node.js/npm, "
            f"or put bun on PATH, or set {BUN_ENV} to a Bun executable"
        )
    target.mkdir(parents=True, exist_ok=True)
    argv = [npm, "install", "--prefix", str(target), "--no-audit", "--no-fund", "--save-exact",
            f"bun@{BUN_VERSION}", f"@sinclair/typebox@{TYPEBOX_VERSION}",
            f"zod@{ZOD_VERSION}", f"arktype@{ARKTYPE_VERSION}"]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BunError(f"`{' '.join(argv)}` failed: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-800:]
        raise BunError(f"`{' '.join(argv)}` exited {done.returncode}:\n{tail}")
    bun = bun_in(target)
    if not _executable(str(bun)):
        raise BunError(f"npm installed the bun package into {target}, but {bun} is not there or not executable")
    got = version(str(bun))
    if got != BUN_VERSION:
        raise BunError(f"{bun} --version says {got!r}, expected {BUN_VERSION}")
    _cache.clear()
    return bun
