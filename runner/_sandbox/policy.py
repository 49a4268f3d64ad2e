"""The sandbox policy, the host's probe of what this machine can enforce, and the worker's surroundings.

The policy is documented once, on :class:`SandboxPolicy`. The host does what
only a parent can do (environment, fds, working directory, cgroups: see
``_boundary``); the worker applies the rest to itself before it imports any
tool code (``worker/_sandbox/apply.py``). The worker's private directory is
``_workdir``'s. ``docs/sandbox.md`` is the user's guide.

Rule: fail closed. A level whose mechanisms this machine lacks raises
:class:`SandboxUnavailable` naming the missing kernel feature, unless the
policy says ``best_effort``; then what was not enforced is reported.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import platform
import shutil
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Literal

import msgspec

from xcsh_run._errors import ConfigError
from xcsh_run._safe_read import UnsafeFile, read_capped, remove_replaced, write_replacing
from xcsh_run._sandbox.strict_paths import executables, project_folder, python_paths, worker_files, worker_packages
from xcsh_run.worker import protocol as p

Level = Literal["none", "contained", "strict"]
LEVELS: Final = ("none", "contained", "strict")
MiB: Final = 2**20

_BASE_ENV: Final = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "LC_*", "XCSH_RUN_*")
_SECRET_PATTERNS: Final = ("*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*", "AWS_*",
                           "*_PROXY", "*_proxy")  # fmt: skip
# The host's own secrets, never passed, whatever the policy says: with the MCP
# server's bearer token a tool could call the server's other tools (which may
# run under a looser policy) through its HTTP endpoint.
HOST_ONLY_ENV: Final = frozenset({"XCSH_RUN_MCP_TOKEN"})
# Where a sandboxed worker finds the names (never the values) of the variables
# it was not given; it takes them out of its environment before any tool runs.
DROPPED_ENV: Final = "XCSH_RUN_DROPPED_ENV"
_DROP_UID: Final = 65534  # nobody
_PROBE_MAX_BYTES: Final = 64 << 10  # a Probe is a few hundred bytes of flags and paths
_PROBE_FORMAT: Final = 4  # part of the probe cache's key: a new way of measuring is measured again


class SandboxUnavailable(ConfigError):
    """The policy asks for a protection this machine cannot enforce (and is not best-effort)."""


class SandboxPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How much a tool's worker is confined. Immutable; set globally, per tool, or per call.

    Levels:
        ``none``: no confinement (for debugging). The worker still runs in its
            own kill boundary, so nothing it starts outlives it.
        ``contained`` (default): a new session; an environment built from an
            allow-list with secret-looking names removed; no inherited fds; a
            private HOME and TMPDIR; resource limits; a cgroup around the whole
            process tree used for every kill, with memory and process-count
            limits; the worker dies with the host. Not a security boundary:
            the tool keeps the host's uid and can read and write what it can.
        ``strict``: ``contained`` plus a filesystem allow-list (Landlock), no
            network (seccomp allows no socket but AF_UNIX socketpairs; Landlock
            denies TCP; optionally an empty network namespace) but outbound TCP
            to the ports ``allow_connect`` grants, no new
            privileges, no capabilities (as root), no ptrace, mount,
            namespaces, io_uring or BPF.

    Attributes:
        level: ``none``, ``contained`` or ``strict``.
        memory_mb: memory ceiling of the worker's whole tree (cgroup); exceeding
            it ends the call as ``limit_exceeded`` (memory).
        cpu_seconds: CPU time a worker may use (RLIMIT_CPU, per process); a
            warm worker that used half of it is retired before its next call.
        open_files: RLIMIT_NOFILE.
        file_size_mb: largest file a tool may write (RLIMIT_FSIZE).
        max_procs: process count of the whole tree (pids cgroup).
        wall_seconds: default call timeout for tools under this policy.
        output_mb: bytes a worker may write to stdout and stderr in all;
            past that the call ends as ``limit_exceeded`` (output).
        extra_read_paths: more paths a ``strict`` tool may read (not run: see ``allow_exec``).
        extra_write_paths: more paths a ``strict`` tool may write.
        allow_exec: programs a ``strict`` tool may run (names looked up on PATH,
            or absolute paths); besides these, only the interpreter itself.
        env_allow: extra environment variable names or patterns passed
            through; an exact name here also passes a secret-looking one
            (CLI: ``--pass-env NAME``).
        env_allow_prefixes: every variable whose name starts with one of
            these is passed, secret-looking ones included: naming a prefix is
            as explicit as naming each variable (CLI: ``--pass-env-prefix``).
        network: ``off`` (strict: no sockets) or ``netns`` (strict: also an
            empty network namespace).
        allow_connect: TCP ports a ``strict`` tool may connect to, on any
            address (CLI: ``--allow-connect PORT``). Outbound TCP only: bind,
            listen and UDP (so DNS) stay denied. Needs Landlock ABI 4.
        best_effort: run even where a mechanism is missing, reporting it
            instead of refusing.
    """

    level: Level = "contained"
    memory_mb: int | None = 1024
    cpu_seconds: int | None = 300
    open_files: int | None = 1024
    file_size_mb: int | None = 1024
    max_procs: int | None = 256
    wall_seconds: float | None = None
    output_mb: int | None = None
    extra_read_paths: tuple[str, ...] = ()
    extra_write_paths: tuple[str, ...] = ()
    allow_exec: tuple[str, ...] = ()
    env_allow: tuple[str, ...] = ()
    env_allow_prefixes: tuple[str, ...] = ()
    network: Literal["off", "netns"] = "off"
    allow_connect: tuple[int, ...] = ()
    best_effort: bool = False

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ConfigError(f"sandbox level must be one of {', '.join(LEVELS)}, got {self.level!r}")
        if any(not prefix for prefix in self.env_allow_prefixes):
            raise ConfigError("sandbox env_allow_prefixes: an empty prefix would pass the whole environment")
        bad = [port for port in self.allow_connect if isinstance(port, bool) or not 0 < port < 65536]
        if bad:
            raise ConfigError(f"sandbox allow_connect: a TCP port is a number from 1 to 65535, got {bad[0]!r}")
        if self.allow_connect and self.network == "netns":
            raise ConfigError(
                "sandbox allow_connect needs network='off': an empty network namespace has nothing to connect to"
            )
        for name in ("memory_mb", "cpu_seconds", "open_files", "file_size_mb", "max_procs", "output_mb"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"sandbox {name} must be positive (or None for no limit), got {value!r}")

    def replace(self, **changes: object) -> SandboxPolicy:
        """A copy with ``changes`` applied (the policy itself is immutable)."""
        return msgspec.structs.replace(self, **changes)


