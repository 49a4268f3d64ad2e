"""The project's text speaks of the project alone: no issue, pull-request or ticket numbers.

What a reader has is the project: a number that points to a tracker says
nothing to them, and goes stale when the thing it names lands. Read here: the
README, docs/, the examples, the Makefile and CI, and every comment and
docstring of runner/, worker/ and tests/ (their string literals too, where a
``#2`` may be data: only the words ``issue`` and ``PR`` are looked for there).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# "issue 17", "issues #3", "PR 12", "pull request #4", "GH-9", a tracker's URL, "#12" in prose (not an
# anchor such as protocol.md#6-errors, nor an HTML entity), and "the issue" as the thing being built.
CITATION = re.compile(
    r"(?i)\b(?:issues?|pr|pull request|ticket)\s*#?\d+"
    r"|\bgh-\d+\b|/(?:issues|pull)/\d+"
    r"|(?<![\w/.&#-])#\d+\b"
    r"|\b(?:the|this|that) issue(?:'s)?\b|the_issue"
)
# In source files the hash of "#2" can be data (a todo list's "#1: milk"): there, words only.
WORDS_ONLY = re.compile(
    r"(?i)\b(?:issues?|pr|pull request)\s*#?\d+|/(?:issues|pull)/\d+|\b(?:the|this|that) issue(?:'s)?\b|the_issue"
)
PROSE = ("README.md", "docs", "examples", "Makefile", ".ci", "mkdocs.yml")
SOURCES = ("runner", "worker", "tests", "bench", "fuzz")


def _files(entries: tuple[str, ...]) -> list[Path]:
    found: list[Path] = []
    for entry in entries:
        path = ROOT / entry
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        found += [p for p in candidates if "node_modules" not in p.parts and "__pycache__" not in p.parts]
    return found


def citations(text: str, pattern: re.Pattern[str] = CITATION) -> list[tuple[int, str]]:
    """Each (line, match) of ``pattern`` in ``text``."""
    return [(n, m.group(0)) for n, line in enumerate(text.splitlines(), 1) for m in pattern.finditer(line)]


def _scan(paths: list[Path], pattern: re.Pattern[str]) -> list[str]:
    found = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary
        if path == Path(__file__).resolve():
            continue  # this file spells out what it looks for
        found += [f"{path.relative_to(ROOT)}:{n}: {hit!r}" for n, hit in citations(text, pattern)]
    return found


def test_the_docs_and_readme_cite_no_issue_numbers() -> None:
    found = _scan(_files(PROSE), CITATION)
    assert not found, "say what the project does, not which tracker entry it came from:\n" + "\n".join(found)


def test_the_sources_cite_no_issue_numbers() -> None:
    found = _scan(_files(SOURCES), WORDS_ONLY)
    assert not found, "say what the code does, not which tracker entry it came from:\n" + "\n".join(found)


def test_the_pattern_catches_citations_and_leaves_anchors_and_data() -> None:
    cited = [
        "until the Bun worker lands (issue 17)", "fixed in #42.", "see issues #3 and #4", "PR 12", "GH-9",
        "https://github.com/o/r/issues/5", "as the issue writes it", "the issue's 50,000 examples",
    ]  # fmt: skip
    for text in cited:
        assert citations(text), text
    for text in ["[protocol.md](protocol.md#6-errors)", "&#39;", "Agents issue calls in parallel", "a `#` comment"]:
        assert not citations(text), text
    assert not citations('"[ ] #1: milk"', WORDS_ONLY) and citations("# issue 17: why", WORDS_ONLY)
