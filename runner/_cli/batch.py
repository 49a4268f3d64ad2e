"""The ``batch`` command: one tool over a file of arguments, one JSON result line per input line.

The calls run through :func:`run_batch`; this module reads the input, writes
the lines as calls complete, resumes from an earlier output, draws the
progress bar (on a terminal) and prints the summary. docs/scale-out.md has
the format, the resume rules and the exit codes.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import stat
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import IO, Annotated, Any, Final, Protocol

import trio
import typer

from xcsh_run._cli.app import app
from xcsh_run._cli.app import run_main as _run
from xcsh_run._cli.complete import complete_tool
from xcsh_run._cli.options import (
    CwdOpt,
    ExitCode,
    GraceOpt,
    LoadTimeoutOpt,
    LogFileOpt,
    TimeoutOpt,
    ToolsOpt,
    VerboseOpt,
    check_seconds,
    fail,
    with_sandbox_options,
)
from xcsh_run._cli.output import suggest_command, warn
from xcsh_run._config import DEFAULT_GRACE, DEFAULT_LOAD_TIMEOUT
from xcsh_run._discovery import ToolInfo
from xcsh_run._embed import BatchItem, BatchResults, CallsTools, jsonl_inputs, run_batch
from xcsh_run._host import Signals, open_runner
from xcsh_run._safe_text import visible
from xcsh_run._sandbox import SandboxPolicy
from xcsh_run._terminal import ProgressDisplay, configure_log_file, draws_progress

# ----------------------------------------- where the calls run: local or Ray
# Where ``xcsh-run batch`` runs its calls: a local runner, or with ``--ray`` one runner per node of a Ray cluster.
#
# Both are opened here so that the command itself only reads, writes and
# counts; the batch over either is the same :func:`run_batch`. Ray is imported
# only when ``--ray`` is given.


class BatchRunner(CallsTools, Protocol):
    """What the command needs of either runner: calls, cancels, its tools and warnings."""

    @property
    def warnings(self) -> list[str]: ...

    def get_tool(self, name: str) -> ToolInfo | None: ...

    def cancel(self, tool_call_id: str, reason: str = "cancelled", *, force: bool = False) -> bool: ...


def check_ray(address: str | None) -> None:
    """Fail (usage, exit 2) at once if ``--ray`` was given and Ray is not installed: the message says how to get it."""
    if address is None:
        return
    if not address.strip():
        fail("--ray needs the cluster's address: auto (the cluster on this machine), HOST:PORT or ray://HOST:10001")
    from xcsh_run.ray import RayMissing, import_ray

    try:
        import_ray()
    except RayMissing as exc:
        fail(str(exc))


@contextlib.asynccontextmanager
async def open_batch_runner(
    ray: str | None,
    tools: Sequence[str],
    *,
    tool: str,
    concurrency: int | None,
    verbose: int,
    options: Mapping[str, Any],
    sandbox: SandboxPolicy,
) -> AsyncIterator[tuple[BatchRunner, int]]:
    """The runner and the batch's concurrency.

    Locally the runner gets ``concurrency`` workers (default: twice the cores,
    at least 4). Over Ray each node's runner keeps its own default
    ``max_workers`` (twice that node's cores, at least 4), and the default
    concurrency is their sum: every worker of every node busy, none queued.
    """
    if ray is None:
        from xcsh_run._config import default_max_workers

        workers = concurrency if concurrency is not None else default_max_workers()
        async with open_runner(
            tools, sandbox=sandbox, wanted_tool=tool, discover_sources=True, max_workers=workers, **options
        ) as runner:
            yield runner, workers
        return
    from xcsh_run.ray import open_ray_runner

    # With no --tools, the project folder travels (Ray honours its .gitignore) and each node discovers its tools.
    shipping: dict[str, Any] = {"working_dir": os.getcwd()} if not tools else {}
    init = {"logging_level": "INFO" if verbose else "WARNING"}
    async with open_ray_runner(
        list(tools), address=ray, sandbox=sandbox, init_options=init, **shipping, **options
    ) as ray_runner:
        yield ray_runner, concurrency if concurrency is not None else max(1, ray_runner.worker_limit)


OK: Final = "ok"


class Previous:
    """What an earlier run left in ``--output``: the indices done and their kinds.

    A last line cut short (no newline, or not a whole result) is what a run
    killed mid-write leaves: it is dropped from the file and its input runs
    again. A bad line anywhere else means the file is not a batch's output.
    Only a regular file is read: a pipe or a device is written to, as stdout is.
    """

    def __init__(self, path: str | None) -> None:
        self.done: set[int] = set()
        self.kinds: collections.Counter[str] = collections.Counter()
        if path is None or (os.path.exists(path) and not os.path.isfile(path)):
            return  # stdout, a pipe, a device: nothing to resume from, nothing to cut
        try:
            f = open(path, "r+b")  # noqa: SIM115 - closed below, after the truncation
        except FileNotFoundError:
            return
        except OSError as exc:
            fail(f"cannot read --output {path!r}: {exc.strerror}")
        with f:
            good_end = 0
            bad: str | None = None
            for number, raw in enumerate(f, 1):
                if bad is not None:
                    fail(
                        f"--output {path!r} is not the output of `xcsh-run batch`: line {number - 1} {bad}; "
                        "give another --output file, or remove that line"
                    )
                index, kind, bad = _parse_line(raw)
                if bad is None:
                    assert index is not None
                    self.done.add(index)
                    self.kinds[kind] += 1
                    good_end += len(raw)
            if good_end < f.seek(0, os.SEEK_END):
                f.truncate(good_end)


def _parse_line(raw: bytes) -> tuple[int | None, str, str | None]:
    """``(index, kind, None)`` for a whole result line, else ``(None, "", why not)``."""
    if not raw.endswith(b"\n"):
        return None, "", "is cut short"
    try:
        value = json.loads(raw)
    except ValueError:
        return None, "", "is not JSON"
    index = value.get("index") if isinstance(value, dict) else None
    if not isinstance(index, int) or isinstance(index, bool):
        return None, "", 'has no integer "index"'
    error = value.get("error")
    return index, (error.get("kind") if isinstance(error, dict) else None) or OK, None


def _open_input(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")  # the command's whole run reads it
    except OSError as exc:
        fail(f"cannot read --input {path!r}: {exc.strerror}; give a file of JSON objects, one a line, or - for stdin")


def _remaining(path: str, done: set[int]) -> int:
    """The inputs of a regular file not yet done (the progress bar's total), read once without parsing."""
    with open(path, "rb") as f:
        return sum(1 for index, line in enumerate(f) if line.strip() and index not in done)


_END: Final = object()


async def _pulled_in_thread(inputs: Iterator[tuple[int, Any]]) -> AsyncIterator[tuple[int, Any]]:
    # A pipe or a terminal may keep a read waiting: never on the runner's thread.
    while (item := await trio.to_thread.run_sync(next, inputs, _END, abandon_on_cancel=True)) is not _END:
        yield item  # type: ignore[misc]


class Tally:
    """Results by kind, this run's and the earlier runs', for the progress bar, the summary and the exit code."""

    def __init__(self, previous: Previous) -> None:
        self.before = sum(previous.kinds.values())
        self.kinds = collections.Counter(previous.kinds)
        self.now = 0
        self.started = time.monotonic()

    def add(self, item: BatchItem) -> None:
        self.kinds[item.result.kind or OK] += 1
        self.now += 1

    def failed(self) -> str:
        return ", ".join(f"{n} {kind}" for kind, n in sorted(self.kinds.items()) if kind != OK)

    def summary(self, output: str | None) -> str:
        total = sum(self.kinds.values())
        kinds = sorted(self.kinds.items(), key=lambda kv: (kv[0] != OK, kv[0]))
        parts = ", ".join(f"{n} {kind}" for kind, n in kinds) or "no results"
        wall = time.monotonic() - self.started
        rate = self.now / wall if wall else 0.0
        text = f"{total} calls: {parts} ({self.now} run now in {wall:.1f} s, {rate:.1f} calls/s"
        if self.before:
            text += f"; {self.before} already in {output}"
        return text + ")"

    def exit_code(self) -> int:
        return int(ExitCode.OK if set(self.kinds) <= {OK} else ExitCode.TOOL_ERROR)


class Bar:
    """The progress bar on stderr, in the CLI's one progress style (``_terminal``), only when stderr is a terminal."""

    def __init__(self, total: int | None, tally: Tally) -> None:
        self._tally = tally
        self._progress: Any = None
        if not draws_progress(sys.stderr):
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn

        self._display = ProgressDisplay(
            sys.stderr,
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]}", markup=False),
            TextColumn("{task.fields[rate]}", markup=False),
            TimeRemainingColumn(),
        )
        self._progress = self._display.progress
        self._task = self._progress.add_task("batch", total=total, failed="", rate="")
        self._display.start()

    def advance(self) -> None:
        if self._progress is not None:
            wall = time.monotonic() - self._tally.started
            failed = self._tally.failed()
            rate = f"{self._tally.now / wall:.1f} calls/s" if wall > 0 else ""
            self._progress.update(self._task, advance=1, failed=f"failed: {failed}" if failed else "", rate=rate)

    def close(self) -> None:
        if self._progress is not None:
            self._display.stop()
            self._progress = None


