"""What the user grants a strict tool in a config file, and what a tool declares it needs but was not granted.

A tool declares its needs (``CustomTool(requires=...)``: programs, paths,
network); declaring grants nothing. The user grants on the command line
(``--allow-exec``, ``--allow-read``, ``--allow-write``, ``--allow-connect``)
or in a config file, TOML, read when a runner discovers every source (the
CLI, ``serve``):

- ``~/.xcsh/config.toml``, the user's own: always read;
- ``<project>/.xcsh/config.toml``: read only when the user's file lists the
  project in ``trusted_projects``. A project's files come with its tools, and
  a tool must not be able to loosen the sandbox it runs in; an untrusted
  project file with grants is reported and ignored.

Both hold ``[sandbox]`` (grants for every tool) and ``[tools.NAME]`` (grants
for one tool), each with ``allow_exec``, ``allow_read``, ``allow_write`` and
``allow_connect``; they add to the policy the runner was given (its ``sandbox``
and ``tool_policies``), never take anything away. A relative path is relative
to the folder that holds ``.xcsh/`` (the home folder for the user's file).

``[tools.NAME]`` grants follow a name, and a project's module can take any
name (a project's ``.xcsh/tools`` comes first in discovery): they reach a tool
only when its module comes from a user-level source, a ``--tools`` path, or a
trusted project (:func:`reaches`); the registry decides when it registers the
tool. Under ``network='netns'`` the files' ``allow_connect`` is left out (an
empty namespace has nothing to connect to) with a warning.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Protocol

import msgspec

from xcsh_run._errors import ConfigError
from xcsh_run._safe_read import CONFIG_MAX_BYTES, read_capped
from xcsh_run._sandbox.policy import SandboxPolicy
from xcsh_run.worker.protocol import Requires

CONFIG_NAME: Final = "config.toml"
_GRANT_KEYS: Final = ("allow_exec", "allow_read", "allow_write", "allow_connect")


class Grants(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One ``[sandbox]`` or ``[tools.NAME]`` table of a config file."""

    allow_exec: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    allow_write: tuple[str, ...] = ()
    allow_connect: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return any(getattr(self, key) for key in _GRANT_KEYS)

    def add(self, other: Grants) -> Grants:
        return Grants(*(tuple(dict.fromkeys((*getattr(self, k), *getattr(other, k)))) for k in _GRANT_KEYS))

    def onto(self, policy: SandboxPolicy) -> SandboxPolicy:
        """``policy`` with these grants added."""
        if not self:
            return policy
        return policy.replace(
            allow_exec=tuple(dict.fromkeys((*policy.allow_exec, *self.allow_exec))),
            extra_read_paths=tuple(dict.fromkeys((*policy.extra_read_paths, *self.allow_read))),
            extra_write_paths=tuple(dict.fromkeys((*policy.extra_write_paths, *self.allow_write))),
            allow_connect=tuple(dict.fromkeys((*policy.allow_connect, *self.allow_connect))),
        )


