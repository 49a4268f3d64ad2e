"""Environments for tools with their own dependencies (a PEP 723 block, ``xcsh_run._discovery.script_meta``).

How the questions such an environment raises are settled:

1. **One environment per dependency set**, in ``<cache>/envs/<key>``, where the
   key digests the normalised set, the base interpreter (its real path and
   full version) and the folder of the worker package: two tools that ask for
   the same set share one, and an xcsh-run installed elsewhere (another
   checkout, another version of the worker) never uses this one's.
2. **Made from the host's base interpreter**, so that the worker's own code
   runs in it unchanged: ``uv venv`` and ``uv pip install`` when ``uv`` is on
   PATH, else ``python -m venv --without-pip`` and the host's ``pip --python``
   (``XCSH_RUN_ENV_INSTALLER=uv|pip`` chooses).
3. **The worker is importable, nothing else of xcsh-run is**: a ``.pth`` file
   in the environment's site-packages names a private folder that holds only a
   ``worker`` symlink to the host's worker package (``runner`` stays off the
   tool's path). msgspec, which the
   worker needs, is *installed*, pinned to the host's version, as part of the
   set: a tool that asks for a conflicting msgspec fails in the resolver, with
   its message, instead of running the worker on a msgspec it was not built
   for (a linked host msgspec would be shadowed by the tool's own copy).
4. **Never half-built**: an environment is used only once its marker file
   exists, which the build writes last (write, then rename), after checking
   that the environment's interpreter imports the worker and msgspec from the
   right places. Builds of one key are serialised by a lock file (``flock``,
   released by the kernel if a builder dies); a builder that finds a folder
   without a marker (a build that died) removes it and builds afresh.
5. **Bounded and killable**: each build step runs in its own session, and a
   cancellation or an overrun of ``BUILD_SECONDS`` kills its whole process group.
6. **Nothing a package ships runs outside the sandbox**. At install: wheels
   only (``--only-binary :all:`` / ``--no-build``), so no build backend
   (``setup.py``) runs (pip's one exception: ``_commands``), and the installer gets an allow-listed environment
   (``installer_environ``), never the host's secrets. At start: the worker's
   interpreter runs with ``-I -S``, so ``site`` never executes a ``.pth``
   file's ``import`` line nor a ``sitecustomize``/``usercustomize`` module
   (both could come from any wheel); ``_BOOT`` puts site-packages and the
   paths that ``.pth`` files *name* on sys.path itself, then runs the worker,
   which applies the sandbox before the tool module or its packages load.
   Not a sanitising pass over what was installed: a package cannot defeat a
   rule that never reads its code.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import functools
import hashlib
import importlib.metadata
import importlib.util
import itertools
import json
import logging
import os
import shlex
import shutil
import signal
import stat
import sys
import sysconfig
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import msgspec
import trio

from xcsh_run._discovery import bun as _bun
from xcsh_run._discovery import script_meta
from xcsh_run._discovery.bun import JsRuntime
from xcsh_run._discovery.cache import default_dir
from xcsh_run._discovery.finder import Candidate
from xcsh_run._discovery.script_meta import ScriptMeta, ScriptMetaError
from xcsh_run._sandbox import WORKER_SIDE_MODULES, project_folder
from xcsh_run._terminal import SafeFormatter, verbose_on_stderr
from xcsh_run.worker import protocol as p

log: Final = logging.getLogger("xcsh_run.envs")

FORMAT: Final = 3  # part of every key: bumped when what an environment holds changes shape
BUILD_SECONDS: Final = 900.0
MARKER: Final = "xcsh-run-env.json"
INSTALLER_ENV: Final = "XCSH_RUN_ENV_INSTALLER"
UV_REQUIREMENT: Final = "uv>=0.4"  # what the `uv` extra installs (pyproject.toml)
# Where no pip can install uv: its own installer (https://docs.astral.sh/uv/).
_UV_INSTALLER: Final = "curl -LsSf https://astral.sh/uv/install.sh | sh"
_LINK_DIR: Final = "xcsh-run-worker"
_PTH: Final = "_xcsh_run_worker.pth"
_TAIL_LINES: Final = 15
_TAIL_CHARS: Final = 3000
_LOCK_POLL: Final = 0.1
_PIP_MIN: Final = (22, 3)  # the first pip with ``--python``
# What the installer may see of the host's environment (rule 6): where things are, the locale, the
# proxies, and the installers' own index, certificate and cache settings (a private index's
# credentials among them: the installer is the only program that runs, and it needs them).
_INSTALLER_ENV_NAMES: Final = ("PATH", "HOME", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR", "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME", "NETRC", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_TRUSTED_HOST", "PIP_CERT",
    "PIP_CLIENT_CERT", "PIP_CONFIG_FILE", "PIP_PROXY", "PIP_TIMEOUT", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES",
    "PIP_CACHE_DIR", "PIP_NO_CACHE_DIR", "PIP_KEYRING_PROVIDER", "PIP_PRE",
    "UV_INDEX", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX_*_USERNAME",
    "UV_INDEX_*_PASSWORD", "UV_FIND_LINKS", "UV_NO_INDEX", "UV_INDEX_STRATEGY", "UV_KEYRING_PROVIDER",
    "UV_NATIVE_TLS", "UV_INSECURE_HOST", "UV_CACHE_DIR", "UV_NO_CACHE", "UV_OFFLINE", "UV_HTTP_TIMEOUT",
    "UV_CONCURRENT_DOWNLOADS", "UV_PRERELEASE", "UV_NO_CONFIG", "UV_CONFIG_FILE")  # fmt: skip
# Run by the environment's ``python -I -S -c`` (rule 6), with PREFIX and SITE bound to the environment
# and its site-packages: what site.venv and site.addsitedir do for it (sys.prefix is the venv's only once
# site ran), minus executing ``import`` lines; then what ``python -m xcsh_run.worker`` would run.
_BOOT: Final = """\
import os, runpy, site, sys
site.setquit(); site.setcopyright(); site.sethelper()  # the builtins site adds: exit(), help(), ...
sys.prefix = sys.exec_prefix = PREFIX
sys.path.append(SITE)
for name in sorted(os.listdir(SITE)):
    if name.endswith(".pth"):
        with open(os.path.join(SITE, name), encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    entry = os.path.join(SITE, line)
                    if os.path.isdir(entry) and entry not in sys.path:
                        sys.path.append(entry)
"""


class EnvError(Exception):
    """The environment could not be made; the message says why (the installer's output) and how to fix it.

    ``deterministic``: the module's own block is at fault, and will be until it changes (worth caching).
    """

    def __init__(self, message: str, *, deterministic: bool = False) -> None:
        super().__init__(message)
        self.deterministic = deterministic


class ToolEnv(msgspec.Struct, frozen=True):
    """A ready environment: the interpreter a tool's worker runs on, and the folder strict must let it read."""

    key: str
    path: str
    python: str
    requirements: tuple[str, ...]


def base_python() -> str:
    """The interpreter the host's own one was made from (the host's, outside a venv), real path."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


@functools.cache
def _host_dir() -> str:
    # The folder of the `xcsh_run` package: this module is its _discovery/tool_envs.py.
    return os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@functools.cache
def _worker_dir() -> str:
    import xcsh_run.worker as worker

    return os.path.realpath(os.path.dirname(worker.__file__))


def requirements(meta: ScriptMeta) -> tuple[str, ...]:
    """What is installed: the tool's set and the worker's msgspec, at the host's version (rule 3)."""
    return (*meta.dependencies, f"msgspec=={msgspec.__version__}")


def plan(meta: ScriptMeta, cache_root: Path) -> ToolEnv:
    """Where the environment for ``meta`` is (or will be); nothing is read or made."""
    reqs = requirements(meta)
    h = hashlib.sha256(f"{FORMAT}\0{base_python()}\0{sys.version}\0{_worker_dir()}\0".encode())
    h.update("\0".join(reqs).encode())
    key = h.hexdigest()[:24]
    path = cache_root / "envs" / key
    return ToolEnv(key=key, path=str(path), python=str(path / "bin" / "python"), requirements=reqs)


def worker_command(python: str) -> list[str]:
    """How a worker starts on ``python``: ours (``python -I -m xcsh_run.worker``), or a tool environment's (rule 6)."""
    if python == sys.executable:
        return [python, "-I", "-m", "xcsh_run.worker"]
    return [
        python,
        "-I",
        "-S",
        "-c",
        _boot(python, "runpy.run_module('xcsh_run.worker', run_name='__main__', alter_sys=True)"),
    ]


def _boot(python: str, then: str) -> str:
    prefix = os.path.dirname(os.path.dirname(python))
    return f"PREFIX = {prefix!r}\nSITE = {_site_packages(prefix)!r}\n{_BOOT}{then}\n"


def installer_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """What an installer run sees of ``environ``: the allow-list of rule 6, nothing else."""
    return {k: v for k, v in environ.items() if any(fnmatch.fnmatchcase(k, pat) for pat in _INSTALLER_ENV_NAMES)}


def ready(env: ToolEnv) -> bool:
    return os.path.isfile(os.path.join(env.path, MARKER))


async def ensure(meta: ScriptMeta, cache_root: Path, *, label: str) -> ToolEnv:
    """The environment for ``meta``, built first if need be (``label`` names the tool in progress lines).

    Raises EnvError. Safe against other processes building the same one (rule 4).
    """
    env = plan(meta, cache_root)
    if ready(env):
        return env
    try:
        with trio.fail_after(BUILD_SECONDS):
            async with _locked(Path(env.path + ".lock"), label):
                if not ready(env):  # another process may have built it while we waited
                    await _build(env, meta, label)
    except trio.TooSlowError:
        raise EnvError(
            f"{meta.path}: building the environment for its `# /// script` block took over "
            f"{BUILD_SECONDS:g} s and was stopped; check the network and the package index, then run again"
        ) from None
    return env


@contextlib.asynccontextmanager
async def _locked(path: Path, label: str) -> AsyncIterator[None]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise EnvError(
            f"cannot create tool environments in {path.parent} ({exc.strerror}); make it writable, "
            "or point XDG_CACHE_HOME at a writable folder"
        ) from None
    try:
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise EnvError(f"cannot lock {path}: {exc.strerror}") from None
            if not said:
                log.info("waiting for another xcsh-run that is building the environment %s for %s", path.stem, label)
                said = True
            # Polled, not a blocking flock in a thread: a cancelled wait must not leave a thread holding the lock.
            await trio.sleep(_LOCK_POLL)
        yield
    finally:
        os.close(fd)  # releases the lock


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """On whatever ``sys.stderr`` is when a record comes: the daemon's host gives each call its client's."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def show_builds_on_stderr() -> None:
    """The CLI's progress lines: each build's start and end, as ``xcsh-run: ...`` lines on stderr.

    Not where the records reach stderr anyway: ``serve`` logs through the root logger's handler.
    """
    if any(getattr(h, "xcsh_run_builds", False) for h in log.handlers):
        return  # once per process, however often the CLI's main runs in it

    def not_shown_otherwise(record: logging.LogRecord) -> bool:
        if verbose_on_stderr():
            return False  # -v prints every record, these included: once is enough
        return not (logging.getLogger("xcsh_run").propagate and logging.getLogger().handlers)

    handler = _CurrentStderr()
    handler.setFormatter(SafeFormatter("xcsh-run: %(message)s"))  # a failed build quotes its tool's output
    handler.addFilter(not_shown_otherwise)
    handler.xcsh_run_builds = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def _uv() -> str | None:
    """uv on PATH, else beside this interpreter (installed with xcsh-run: ``pip install 'xcsh-run[uv]'``)."""
    beside = os.path.join(os.path.dirname(sys.executable), "uv")
    return shutil.which("uv") or (beside if os.access(beside, os.X_OK) else None)


def _python() -> str:
    return shlex.quote(sys.executable)


def _get_uv() -> str:
    """The command that puts uv beside xcsh-run's Python, where it is found (what the ``uv`` extra installs)."""
    install = f"{_python()} -m pip install {shlex.quote(UV_REQUIREMENT)}"
    return install if importlib.util.find_spec("pip") is not None else f"{_python()} -m ensurepip && {install}"


def _installer() -> str:
    chosen = os.environ.get(INSTALLER_ENV, "").strip().lower()
    if chosen not in ("", "uv", "pip"):
        raise EnvError(f"{INSTALLER_ENV} must be uv or pip, got {chosen!r}; set it to one of them, or unset it")
    if chosen == "uv" or (not chosen and _uv()):
        if not _uv():
            raise EnvError(
                f"{INSTALLER_ENV}=uv, but there is no `uv` on PATH nor beside {sys.executable}; unset "
                f"{INSTALLER_ENV} to use pip, or install uv beside xcsh-run: `{_get_uv()}`"
            )
        return "uv"
    if importlib.util.find_spec("pip") is None:
        if importlib.util.find_spec("ensurepip") is not None:
            fix = f"give xcsh-run's Python pip: `{_python()} -m ensurepip`"
        else:
            fix = f"install uv: `{_UV_INSTALLER}`"
        raise EnvError(
            "a tool's `# /// script` dependencies need an installer, and there is no `uv` on PATH nor beside "
            f"{sys.executable}, and no pip in {sys.prefix}; {fix}"
        )
    version = importlib.metadata.version("pip")
    if _release(version) < _PIP_MIN:
        raise EnvError(
            f"a tool's `# /// script` dependencies are installed with `pip --python`, which needs pip >= "
            f"{'.'.join(map(str, _PIP_MIN))}; {sys.prefix} has pip {version}: upgrade it (or put `uv` on PATH): "
            f"`{_python()} -m pip install -U {shlex.quote('pip>=' + '.'.join(map(str, _PIP_MIN)))}`"
        )
    return "pip"


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(itertools.takewhile(str.isdigit, part))
        parts.append(int(digits or 0))
    return tuple(parts)


def _commands(installer: str, env: ToolEnv) -> list[tuple[list[str], str]]:
    """Each step's argv, and how a person would type it."""
    wheels = "--no-build" if installer == "uv" else "--only-binary :all: --no-build-isolation"
    install = f"{'uv pip' if installer == 'uv' else 'pip'} install {_quoted(env.requirements)} {wheels}"
    if installer == "uv":
        uv = _uv() or "uv"
        return [
            ([uv, "venv", "--quiet", "--python", base_python(), env.path], f"uv venv {env.path}"),
            ([uv, "pip", "install", "--no-build", "--python", env.python, "--", *env.requirements], install),
        ]
    # -I: neither the host's PYTHONPATH nor a pip.py in the current folder takes part. --only-binary does not
    # cover a direct reference that a wheel's own metadata makes (``Requires-Dist: x @ file:x.tar.gz``): pip
    # would build it. --no-build-isolation makes that build look for its backend in the new, empty
    # environment, where setuptools and the like are not, instead of installing them to run it.
    return [
        ([sys.executable, "-I", "-m", "venv", "--without-pip", env.path], f"python -m venv {env.path}"),
        ([sys.executable, "-I", "-m", "pip", "--python", env.python, "install", "--no-input",
          "--only-binary", ":all:", "--no-build-isolation", "--disable-pip-version-check", "--progress-bar", "off",
          "--", *env.requirements], install),
    ]  # fmt: skip


async def _build(env: ToolEnv, meta: ScriptMeta, label: str) -> None:
    installer = _installer()
    steps = _commands(installer, env)
    started = time.monotonic()
    log.info("building environment for %s (%s): %s", label, ", ".join(meta.dependencies), steps[-1][1])
    await trio.to_thread.run_sync(_remove, env.path)  # what a build that died left
    for argv, typed in steps:
        await _step(argv, typed, meta, env)
    await trio.to_thread.run_sync(_link_worker, env)
    await _check(env, meta)
    await trio.to_thread.run_sync(_mark_ready, env, meta, installer)
    log.info("built environment for %s in %.1f s: %s", label, time.monotonic() - started, env.path)


def _mark_ready(env: ToolEnv, meta: ScriptMeta, installer: str) -> None:
    marker = {"requirements": list(env.requirements), "installer": installer, "python": base_python(),
              "built": time.time(), "for": meta.path}  # fmt: skip
    tmp = os.path.join(env.path, f".{MARKER}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(marker, f, indent=1)
    os.replace(tmp, os.path.join(env.path, MARKER))  # last: from here on it is used (rule 4)


def _remove(path: str) -> None:
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


async def _step(argv: Sequence[str], typed: str, meta: ScriptMeta, env: ToolEnv) -> None:

    async def kill_group(proc: trio.Process) -> None:
        # The installer's own children (build backends) die with it (rule 5).
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)

    try:
        done = await trio.run_process(
            list(argv), capture_stdout=True, capture_stderr=True, check=False, stdin=b"",
            start_new_session=True, deliver_cancel=kill_group, env=installer_environ(os.environ),
        )  # fmt: skip
    except OSError as exc:
        fix = (
            f"; set {INSTALLER_ENV}=pip to use pip, or reinstall uv: `{_get_uv()}`" if argv[0] != sys.executable else ""
        )
        raise EnvError(f"{meta.path}: could not run {argv[0]} to build its environment: {exc}{fix}") from None
    if done.returncode != 0:
        await trio.to_thread.run_sync(_remove, env.path)
        output = (done.stderr or done.stdout).decode(errors="replace")
        by_uv = argv[0] != sys.executable
        check = _check_command(argv[0], env.requirements)
        raise EnvError(
            f"{meta.path}: could not install the dependencies of its `# /// script` block (line {meta.line}): "
            f"`{typed}` failed with exit status {done.returncode}:\n{tail(output)}\n"
            "Fix the block's `dependencies` (names and versions as the package index has them; the environment "
            f"also needs msgspec=={msgspec.__version__}, which xcsh-run's worker runs on), then run again. "
            "Only wheels are installed, never a source distribution (its build would run its code on this "
            "machine, outside the sandbox): for a package with no wheel for this platform, build one yourself "
            "(`pip wheel --no-deps NAME -w DIR`) and point PIP_FIND_LINKS (or UV_FIND_LINKS) at DIR."
            + (f" uv does not read pip.conf: for an index set there, set {INSTALLER_ENV}=pip." if by_uv else "")
            + f" To check a set as this build resolves it, installing nothing: `{check}`"
        )


def _check_command(installer: str, requirements: Sequence[str]) -> str:
    """The command that resolves ``requirements`` as a build does, and installs nothing.

    ``installer`` is the build's: uv's path, or this Python (pip's).
    """
    if installer == sys.executable:
        return f"{_python()} -m pip install --dry-run --ignore-installed --only-binary :all: -- {_quoted(requirements)}"
    lines = _quoted(requirements)
    return f"printf '%s\\n' {lines} | {shlex.quote(installer)} pip compile --no-build --python {_python()} -"


def _quoted(words: Sequence[str]) -> str:
    return " ".join(shlex.quote(word) for word in words)


def tail(output: str) -> str:
    """The last lines of an installer's output, where its reason is."""
    lines = [line for line in output.strip().splitlines() if line.strip()]
    text = "\n".join("  " + line for line in lines[-_TAIL_LINES:])
    return text[-_TAIL_CHARS:]


def _site_packages(root: str) -> str:
    return sysconfig.get_path("purelib", scheme="venv", vars={"base": root, "platbase": root})


def _link_worker(env: ToolEnv) -> None:
    """The private folder with only the worker in it, and the ``.pth`` file that puts it on sys.path (rule 3)."""
    link_dir = os.path.join(env.path, _LINK_DIR)
    # A package of its own name, holding only what a worker imports: the host's
    # face (which loads nothing until asked), the authoring API's public name and
    # the worker's package. The rest of the host stays out of the tool's interpreter.
    package = os.path.join(link_dir, "xcsh_run")
    os.makedirs(package, exist_ok=True)
    for name in WORKER_SIDE_MODULES:
        os.symlink(os.path.join(_host_dir(), name), os.path.join(package, name))
    os.symlink(_worker_dir(), os.path.join(package, "worker"))
    with open(os.path.join(_site_packages(env.path), _PTH), "w", encoding="utf-8") as f:
        f.write(link_dir + "\n")


async def _check(env: ToolEnv, meta: ScriptMeta) -> None:
    """The environment's interpreter imports our worker and msgspec, or the environment is not used."""
    probe = "import json, msgspec, xcsh_run.worker as w; print(json.dumps([w.__file__, msgspec.__version__]))"
    # As the worker will start (rule 6): importing msgspec here must run no installed file either.
    done = await trio.run_process(
        [env.python, "-I", "-S", "-c", _boot(env.python, probe)], capture_stdout=True, capture_stderr=True,
        check=False, stdin=b"", env=installer_environ(os.environ),
    )  # fmt: skip
    problem = done.stderr.decode(errors="replace").strip()
    if done.returncode == 0:
        where, version = json.loads(done.stdout)
        if not where.startswith(os.path.join(env.path, _LINK_DIR) + os.sep):
            problem = (
                f"a dependency installs a top-level `xcsh_run` module ({where}), which hides xcsh-run's worker; "
                "tools cannot use such a package"
            )
        elif version != msgspec.__version__:
            problem = f"it has msgspec {version}, xcsh-run's worker needs {msgspec.__version__}"
        else:
            return
    await trio.to_thread.run_sync(_remove, env.path)
    raise EnvError(f"{meta.path}: the environment built for its `# /// script` block is not usable: {tail(problem)}")


def readable_for_drop(config: p.SandboxConfig, env: ToolEnv) -> p.SandboxConfig:
    """``config``, without strict's drop to an unprivileged uid if that uid could not reach ``env``.

    As for a tool module nobody can read (``_sandbox.worker_config``): the worker
    then stays the host's uid, without capabilities, rather than not starting.
    """
    if config.drop_uid is None or _reachable_by_all(env.path):
        return config
    return msgspec.structs.replace(config, drop_uid=None, drop_gid=None)


def _reachable_by_all(path: str) -> bool:
    real = Path(os.path.realpath(path))
    try:
        if not all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents):
            return False
        return real.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH) == stat.S_IROTH | stat.S_IXOTH
    except OSError:
        return False