@app.command("batch")
@with_sandbox_options
def batch_command(
    tool: Annotated[str, typer.Argument(help="The tool's name.", autocompletion=complete_tool)],
    input_path: Annotated[
        str,
        typer.Option("--input", metavar="FILE", help="The calls' arguments, one JSON object a line; '-' reads stdin."),
    ],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            metavar="FILE",
            help="Append the result lines here; run again with the same FILE to resume (lines done are skipped) "
            "[stdout].",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            help="Calls running at once [twice the cores, >= 4; with --ray: the sum of the nodes' max_workers].",
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Run the calls on a Ray cluster, one runner per node: 'auto' (the cluster on this machine), "
            "HOST:PORT or ray://HOST:10001. Needs pip install 'xcsh-run[ray]'.",
        ),
    ] = None,
    timeout: TimeoutOpt = None,
    grace: GraceOpt = DEFAULT_GRACE,
    tools: ToolsOpt = None,
    load_timeout: LoadTimeoutOpt = DEFAULT_LOAD_TIMEOUT,
    log_file: LogFileOpt = None,
    verbose: VerboseOpt = 0,
    cwd: CwdOpt = None,
    *,
    sandbox: SandboxPolicy,
) -> None:
    """Run a tool once per line of --input, several calls at once; one JSON result line per input line.

    \b
    Each output line is {"index": N, "content", "details", "is_error", "error"}
    (N: the input line's number minus one), written as its call completes.
    A line that is not a JSON object is an invalid_arguments result; the
    batch goes on. A summary by result kind ends on stderr.

    \b
    Exit codes:
      0  every call succeeded (those of earlier runs in --output included)
      1  some call's result is an error (any kind; see the summary)
      2  usage error: bad flags, an unreadable --input or --output, unknown tool
    130  interrupted: running calls were cancelled and left out of --output;
         run the same command again to resume
    """
    if concurrency is not None and concurrency < 1:
        fail(f"--concurrency must be at least 1, got {concurrency}")
    check_ray(ray)
    check_seconds(timeout=timeout, grace=grace, load_timeout=load_timeout)
    configure_log_file(log_file, verbose=verbose)
    source = _open_input(input_path)
    previous = Previous(output)
    regular = stat.S_ISREG(os.fstat(source.fileno()).st_mode)
    total = _remaining(input_path, previous.done) if regular and input_path != "-" else None
    try:
        # Unbuffered: each line is one write(2) at once, whole or failing there (a full disk).
        sink: IO[bytes] = open(output, "ab", buffering=0) if output is not None else sys.stdout.buffer  # noqa: SIM115
    except OSError as exc:
        fail(f"cannot write --output {output!r}: {exc.strerror}")
    tally = Tally(previous)
    unwritten: list[OSError] = []

    async def main(signals: Signals) -> bool | None:
        async with open_batch_runner(
            ray, tools or (), tool=tool, concurrency=concurrency, verbose=verbose, sandbox=sandbox,
            options={"grace": grace, "load_timeout": load_timeout},
        ) as (runner, workers):  # fmt: skip
            warn(runner.warnings)
            if runner.get_tool(tool) is None:
                return None  # said once the runner is closed: no exception may cross its nursery
            lines = jsonl_inputs(source)
            inputs = lines if regular else _pulled_in_thread(lines)
            bar = Bar(total, tally)
            stop = trio.CancelScope()
            batch: list[BatchResults] = []
            signalled = 0

            def on_signal(sig: Any) -> bool:
                # The first signal stops the batch: no call starts, the running ones go
                # through their ladder and are left out of the output (a rerun runs them);
                # the second kills them now.
                nonlocal signalled
                signalled += 1
                bar.close()
                if signalled == 1:
                    if batch:
                        batch[0].stop()  # the results that finished meanwhile are still written
                    else:
                        stop.cancel()
                    again = "press Ctrl-C again" if sig.name == "SIGINT" else f"send {sig.name} again"
                    count = len(batch[0].running) if batch else 0
                    say(f"stopping {count} running calls (killing in {grace:.1f} s; {again} to kill now)")
                else:
                    running = batch[0].running if batch else {}
                    if signalled == 2:
                        say(f"killing {len(running)} running calls and every process they started now")
                    for call_id in running.values():
                        runner.cancel(call_id, f"interrupted by {sig.name}", force=True)
                return True

            try:
                with signals.handled_by(on_signal), stop:
                    async with run_batch(runner, tool, inputs, concurrency=workers, skip=previous.done,
                                         timeout=timeout) as results:  # fmt: skip
                        batch.append(results)
                        async for item in results:
                            try:
                                _write(sink, json.dumps(item.to_json(), ensure_ascii=False).encode() + b"\n")
                            except OSError as exc:  # a full disk, a closed pipe: leaving stops the calls
                                unwritten.append(exc)
                                break
                            tally.add(item)
                            bar.advance()
            finally:
                bar.close()
            return signalled == 0

    try:
        finished = _run(main)
    finally:
        if output is not None:
            with contextlib.suppress(OSError):  # each line was written at once: nothing is left to lose
                sink.close()
    if finished is None:
        suggest_command(tool)
        fail(f"no tool named {tool!r}; `xcsh-run list` shows the tools found")
    name = output if output is not None else "the output"
    say(tally.summary(name))
    if unwritten:
        where = f"--output {output!r}" if output is not None else "stdout"
        fail(f"cannot write {where}: {unwritten[0].strerror or unwritten[0]}; the batch stopped, rerun to resume")
    if not finished:
        say(f"interrupted: {tally.now} results written; run the same command again to resume")
        raise typer.Exit(int(ExitCode.CANCELLED))
    raise typer.Exit(tally.exit_code())


def _write(sink: IO[bytes], data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = sink.write(view)
        if not written:  # a blocking file never writes nothing: say so rather than loop
            raise OSError(errno.EIO, "the output accepted no bytes")
        view = view[written:]
    sink.flush()


def say(text: str) -> None:
    typer.echo(f"xcsh-run batch: {visible(text)}", err=True)
