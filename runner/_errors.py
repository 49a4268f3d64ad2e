"""Exceptions the runner raises. Calls never raise them: they become results.

::

    RunnerError
    ├── ConfigError(RunnerError, ValueError)          a bad option or path given to the runner
    ├── RunnerClosedError(RunnerError, RuntimeError)  a runner used after its block ended
    ├── UnsupportedPlatform                           not Linux: xcsh-run runs nowhere else
    ├── ProtocolError                                 cannot be instantiated directly
    │   ├── LocalProtocolError                        we tried to send something illegal: a bug here
    │   └── RemoteProtocolError                       the worker sent something that is not the protocol
    ├── WorkerError
    │   ├── WorkerStartupError                        the worker could not be started
    │   └── WorkerDied                                the worker exited; carries how and its stderr tail
    ├── RemoteError                                   the worker answered a request with an error object
    └── RemoteRequestRefused                          a host handler refuses a worker's request (internal)

The three protocol errors are also the protocol layer's own
(``xcsh_run.worker.protocol.messages.ProtocolError`` and its two subclasses), so that an
``except`` on either hierarchy catches them: the protocol layer raises its
classes, and the runner re-raises nothing it does not have to.
"""

from __future__ import annotations

import signal as _signal
from typing import Any

from xcsh_run.worker.protocol import messages as _messages


class RunnerError(Exception):
    """Base class of everything the runner raises."""


class ConfigError(RunnerError, ValueError):
    """An option given to the runner is invalid; the message says which and how to fix it."""


class RunnerClosedError(RunnerError, RuntimeError):
    """A runner was used once closed: its calls belong inside the ``with`` block that opened it.

    A ``RuntimeError``, not a ``ConfigError``: what is wrong is when the call
    came, not an option. Its message names the block the calls belong in.
    """


def runner_closed(block: str) -> RunnerClosedError:
    """The error for a runner opened by ``block`` (``"async with open_runner(...)"``) and used once closed."""
    return RunnerClosedError(
        f"this runner is closed: make its calls inside the `{block}` block that opened it, "
        "or open a new runner to call again"
    )


class UnsupportedPlatform(RunnerError):
    """This system is not Linux, the only one xcsh-run runs on; the message says how to run it from here.

    Raised by `open_runner` (and so by every opener) before anything starts.
    """


class ProtocolError(RunnerError, _messages.ProtocolError):
    """The protocol was broken. Raise one of the two subclasses."""

    def __init__(self, message: str) -> None:
        if type(self) is ProtocolError:
            raise TypeError("raise LocalProtocolError or RemoteProtocolError, not ProtocolError")
        super().__init__(message)


class LocalProtocolError(ProtocolError, _messages.LocalProtocolError):
    """The host tried to send something the protocol does not allow (a bug in xcsh-run)."""


class RemoteProtocolError(ProtocolError, _messages.RemoteProtocolError):
    """The worker sent bytes that are not the protocol."""


class WorkerError(RunnerError):
    """Something happened to a worker process."""


class WorkerStartupError(WorkerError):
    """The worker process could not be started (missing interpreter, fd limit, ...)."""


class WorkerDied(WorkerError):
    """The worker exited while the host still expected an answer.

    Attributes:
        returncode: the exit status, or minus the signal number; None if it is
            not known (e.g. a forked worker whose fork server died before it).
        stderr_tail: the last of what the worker wrote to stderr.
    """

    def __init__(self, returncode: int | None, stderr_tail: str) -> None:
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        super().__init__(f"worker {describe_exit(returncode)}")

    @property
    def signal_name(self) -> str | None:
        return signal_name(self.returncode)

    @property
    def exit_code(self) -> int | None:
        return self.returncode if self.returncode is not None and self.returncode >= 0 else None


class RemoteError(RunnerError):
    """The worker answered a request with a JSON-RPC error object (``error``)."""

    def __init__(self, error: _messages.ErrorObject) -> None:
        self.error = error
        super().__init__(error.message)

    @property
    def data(self) -> dict[str, Any]:
        return self.error.data if isinstance(self.error.data, dict) else {}


class RemoteRequestRefused(RunnerError):
    """Raised by a host handler to answer a worker's request with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


def signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return _signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "ended, and its exit status could not be read (the teardown log says why)"
    name = signal_name(returncode)
    if name is None:
        return f"exited with code {returncode}"
    return f"was killed by {name}"