NONE: Final = SandboxPolicy(level="none", memory_mb=None, cpu_seconds=None, open_files=None, file_size_mb=None,
                            max_procs=None)  # fmt: skip


# --- the probe -----------------------------------------------------------------------


class Probe(msgspec.Struct, frozen=True):
    """What this host can enforce; measured once per boot and cached."""

    arch: str
    euid: int
    landlock_abi: int
    seccomp: bool
    cgroup_v2: bool
    memory_cgroup: bool
    pids_cgroup: bool
    drop_uid_ok: bool


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def _world_runnable(path: str, *, need: int = stat.S_IXOTH | stat.S_IROTH) -> bool:
    """Can an unprivileged uid reach ``path`` and use it as ``need`` says? (Checks 'other' permission bits.)"""
    real = Path(os.path.realpath(path))
    try:
        for parent in real.parents:
            if not parent.stat().st_mode & stat.S_IXOTH:
                return False
        return real.stat().st_mode & need == need
    except OSError:
        return False


def _seccomp_available() -> bool:
    try:
        with open("/proc/self/status") as f:
            return any(line.startswith("Seccomp:") for line in f)
    except OSError:
        return False


def _measure(cgroup_v2: bool, memory_cgroup: bool, pids_cgroup: bool) -> Probe:
    from xcsh_run.worker._sandbox import landlock_abi

    arch = platform.machine()
    euid = os.geteuid()
    packages = worker_packages()
    return Probe(
        arch=arch,
        euid=euid,
        landlock_abi=landlock_abi() if arch == "x86_64" else 0,
        seccomp=_seccomp_available(),
        cgroup_v2=cgroup_v2,
        memory_cgroup=memory_cgroup,
        pids_cgroup=pids_cgroup,
        # The venv's interpreter, its site-packages and the standard library it
        # runs on (base_prefix: a venv may copy its interpreter out of a private
        # folder such as /root), and the worker package with its msgspec (an
        # editable install maps it from a checkout) must all be reachable by nobody.
        drop_uid_ok=euid == 0
        and all(map(_world_runnable, (sys.executable, sys.prefix, sys.base_prefix, *packages)))
        and all(_world_runnable(f, need=stat.S_IROTH) for f in worker_files()),
    )


