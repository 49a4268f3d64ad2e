"""The orchestrator's side of ``bench._driver``: start peer processes, send ops, collect replies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class PeerFailed(Exception):
    pass


class Driver:
    """One peer process. ``call(op, **kwargs)`` returns the op's value or raises PeerFailed."""

    def __init__(self, name: str, spec: str, kwargs: dict[str, Any], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - kept for the process's life
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench._driver", spec, json.dumps(kwargs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=ROOT,
            text=True,
        )
        self.ops: list[str] = []
        self.pid = 0
        self.error: str | None = None

    def wait_ready(self) -> None:
        try:
            hello = self._read()
        except PeerFailed as exc:
            self.error = str(exc)
            return
        self.ops, self.pid = hello["ready"], hello["pid"]

    @property
    def ok(self) -> bool:
        return self.error is None

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise PeerFailed(f"{self.name} exited ({self.proc.returncode}); log tail: {self.log_tail()}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise PeerFailed(reply["error"].strip().splitlines()[-1])
        return reply

    def call(self, op: str, **kwargs: Any) -> Any:
        if self.error is not None:
            raise PeerFailed(self.error)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"op": op, **kwargs}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise PeerFailed(f"{self.name} is gone; log tail: {self.log_tail()}") from None
        return self._read()["ok"]

    def log_tail(self, n: int = 300) -> str:
        try:
            return self.log_path.read_text()[-n:].replace("\n", " | ")
        except OSError:
            return ""

    def close(self, timeout: float = 30) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


def start_all(specs: dict[str, tuple[str, dict[str, Any]]], log_dir: Path) -> dict[str, Driver]:
    """Start every peer at once, then wait for each to be ready (set-up is not timed)."""
    drivers = {name: Driver(name, spec, kwargs, log_dir) for name, (spec, kwargs) in specs.items()}
    for driver in drivers.values():
        driver.wait_ready()
    return drivers


def child_env(**changes: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env
