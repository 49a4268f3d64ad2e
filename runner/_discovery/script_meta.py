"""A tool module's own dependencies: its PEP 723 ``# /// script`` block, read without importing it.

The block is found with the specification's own regular expression, its
content parsed with ``tomllib``, and its two fields checked as the
specification says (https://packaging.python.org/specifications/inline-script-metadata/):

- ``dependencies``: a list of dependency specifiers (PEP 508);
- ``requires-python``: a version specifier that the interpreter xcsh-run runs
  tools on must satisfy (a tool's environment is made from that interpreter;
  no other one is fetched).

Other keys (``[tool]`` tables, fields of later specifications) are ignored;
an unclosed block is ignored, as the specification requires; two ``script``
blocks, invalid TOML or an invalid field are a :class:`ScriptMetaError` that
names the file and the line. Only files and package folders (their
``__init__.py``) have such a block: an installed plugin's dependencies are
its distribution's.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, Final

import msgspec

from xcsh_run._safe_read import SOURCE_MAX_BYTES, read_capped

# The specification's regular expression, verbatim.
REGEX: Final = r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$"
SPEC_URL: Final = "https://packaging.python.org/specifications/inline-script-metadata/"
_TOML_AT: Final = re.compile(r"\(at line (\d+), column (\d+)\)")


class ScriptMetaError(Exception):
    """The module's ``# /// script`` block is malformed; the message names the file, the line and the fix."""


class ScriptMeta(msgspec.Struct, frozen=True):
    """What a ``# /// script`` block asks for.

    Attributes:
        path: the file the block is in.
        line: the 1-based line of its ``# /// script`` line.
        dependencies: the specifiers, normalised (canonical names, sorted
            specifiers), without duplicates, sorted: two blocks that ask for
            the same set have the same tuple.
        requires_python: the ``requires-python`` specifier, or None.
    """

    path: str
    line: int
    dependencies: tuple[str, ...]
    requires_python: str | None = None


def module_source(resolved: str, is_dir: bool) -> str:
    """The file whose block describes the module: the file itself, or a package folder's ``__init__.py``."""
    return f"{resolved.rstrip('/')}/__init__.py" if is_dir else resolved


def read(path: str) -> ScriptMeta | None:
    """The ``script`` block of the file at ``path``; None if it has none (or no dependencies).

    Raises ScriptMetaError for a malformed block and OSError for an unreadable file.
    """
    # The tool's own file, a link to one allowed; a FIFO or device in its place is an OSError, not a hang.
    text = read_capped(path, SOURCE_MAX_BYTES, follow=True).decode("utf-8", errors="surrogateescape")
    return parse(text, path)


def parse(text: str, path: str) -> ScriptMeta | None:
    """:func:`read` on the text of a file (``path`` names it in messages)."""
    if "# /// script" not in text:  # the common case, without the regular expression
        return None
    blocks = [m for m in re.finditer(REGEX, text) if m.group("type") == "script"]
    if not blocks:
        return None
    lines = [_line_of(text, m.start()) for m in blocks]
    if len(blocks) > 1:
        raise ScriptMetaError(
            f"{path}: line {lines[1]}: a second `# /// script` block (the first is at line {lines[0]}); "
            "PEP 723 allows one, merge them"
        )
    import tomllib  # here: most modules have no block, and a cold CLI should not pay for the parser

    line = lines[0]
    content = "".join(
        row[2:] if row.startswith("# ") else row[1:] for row in blocks[0].group("content").splitlines(keepends=True)
    )
    try:
        data = tomllib.loads(content)
    except tomllib.TOMLDecodeError as exc:
        raise ScriptMetaError(f"{path}: {_toml_problem(str(exc), line)}") from None
    return _fields(data, path, line)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _toml_problem(message: str, line: int) -> str:
    """tomllib's message with its line counted in the file, not in the block's content."""
    found = _TOML_AT.search(message)
    if found is None:
        return f"line {line}: the `# /// script` block is not valid TOML ({message}); see {SPEC_URL}"
    at = line + int(found.group(1))
    what = message[: found.start()].strip()
    return (
        f"line {at}: the `# /// script` block (line {line}) is not valid TOML: {what} (column {found.group(2)}); "
        f"every line of the block is `# ` and a line of TOML, see {SPEC_URL}"
    )


def _fields(data: dict[str, Any], path: str, line: int) -> ScriptMeta | None:
    import platform

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    where = f"{path}: line {line}: the `# /// script` block's"
    deps = data.get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise ScriptMetaError(
            f'{where} `dependencies` must be a list of strings, such as dependencies = ["requests>=2.31"]'
        )
    normalised: set[str] = set()
    for dep in deps:
        try:
            req = Requirement(dep)
        except InvalidRequirement as exc:
            raise ScriptMetaError(
                f"{where} dependency {dep!r} is not a valid requirement ({str(exc).splitlines()[0]}); "
                "write it as for pip, "
                'such as "requests>=2.31"'
            ) from None
        # pip's --only-binary does not apply to a direct reference: it would build this one on the host.
        if req.url and not urllib.parse.urlsplit(req.url).path.endswith(".whl"):
            raise ScriptMetaError(
                f"{where} dependency {dep!r} names a source, not a wheel: only wheels are installed, never "
                "built (a build runs the package's code on this machine, outside the sandbox); build the "
                "wheel yourself (`pip wheel --no-deps SOURCE -w DIR`) and name the .whl file, or point "
                "PIP_FIND_LINKS (or UV_FIND_LINKS) at DIR and name the package"
            )
        normalised.add(_normalise(req))
    requires = data.get("requires-python")
    if requires is not None:
        if not isinstance(requires, str):
            raise ScriptMetaError(f'{where} `requires-python` must be a string, such as requires-python = ">=3.11"')
        try:
            specifier = SpecifierSet(requires)
        except InvalidSpecifier:
            raise ScriptMetaError(
                f'{where} `requires-python` {requires!r} is not a version specifier, such as ">=3.11"'
            ) from None
        here = platform.python_version()
        if not specifier.contains(here, prereleases=True):
            raise ScriptMetaError(
                f"{where} requires-python {requires!r} excludes Python {here}, the interpreter xcsh-run runs "
                "tools with (the one it is installed in); change requires-python, or install xcsh-run with a "
                "Python that matches it"
            )
    if not normalised:
        return None  # nothing to install: the tool runs as any other
    return ScriptMeta(path=path, line=line, dependencies=tuple(sorted(normalised)), requires_python=requires)


def _normalise(req: Any) -> str:
    """One spelling per requirement: ``Six >= 1.16`` and ``six>=1.16`` ask for the same thing."""
    from packaging.utils import canonicalize_name

    text: str = canonicalize_name(req.name)
    if req.extras:
        text += "[" + ",".join(sorted(canonicalize_name(e) for e in req.extras)) + "]"
    if req.url:
        text += f" @ {req.url}"
    elif req.specifier:
        text += str(req.specifier)  # packaging sorts the clauses
    if req.marker is not None:
        text += f"; {req.marker}"
    return text