def probe(
    cache_dir: Path | None,
    *,
    cgroup_v2: bool,
    memory_cgroup: bool,
    pids_cgroup: bool,
    warnings: list[str] | None = None,
) -> Probe:
    """This host's capabilities, cached per boot in ``cache_dir``; a replaced cache file is noted in ``warnings``."""
    key = hashlib.sha256(
        f"{_PROBE_FORMAT}\0{_boot_id()}\0{sys.executable}\0{os.geteuid()}\0{cgroup_v2}{memory_cgroup}{pids_cgroup}".encode()
    ).hexdigest()[:24]
    path = cache_dir / f"probe-{key}.json" if cache_dir is not None else None
    if path is not None:
        try:
            # A tool can replace the file (xcsh_run._safe_read): a FIFO, a link, a huge file is a miss.
            return msgspec.json.decode(read_capped(path, _PROBE_MAX_BYTES), type=Probe)
        except UnsafeFile as exc:
            if warnings is not None:
                warnings.append(f"probe cache: {path} is {exc.strerror}; measuring again and replacing it")
            with contextlib.suppress(OSError):
                remove_replaced(path)
        except (OSError, msgspec.DecodeError):
            pass
    result = _measure(cgroup_v2, memory_cgroup, pids_cgroup)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_replacing(path, msgspec.json.encode(result))  # over whatever is there, never through it
        except OSError:
            pass  # the probe is cheap; failing to cache it changes nothing
    return result


def check(policy: SandboxPolicy, found: Probe) -> list[str]:
    """What ``policy`` needs that this host lacks. Raises SandboxUnavailable unless best-effort.

    Also raises ConfigError for a program in ``allow_exec`` that is not on PATH.
    """
    unknown = [name for name in policy.allow_exec if _resolve_program(name, os.environ.get("PATH", "")) is None]
    if unknown:
        raise ConfigError(f"allow_exec: program(s) not found on PATH: {', '.join(unknown)}")
    missing: list[str] = []
    if policy.level != "none":
        if not found.cgroup_v2:
            missing.append(
                "a writable cgroup v2 hierarchy (run as root, or under a delegated cgroup): without it the "
                "kill boundary falls back to the process group, which setsid() daemons escape"
            )
        if policy.memory_mb is not None and not found.memory_cgroup:
            missing.append("a writable memory cgroup controller (memory_mb)")
        if policy.max_procs is not None and not found.pids_cgroup:
            missing.append("a writable pids cgroup controller (max_procs)")
    if policy.level == "strict":
        if found.arch != "x86_64":
            missing.append(f"strict mode supports x86_64 only, this machine is {found.arch}")
        if found.landlock_abi < 1:
            missing.append("Landlock (Linux 5.13+ with landlock in the LSM list)")
        elif found.landlock_abi < 4:
            missing.append(f"Landlock ABI 4 for TCP rules (this kernel has ABI {found.landlock_abi})")
            if policy.allow_connect:
                missing.append("allow_connect: without Landlock ABI 4 the granted ports stay closed")
        elif found.landlock_abi < 6:
            missing.append(f"Landlock ABI 6 for signal and abstract-socket scoping (ABI {found.landlock_abi})")
        if not found.seccomp:
            missing.append("seccomp filters (CONFIG_SECCOMP_FILTER)")
    if missing and not policy.best_effort:
        raise SandboxUnavailable(
            f"the {policy.level!r} sandbox cannot be enforced on this machine; missing: "
            + "; ".join(missing)
            + ". Use a weaker level, or set best_effort=True (CLI: --sandbox-best-effort) to run anyway."
        )
    return missing + weakened(policy, found)