async def for_module(candidate: Candidate, cache_dir: str | None) -> ToolEnv | None:
    """The environment of a tool module, built if need be; None if it needs none (no ``# /// script`` block).

    ``cache_dir`` is the runner's (None: the default). Raises EnvError, with
    ``deterministic`` set for a malformed block. An unreadable module is None:
    its worker's own load says why. An installed plugin's dependencies are its
    distribution's: None.
    """
    if candidate.module is not None:
        return None
    resolved = candidate.resolved

    def read() -> ScriptMeta | None:
        with contextlib.suppress(OSError):
            return script_meta.read(script_meta.module_source(resolved, os.path.isdir(resolved)))
        return None

    try:
        # On the trio thread, as the registry's own stat: one small file, read
        # faster than a thread hop (and no thread for a mock clock to jump over).
        meta = read()
    except ScriptMetaError as exc:
        raise EnvError(str(exc), deterministic=True) from None
    if meta is None:
        return None
    root = Path(cache_dir) if cache_dir is not None else default_dir()
    return await ensure(meta, root, label=candidate.name)


async def runtime_for(candidate: Candidate, cache_dir: str | None) -> ToolEnv | JsRuntime | None:
    """What the module's worker runs on: Bun for a JavaScript module, else :func:`for_module`."""
    if candidate.kind != "js":
        return await for_module(candidate, cache_dir)
    runtime = _bun.locate()
    if runtime is None:  # not cached (not deterministic): installing Bun clears it
        raise EnvError(f"{candidate.resolved}: {_bun.missing()}")
    return runtime


def js_hint(candidate: Candidate, level: str) -> str:
    """Why a JS module in a folder that holds a home directory fails to load under strict, and what to do."""
    if level != "strict" or candidate.kind != "js" or os.path.isdir(candidate.resolved):
        return ""
    folder = os.path.dirname(candidate.resolved)
    if project_folder(folder):
        return ""
    # strict grants such a module's file alone (``_sandbox.worker_config``): enough for Python, not for
    # Bun, which reads the folder to import a file from it. Granting the folder would open the home.
    return (
        f" [under strict, Bun must read the folder {folder} to import the module, and strict does not grant "
        "a folder that holds a home directory; move the module into a folder of its own, such as "
        "~/.xcsh/agent/tools]"
    )
