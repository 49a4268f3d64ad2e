"""``xcsh-run install-bun``: Bun, TypeBox, zod and arktype from the npm registry, for JavaScript tools."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xcsh_run._cli.app import app
from xcsh_run._cli.options import CwdOpt
from xcsh_run._discovery import (
    ARKTYPE_VERSION,
    BUN_ENV,
    BUN_VERSION,
    TYPEBOX_VERSION,
    ZOD_VERSION,
    BunError,
    default_prefix,
    install,
)


@app.command("install-bun")
def install_bun_command(
    prefix: Annotated[
        Path | None,
        typer.Option("--prefix", help="Install into this folder (default: ~/.cache/xcsh-run/bun).", show_default=False),
    ] = None,
    cwd: CwdOpt = None,
) -> None:
    """Install Bun, TypeBox, zod and arktype (pinned versions) with npm, where xcsh-run looks for them.

    Bun runs the .ts, .js and .mjs tools. A Bun named by XCSH_RUN_BUN, then by
    [runtime] bun in ~/.xcsh/config.toml, comes first; this install comes
    before bun on PATH.

    \b
    Exit codes:
      0  installed (the path is printed)
      1  npm is missing, or the install failed (the reason is printed)
    """
    target = prefix.expanduser().absolute() if prefix is not None else default_prefix()
    typer.echo(
        f"installing bun {BUN_VERSION}, @sinclair/typebox {TYPEBOX_VERSION}, zod {ZOD_VERSION} and "
        f"arktype {ARKTYPE_VERSION} into {target} ...",
        err=True,
    )
    try:
        bun = install(target)
    except BunError as exc:
        typer.echo(f"xcsh-run install-bun: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(str(bun))
    if prefix is not None:
        typer.echo(f"outside the default install dir: export {BUN_ENV}={bun} so that xcsh-run finds it", err=True)
