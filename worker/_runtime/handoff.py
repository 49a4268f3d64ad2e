"""The handoff to a JavaScript worker: the handshake's Python half, then ``exec`` of Bun in the same process.

A worker for a ``.ts``/``.js``/``.mjs`` tool module is started like a Python
one, with ``--bun BUN --js-main MAIN [--typebox DIR]`` added. ``_loop.main``
runs the handshake up to and including the sandbox (the version check, the
supervisor, Landlock, seccomp, rlimits, the uid drop: every level means the
same for both languages, and every refusal is this code's), then calls
:func:`exec_bun` instead of serving. Bun replaces this program in the same
process (same pid, same cgroup, same sandbox: Landlock, seccomp and
no_new_privs survive ``execve``) and answers ``initialize`` itself, from the
state handed over in ``XCSH_WORKER_INIT`` (docs: contract of ``worker/js``).

What is deliberately not done here, because it is Python-only: the audit hook
that explains denials, the watch on dropped environment variables, and the
SIGTERM handler. The host sends no SIGTERM before the answer to
``initialize``, which Bun writes after installing its own handler, so there
is no window where SIGTERM would find the default action. SIGINT stays
ignored: SIG_IGN survives ``execve``.
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import Callable
from typing import NoReturn

import msgspec

from xcsh_run.worker._sandbox import withheld_env as _env
from xcsh_run.worker.protocol import ErrorCode
from xcsh_run.worker.protocol import methods as m

INIT_ENV = "XCSH_WORKER_INIT"
"""The one variable Bun is started with on top of the worker's environment; deleted before tool code runs."""


class JsLaunch(msgspec.Struct, frozen=True):
    """What ``--bun``, ``--js-main`` and ``--typebox`` named."""

    bun: str
    main: str
    typebox: str = ""

    @property
    def bunfig(self) -> str:
        # The worker's empty config, whatever main is: with -c, the bunfig.toml
        # of the directory a tool runs in (preloads, plugins) is never read.
        return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "js", "bunfig.toml")

    def argv(self) -> list[str]:
        # "--config=PATH" in one word: Bun takes "-c PATH" as "-c" and a script named PATH.
        return [self.bun, "--no-install", "--no-env-file", f"--config={self.bunfig}", self.main]


def parse(argv: list[str]) -> JsLaunch | None:
    """The JS launch ``argv`` asks for, or None for a Python worker. Exits 2 on a half-given one."""
    if "--bun" not in argv and "--js-main" not in argv:
        return None

    def value(flag: str) -> str:
        try:
            return argv[argv.index(flag) + 1]
        except (ValueError, IndexError):
            sys.stderr.write(
                "usage: python -m xcsh_run.worker --fd-in R --fd-out W --bun BUN --js-main MAIN [--typebox DIR] "
                "(started by the xcsh-run host)\n"
            )
            raise SystemExit(2) from None

    return JsLaunch(value("--bun"), value("--js-main"), value("--typebox") if "--typebox" in argv else "")


def init_env(
    launch: JsLaunch,
    *,
    init_id: int | str,
    params: m.InitializeParams,
    unenforced: list[str],
    supervisor: int,
    fds: tuple[int, int, int],
    buffered: bytes,
    dropped: list[str] | None = None,
) -> str:
    """The compact JSON of ``XCSH_WORKER_INIT``: everything Bun needs to answer ``initialize`` and go on."""
    fd_in, fd_out, kill_fd = fds
    return msgspec.json.encode(
        {
            "id": init_id,
            "params": params,
            "unenforced": unenforced,
            "supervisor": supervisor,
            "fd_in": fd_in,
            "fd_out": fd_out,
            "kill_fd": kill_fd,
            "buffered": base64.b64encode(buffered).decode(),
            "typebox": launch.typebox,
            # Beyond the contract's first draft: what XCSH_RUN_DROPPED_ENV held (``_sandbox.withheld_env``).
            "dropped": dropped or [],
        }
    ).decode()


def exec_bun(
    launch: JsLaunch,
    *,
    init_id: int | str,
    params: m.InitializeParams,
    unenforced: list[str],
    supervisor: int,
    fds: tuple[int, int, int],
    buffered: bytes,
    refuse: Callable[[ErrorCode, str], NoReturn],
) -> NoReturn:
    """Replace this process with Bun, handing over the protocol fds and the handshake; refuse if it cannot run.

    Only returns through ``refuse`` (which answers ``initialize`` with -32007 and exits 3).
    """
    fd_in, fd_out, kill_fd = fds
    # Not inherited by a tool's children: the Bun side marks them close-on-exec
    # again for what it spawns (it passes explicit stdio to every child).
    for fd in (fd_in, fd_out, kill_fd):
        if fd >= 0:
            os.set_inheritable(fd, True)
    env = dict(os.environ)
    # The names the host left out, for the JS worker's hints: in the handover, not in
    # an environment a tool and its children (Bun.spawn's startup snapshot) would see.
    dropped = [name for name in env.pop(_env.DROPPED_ENV, "").split(",") if name]
    env[INIT_ENV] = init_env(
        launch,
        init_id=init_id,
        params=params,
        unenforced=unenforced,
        supervisor=supervisor,
        fds=fds,
        buffered=buffered,
        dropped=dropped,
    )
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:
        os.execve(launch.bun, launch.argv(), env)
    except OSError as exc:
        why = exc.strerror or str(exc)
        hint = (
            " (the sandbox does not let the worker run it: it must be listed in the strict level's exec paths)"
            if exc.errno in (13, 1)  # EACCES, EPERM
            else ""
        )
        message = (
            f"the JavaScript worker could not start Bun {launch.bun}: {why}{hint}; "
            "install it with `xcsh-run install-bun`, put bun on PATH, or set XCSH_RUN_BUN to a Bun executable"
        )
        sys.stderr.write(f"xcsh-run worker: {message}\n")
        refuse(ErrorCode.SANDBOX_UNAVAILABLE, message)