class Runtime(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[runtime]``: read by ``xcsh_run._discovery.bun`` from the user's file (``bun = "/path/to/bun"``); no grant."""

    bun: str = ""


class Daemon(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[daemon]``: read by the console script from the user's file (``enabled = true``, ``xcsh_run._daemon``)."""

    enabled: bool = False


class ConfigFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    trusted_projects: tuple[str, ...] = ()
    runtime: Runtime = Runtime()
    daemon: Daemon = Daemon()
    sandbox: Grants = Grants()
    tools: dict[str, Grants] = {}


class Granted(msgspec.Struct, frozen=True):
    """The config files' grants folded into a runner's policies (see :func:`granted_policies`)."""

    sandbox: SandboxPolicy
    tool_policies: dict[str, SandboxPolicy]
    tool_grants: dict[str, SandboxPolicy]
    project_trusted: bool
    warnings: list[str]


def reaches(level: str, provider: str, project_trusted: bool) -> bool:
    """Whether ``[tools.NAME]`` grants may reach a tool whose module comes from this source.

    A user-level source and a ``--tools`` path (provider ``config``) are the
    user's own choice; a project's module is, only when the project is trusted.
    """
    return project_trusted or level == "user" or provider == "config"


def withheld_note(name: str, module: str, project: str) -> str:
    """The warning for a tool that :func:`reaches` keeps from its ``[tools.NAME]`` grants."""
    return (
        f"tool {name!r} from {module} does not get the [tools.{name}] grants of ~/.xcsh/config.toml: it comes "
        f"from the project {project}, which is not trusted; add {project} to trusted_projects in "
        "~/.xcsh/config.toml if you trust it"
    )


def _check_ports(path: Path, config: ConfigFile) -> None:
    tables = {"[sandbox]": config.sandbox, **{f"[tools.{name}]": g for name, g in config.tools.items()}}
    for table, grants in tables.items():
        for port in grants.allow_connect:
            if not 0 < port < 65536:
                raise ConfigError(
                    f"{path}: {table} allow_connect: {port} is not a TCP port; give numbers from 1 to 65535"
                )


def _read(path: Path, base: Path) -> ConfigFile | None:
    try:
        # The user's own file (a link to a dotfiles checkout is fine), but one a tool can replace.
        data = read_capped(path, CONFIG_MAX_BYTES, follow=True)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    try:
        raw: dict[str, Any] = tomllib.loads(data.decode())
        config = msgspec.convert(raw, ConfigFile)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except msgspec.ValidationError as exc:
        raise ConfigError(
            f"{path}: {exc}; the file holds trusted_projects = [...], [runtime] (bun = PATH), [daemon] "
            "(enabled = true), and [sandbox] and "
            f"[tools.NAME] tables with {', '.join(_GRANT_KEYS)}"
        ) from None
    _check_ports(path, config)

    def absolute(grants: Grants) -> Grants:
        def fix(paths: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(str(base / os.path.expanduser(p)) for p in paths)

        return msgspec.structs.replace(grants, allow_read=fix(grants.allow_read), allow_write=fix(grants.allow_write))

    return ConfigFile(
        trusted_projects=tuple(os.path.realpath(base / os.path.expanduser(p)) for p in config.trusted_projects),
        sandbox=absolute(config.sandbox),
        tools={name: absolute(g) for name, g in config.tools.items()},
    )


class Loaded(msgspec.Struct, frozen=True):
    every: Grants
    per_tool: dict[str, Grants]
    project_trusted: bool
    warnings: list[str]
    connect_files: list[str]  # the files that grant allow_connect, for the netns warning


def config_paths(project: str, home: str | None) -> list[Path]:
    """The config files :func:`load` reads for ``project`` and ``home`` (whether they exist or not)."""
    found = [Path(home) / ".xcsh" / CONFIG_NAME] if home else []
    return [*found, Path(project) / ".xcsh" / CONFIG_NAME]


def load(project: str, home: str | None) -> Loaded:
    """The grants for every tool and per tool, from the user's file and a trusted project's; and warnings."""
    warnings: list[str] = []
    files: dict[str, ConfigFile] = {}
    user_path = Path(home) / ".xcsh" / CONFIG_NAME if home else None
    user = _read(user_path, Path(home)) if user_path is not None and home else None
    if user is not None:
        files[str(user_path)] = user
    folder = Path(project)
    at_home = home is not None and folder.resolve() == Path(home).resolve()
    trusted = at_home or (user is not None and os.path.realpath(folder) in user.trusted_projects)
    own = _read(folder / ".xcsh" / CONFIG_NAME, folder)
    if own is not None and not at_home:
        if trusted:
            files[str(folder / ".xcsh" / CONFIG_NAME)] = own
        elif own.sandbox or any(own.tools.values()):
            warnings.append(
                f"{folder / '.xcsh' / CONFIG_NAME} grants sandbox access that is ignored: a project's config file "
                f"is honoured only when trusted_projects in {Path(home or '~') / '.xcsh' / CONFIG_NAME} lists "
                f"{os.path.realpath(folder)}"
            )
    every = Grants()
    per_tool: dict[str, Grants] = {}
    connect_files: list[str] = []
    for path, config in files.items():
        every = every.add(config.sandbox)
        for name, grants in config.tools.items():
            per_tool[name] = per_tool.get(name, Grants()).add(grants)
        if config.sandbox.allow_connect or any(g.allow_connect for g in config.tools.values()):
            connect_files.append(path)
    return Loaded(every, per_tool, trusted, warnings, connect_files)


def granted_policies(
    sandbox: SandboxPolicy, tool_policies: Mapping[str, SandboxPolicy], project: str, home: str | None
) -> Granted:
    """The runner's policy, the policies given by name, and the per-tool grants' policies; and warnings.

    ``tool_policies`` (given in code) are kept by name: the caller chose them
    for a name it loads itself. ``tool_grants`` are the config files'
    ``[tools.NAME]``, which the registry applies only where :func:`reaches`.
    """
    found = load(project, home)
    warnings = list(found.warnings)
    dropped = False

    def onto(grants: Grants, policy: SandboxPolicy) -> SandboxPolicy:
        nonlocal dropped
        if policy.network == "netns" and grants.allow_connect:
            dropped = True
            grants = msgspec.structs.replace(grants, allow_connect=())
        return grants.onto(policy)

    base = onto(found.every, sandbox)
    policies = {name: onto(found.every, policy) for name, policy in tool_policies.items()}
    grants = {name: onto(g, policies.get(name, base)) for name, g in found.per_tool.items()}
    if dropped:
        warnings.append(
            f"allow_connect in {', '.join(found.connect_files)} is not applied under network='netns' (an empty "
            "network namespace has nothing to connect to); use --network off to let a strict tool reach those ports"
        )
    return Granted(base, policies, grants, found.project_trusted, warnings)


# --- needs declared but not granted -------------------------------------------------------


def _covered(path: str, granted: tuple[str, ...]) -> bool:
    real = os.path.realpath(os.path.expanduser(path))
    for grant in granted:
        root = os.path.realpath(grant)
        if real == root or real.startswith(root.rstrip("/") + "/"):
            return True
    return False


def missing(requires: Requires, policy: SandboxPolicy, folders: tuple[str, ...] = ()) -> list[str]:
    """The flags that would grant what ``requires`` declares and ``policy`` does not allow (``strict`` only).

    ``folders`` are readable anyway (the tool's folder, the project directory).
    """
    if policy.level != "strict":
        return []
    flags: list[str] = []
    execs = {os.path.basename(name) for name in policy.allow_exec} | set(policy.allow_exec)
    flags += [f"--allow-exec {name}" for name in requires.programs if name not in execs]
    readable = (*policy.extra_read_paths, *policy.extra_write_paths, *folders)
    flags += [f"--allow-read {path}" for path in requires.read if not _covered(path, readable)]
    flags += [f"--allow-write {path}" for path in requires.write if not _covered(path, policy.extra_write_paths)]
    flags += [f"--allow-connect {port}" for port in requires.ports() if port not in policy.allow_connect]
    return flags


class Described(Protocol):
    """A loaded tool (``ToolInfo``), as far as its needs go."""

    @property
    def name(self) -> str: ...
    @property
    def module(self) -> str: ...
    @property
    def requires(self) -> Requires | None: ...


def ungranted_note(tool: Described, policy: SandboxPolicy, project: str) -> str | None:
    """A warning for a tool whose declared needs ``policy`` does not grant; None when it grants them all.

    Such a tool still runs: it may need a grant on one path only, and what it
    is then denied says so in its error. Refusing would stop calls that work.
    """
    folders = (os.path.dirname(tool.module), project)
    flags = missing(tool.requires, policy, folders) if tool.requires is not None else []
    if not flags:
        return None
    name = tool.name
    return (
        f"tool {name!r} declares needs the strict sandbox does not grant: {' '.join(flags)} "
        f"(or [tools.{name}] in ~/.xcsh/config.toml); it runs anyway, and an operation it is denied says so"
    )
