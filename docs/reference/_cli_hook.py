"""mkdocs hook: the CLI page is the real ``xcsh-run --help`` and every command's ``--help``.

Printed by the CLI's own entry point in a fresh interpreter of the project's
venv (the one running mkdocs), as a plain 100-column terminal shows them, so
the page matches what a user sees and cannot drift from the CLI.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from typing import Any

MARKER = "<!-- xcsh-run:help -->"
PAGE = "reference/cli.md"

# One interpreter prints every help: a cold start per command would cost more
# than the rest of the build.
_SCRIPT = """
import contextlib, io, json
import typer
from xcsh_run._cli.run import app, main

def help_text(args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main([*args, "--help"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    return out.getvalue()

names = list(typer.main.get_command(app).commands)
print(json.dumps({"": help_text([]), **{name: help_text([name]) for name in names}}))
"""


_pending: subprocess.Popen[str] | None = None


def _start() -> subprocess.Popen[str]:
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1"}
    env.pop("FORCE_COLOR", None)
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def help_texts() -> dict[str, str]:
    """``{"": xcsh-run --help, COMMAND: xcsh-run COMMAND --help, ...}``, in the CLI's order of commands."""
    global _pending
    proc, _pending = _pending or _start(), None
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"printing xcsh-run's help failed (exit {proc.returncode}): {err}")
    texts: dict[str, str] = json.loads(out)
    return texts


def render() -> str:
    parts: list[str] = []
    for name, text in help_texts().items():
        title = f"xcsh-run {name}" if name else "xcsh-run"
        parts += [f"## {title}", "", "<pre><code>" + html.escape(text) + "</code></pre>", ""]
    return "\n".join(parts)


def on_pre_build(config: Any) -> None:
    # Started now, collected when the CLI page is rendered: the helps are
    # printed while the API pages are being generated.
    global _pending
    _pending = _start()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise RuntimeError(f"{PAGE} lost its {MARKER} marker: the generated CLI help has nowhere to go")
    return markdown.replace(MARKER, render())