def weakened(policy: SandboxPolicy, found: Probe) -> list[str]:
    """The documented weakenings a level runs with on this host, rather than refusing to start.

    Refusing would make the default level unusable on most kernels and on any
    host that is not root; reporting them (in ``unenforced`` and ``xcsh-run
    list``) keeps the promise honest instead.
    """
    weaker: list[str] = []
    if policy.level == "contained" and 0 < found.landlock_abi < 6:
        weaker.append(
            f"Landlock ABI 6 (Linux 6.12+) for signal and abstract-socket scoping (this kernel has ABI "
            f"{found.landlock_abi}): a contained tool can signal the host and other workers"
        )
    elif policy.level == "contained" and found.landlock_abi < 1:
        weaker.append("Landlock: a contained tool can signal the host and other workers")
    if policy.level == "contained" and not found.seccomp:
        weaker.append(
            "seccomp filters (CONFIG_SECCOMP_FILTER): a contained tool can change the resource limits, nice "
            "value, CPU affinity, scheduling policy and I/O priority of every process of the host's uid, the host's "
            "included"
        )
    if policy.level != "none" and found.euid != 0:
        also = "; HOME and TMPDIR are on disk, not on a capped noexec tmpfs" if policy.level == "strict" else ""
        weaker.append(
            "a mount namespace (needs a root host): the tool shares the host's /dev/shm and can move its "
            "processes to any cgroup the host's user may write to" + also
        )
    return weaker


# --- the worker's surroundings ---------------------------------------------------------------


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pat) for pat in patterns)


def build_env(policy: SandboxPolicy, host_env: Mapping[str, str], workdir: Path | None) -> dict[str, str]:
    """The worker's environment: an allow-list, secrets scrubbed, HOME and TMPDIR private (in ``workdir``).

    Level ``none`` (no workdir) keeps the host's environment, but for the host's own secrets.
    """
    if policy.level == "none":
        return {name: value for name, value in host_env.items() if name not in HOST_ONLY_ENV}
    assert workdir is not None  # every sandboxed worker has its private workdir
    exact = set(policy.env_allow)
    prefixes = tuple(policy.env_allow_prefixes)
    env: dict[str, str] = {}
    for name, value in host_env.items():
        if name in HOST_ONLY_ENV:
            continue
        if prefixes and name.startswith(prefixes):
            env[name] = value
            continue
        if not _matches(name, (*_BASE_ENV, *policy.env_allow)):
            continue
        if name not in exact and not name.startswith("XCSH_RUN_") and _matches(name.upper(), _SECRET_PATTERNS):
            continue
        env[name] = value
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    if "HOME" not in exact:
        env["HOME"] = str(workdir / "home")
    env["TMPDIR"] = str(workdir / "tmp")
    if policy.memory_mb is not None:
        # glibc reserves ~64 MiB of address space per thread arena.
        env.setdefault("MALLOC_ARENA_MAX", "2")
    return env


def dropped_env(host_env: Mapping[str, str], env: Mapping[str, str]) -> list[str]:
    """The names (never the values) of the host's variables a worker's environment left out.

    The worker is told them, so that a tool that reads one learns which
    variable to pass instead of failing without saying why.
    """
    return sorted(name for name in host_env if name not in env)


def _resolve_program(name: str, path_env: str) -> str | None:
    found = name if os.path.isabs(name) else shutil.which(name, path=path_env)
    return os.path.realpath(found) if found else None


