"""A TCP grant at strict never opens more than the granted ports, even when Landlock fails under best effort.

seccomp opens TCP sockets only because Landlock filters `connect` by port: if
Landlock could not be applied (best effort goes on), seccomp must keep TCP
closed. The failure is injected at a seam (``apply_landlock`` raising, as a
kernel refusal would) in a real subprocess that then applies the rest of the
sandbox to itself and tries a port it was not granted.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

from tests.conftest import needs_strict

PROBE = textwrap.dedent(
    """
    import errno, json, socket, sys
    from xcsh_run.worker._sandbox import apply as _sandbox
    from xcsh_run.worker.protocol.methods import SandboxConfig

    def refused(*args, **kwargs):
        raise OSError(errno.EPERM, "landlock_restrict_self refused (injected)")

    if sys.argv[1] == "fail":
        _sandbox.apply_landlock = refused
    granted, other = int(sys.argv[2]), int(sys.argv[3])
    cfg = SandboxConfig(
        level="strict", best_effort=True, connect_ports=[granted],
        read_paths=["/"], write_paths=[], exec_paths=[sys.executable],
    )
    missing = _sandbox.apply(cfg)
    try:
        with socket.create_connection(("127.0.0.1", other), timeout=5):
            outcome = "connected"
    except OSError as exc:
        outcome = f"refused: {exc.errno}"
    print(json.dumps({"missing": missing, "outcome": outcome}))
    """
)


def _probe(mode: str, granted: int, other: int) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(granted), str(other)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


@needs_strict
def test_a_failed_landlock_keeps_tcp_closed_instead_of_opening_every_port() -> None:
    with socket.socket() as listener, socket.socket() as unused:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        unused.bind(("127.0.0.1", 0))  # the granted port: a different one than the listener's
        granted, other = unused.getsockname()[1], listener.getsockname()[1]
        # Positive control: with Landlock applied, the ungranted port is refused by Landlock.
        applied = _probe("ok", granted, other)
        failed = _probe("fail", granted, other)
    assert str(applied["outcome"]).startswith("refused"), applied
    assert str(failed["outcome"]).startswith("refused"), failed
    assert any("Landlock did not apply" in m for m in failed["missing"]), failed  # type: ignore[attr-defined]
