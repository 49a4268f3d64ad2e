"""The README's examples print what it says they print: its first command, run in this repository.

The README shows the output as a pattern where it changes with every commit
(``Found <N> files``: ``<N>`` is any count), so the line stays true.
"""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT, XCSH_RUN

COMMAND = """xcsh-run repo_stats --args '{"glob":"*.py"}'"""


def _shown_output() -> str:
    """What the README says its first example command prints (the comment after it)."""
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith(COMMAND + " ") and "#" in line:
            return line.split("#", 1)[1].strip()
    raise AssertionError(f"the README no longer shows {COMMAND} with its output")


def test_the_first_readme_example_prints_what_the_readme_shows() -> None:
    shown = _shown_output()
    printed = re.sub(r"\s*\(N: [^)]*\)$", "", shown)  # the note on what N is is not output
    pattern = re.escape(printed).replace(re.escape("<N>"), r"[1-9]\d*")
    proc = subprocess.run(
        [XCSH_RUN, "repo_stats", "--args", '{"glob":"*.py"}'], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(pattern, proc.stdout.strip()), (shown, proc.stdout)