def worker_config(
    policy: SandboxPolicy, found: Probe, *, module: str, cwd: str, workdir: Path | None, env: Mapping[str, str]
) -> p.SandboxConfig:
    """What the worker must apply to itself for ``policy``."""
    if policy.level == "none":
        return p.SandboxConfig(level="none")
    config = p.SandboxConfig(
        level=policy.level,
        cpu_seconds=policy.cpu_seconds,
        open_files=policy.open_files,
        file_size_bytes=policy.file_size_mb * MiB if policy.file_size_mb is not None else None,
        # Without a memory cgroup, an address-space-ish rlimit is the only ceiling.
        data_bytes=policy.memory_mb * MiB if policy.memory_mb is not None and not found.memory_cgroup else None,
        best_effort=policy.best_effort,
    )
    if policy.level != "strict":
        return config
    module_dir = module if os.path.isdir(module) else os.path.dirname(module)
    # A tool's folder and the project directory are granted whole, unless one
    # is / or holds a home directory (a host started from ~, a tool at
    # ~/tool.py): then the tool module alone, and no project directory.
    if not project_folder(module_dir):
        module_dir = module if not os.path.isdir(module) else ""
    cwd = cwd if project_folder(cwd) else ""
    # Name resolution files, so getaddrinfo("localhost") works; nothing else in /etc.
    # ld.so.cache: where the loader finds libraries outside its default folders.
    etc = ["/etc/localtime", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf", "/etc/ld.so.cache"]
    read: list[str] = [*python_paths(), "/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo", *etc,
            module_dir, cwd, *policy.extra_read_paths]  # fmt: skip
    write = ["/dev/null", *policy.extra_write_paths]
    if workdir is not None:
        write.append(str(workdir))
    programs = [_resolve_program(name, env.get("PATH", "/usr/bin:/bin")) for name in policy.allow_exec]
    missing = [name for name, path in zip(policy.allow_exec, programs, strict=True) if path is None]
    if missing:
        raise ConfigError(f"allow_exec: program(s) not found on PATH: {', '.join(missing)}")
    # nobody must also reach the tool module and the workdir (which the host
    # hands over to it); else the worker stays uid 0 without capabilities.
    drop = (
        found.drop_uid_ok
        and _world_runnable(module, need=stat.S_IROTH)
        and (workdir is None or _world_runnable(str(workdir.parent), need=stat.S_IXOTH))
    )
    return msgspec.structs.replace(
        config,
        network=policy.network,
        connect_ports=sorted(set(policy.allow_connect)),
        read_paths=[os.path.realpath(r) for r in read if r and os.path.exists(r)],
        write_paths=[os.path.realpath(w) for w in write],
        # The interpreter itself: multiprocessing's spawn and the tool's own subprocesses re-run it.
        exec_paths=executables([os.path.realpath(sys.executable), *(p_ for p_ in programs if p_ is not None)]),
        drop_uid=_DROP_UID if drop else None,
        drop_gid=_DROP_UID if drop else None,
    )


# What only a JavaScript worker gets at ``strict`` (docs/typescript.md and docs/sandbox.md
# list them): running Bun, which the worker execs after its sandbox, needs the file and its
# ELF loader to be executable (which also lets Bun read its binary); Bun reads the JS
# worker's sources and TypeBox's package; and Bun aborts at start without its own
# /proc/<pid>/maps (stat, statm and status serve process.memoryUsage; measured: nothing
# else of /proc, nor /dev/urandom or /sys/fs/cgroup, is needed). Files, not the folder:
# /proc/<pid>/net would show every socket of the network namespace, mountinfo the mounts,
# environ the environment. "/proc/self/..." is opened by the worker itself when it applies
# Landlock, so each rule is on the worker's own /proc/<pid> (the pid Bun keeps), never on
# another process's; it is not resolved here.
JS_READ_PATHS: Final[tuple[str, ...]] = ("/proc/self/maps", "/proc/self/stat", "/proc/self/statm", "/proc/self/status")
# Without a memory cgroup, memory_mb becomes RLIMIT_DATA, which counts the heap
# Bun reserves at start: Bun 1.4 aborts (SIGABRT) below about 265 MiB of it.
BUN_MIN_DATA_MB: Final = 320


def for_javascript(config: p.SandboxConfig, bun: str, read: Sequence[str]) -> p.SandboxConfig:
    """``config`` for a worker that execs ``bun`` after applying it: more to run and read at ``strict``.

    The uid drop needs nobody to reach all of it; else the worker stays the
    host's uid, without capabilities, as for a module nobody can read.

    Raises:
        ConfigError: the policy's memory limit is an RLIMIT_DATA too small for Bun to start.
    """
    if config.data_bytes is not None and config.data_bytes < BUN_MIN_DATA_MB << 20:
        raise ConfigError(
            f"memory_mb={config.data_bytes >> 20} is too small for a JavaScript tool on this machine: without a "
            f"memory cgroup the limit is RLIMIT_DATA, which counts the heap Bun reserves, and Bun needs "
            f"{BUN_MIN_DATA_MB} MiB of it to start; raise memory_mb to {BUN_MIN_DATA_MB} or more (--memory-mb), "
            "or run where a memory cgroup is writable"
        )
    if config.level != "strict":
        return config
    added = [os.path.realpath(r) for r in read if r and os.path.exists(r)]
    drop = config.drop_uid is not None and all(_world_runnable(path) for path in (bun, *added))
    return msgspec.structs.replace(
        config,
        read_paths=list(dict.fromkeys((*config.read_paths, *added, *JS_READ_PATHS))),
        exec_paths=list(dict.fromkeys((*config.exec_paths, *executables([os.path.realpath(bun)])))),
        drop_uid=config.drop_uid if drop else None,
        drop_gid=config.drop_gid if drop else None,
    )
