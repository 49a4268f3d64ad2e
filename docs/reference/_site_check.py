"""mkdocs hook: the built site is read back, and the build fails on what ``--strict`` lets through.

mkdocstrings renders a docstring's Markdown: a Sphinx role (``:class:`Runner```)
comes out as literal text, a default that names a module constant shows the
name instead of the value, and neither is a warning. Every page of the built
site is checked after the build (``on_post_build``), and the build fails with
the list of what is wrong:

1. No Sphinx role (``:class:``, ``:func:``, ``:meth:``, ``:mod:``, ``:attr:``,
   ``:data:``, ``:exc:``, ``:obj:``) anywhere in a page's text: write a
   cross-reference (``[`Runner`][xcsh_run.Runner]``) or backticks.
2. No unresolved cross-reference: no ``<autoref>`` left, no ``[text][id]``
   left as text (a code block or inline code may show one), and every link
   to ``#id`` on this page or to ``page.html#id`` finds that id there.
3. No signature shows an upper-case constant name as a default
   (``default_timeout: float = DEFAULT_TIMEOUT``): the reader wants the value
   (``_runner_docs.py`` rule 3 puts it there).
4. A class whose own text says "Get one from" (``Runner``: from
   ``open_runner``) shows no constructor signature: it has no public one.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`?")
REFERENCE_TEXT = re.compile(r"\[[^\[\]\n]+\]\[[\w.]*\]")
CONSTANT_DEFAULT = re.compile(r"=\s*((?:[A-Za-z_]\w*\.)*[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b")
NO_CONSTRUCTOR = "Get one from"
_CODE_BRACKETS = str.maketrans("[]", "()")
# Pages that are not the documentation's own (mkdocs' 404 page links nowhere it knows).
SKIPPED = {"404.html"}


@dataclass
class _Class:
    """A documented class: its heading's id, whether a signature follows the heading, and its own text."""

    heading: str
    signature: bool = False
    contents: bool = False
    description: str = ""


class _Page(HTMLParser):
    """What the checks read of one page: its ids, links, text (in code or not), signatures and classes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.autorefs = 0
        self.text: list[str] = []
        self.prose: list[str] = []  # text outside <pre>, with inline code's own brackets made parentheses
        self.signatures: list[str] = []
        self.classes: list[_Class] = []
        self._code = 0  # depth of <code>
        self._pre = 0  # depth of <pre>
        self._depth = 0
        self._signature_depth: int | None = None  # while in a signature, the depth of its <div>
        self._heading = ""  # the id of the last heading seen
        self._class: _Class | None = None  # the class whose own text is being read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if re.fullmatch(r"h[1-6]", tag):
            self._class = None  # a class's own text ends at the next heading (its first member's)
        if tag not in ("br", "img", "hr", "input", "meta", "link"):
            self._depth += 1
        if "id" in values:
            self.ids.add(values["id"])
        if tag == "a" and "href" in values:
            self.links.append(values["href"])
        if tag == "autoref":
            self.autorefs += 1
        classes = values.get("class", "").split()
        if tag == "code":
            self._code += 1
        if tag == "pre":
            self._pre += 1
        if tag == "div" and "doc-signature" in classes and self._signature_depth is None:
            self._signature_depth = self._depth
            self.signatures.append("")
            if self._class is not None and not self._class.contents:
                self._class.signature = True
        if tag == "div" and "doc-contents" in classes and self._class is not None:
            self._class.contents = True
        if tag == "code" and {"doc-symbol-heading", "doc-symbol-class"} <= set(classes):
            self._class = _Class(self._heading)
            self.classes.append(self._class)
        if re.fullmatch(r"h[1-6]", tag):
            self._heading = values.get("id", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "code":
            self._code = max(0, self._code - 1)
        if tag == "pre":
            self._pre = max(0, self._pre - 1)
        if self._signature_depth == self._depth and tag == "div":
            self._signature_depth = None
        self._depth -= 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if not self._pre:
            # `[a][b]` in inline code is shown on purpose; [`Runner`][id] around one is not.
            self.prose.append(data.translate(_CODE_BRACKETS) if self._code else data)
        if self._signature_depth is not None:
            self.signatures[-1] += data
        elif self._class is not None and self._class.contents:
            self._class.description += data


def _read(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def problems(site: Path) -> list[str]:
    """Every breach of the rules in the built site under ``site``, one line each (``page: what``)."""
    pages = {
        path.relative_to(site).as_posix(): _read(path)
        for path in sorted(site.rglob("*.html"))
        if path.relative_to(site).as_posix() not in SKIPPED
    }
    found: list[str] = []
    for name, page in pages.items():
        text = "".join(page.text)
        for role in sorted(set(ROLE.findall(text))):
            found.append(f"{name}: a Sphinx role {role.rstrip('`')!r} shows as text (rule 1)")
        if page.autorefs:
            found.append(f"{name}: {page.autorefs} cross-reference(s) left unresolved as <autoref> (rule 2)")
        for reference in sorted(set(REFERENCE_TEXT.findall("".join(page.prose)))):
            found.append(f"{name}: the cross-reference {reference} shows as text (rule 2)")
        for href in page.links:
            missing = _missing_target(site, name, href, pages)
            if missing:
                found.append(f"{name}: the link {href!r} {missing} (rule 2)")
        for signature in page.signatures:
            for constant in CONSTANT_DEFAULT.findall(signature):
                head = signature.strip().split("(", 1)[0]
                found.append(f"{name}: {head}'s signature shows {constant} as a default, not its value (rule 3)")
        for cls in page.classes:
            if cls.signature and NO_CONSTRUCTOR in " ".join(cls.description.split()):
                found.append(f"{name}: {cls.heading} shows a constructor, but one gets it from an opener (rule 4)")
    return found


def _missing_target(site: Path, name: str, href: str, pages: dict[str, _Page]) -> str | None:
    """Why ``href`` (a link on page ``name``) leads nowhere, or None if it is fine or not the site's own."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or not (parts.path or parts.fragment):
        return None
    target = posixpath.normpath(posixpath.join(posixpath.dirname(name), unquote(parts.path))) if parts.path else name
    if parts.path.endswith("/"):
        target = posixpath.join(target, "index.html")
    if target not in pages:
        return None if (site / target).exists() or target in SKIPPED else "leads to no page"
    fragment = unquote(parts.fragment)
    if fragment and fragment not in pages[target].ids:
        return f"names no id {fragment!r} on {target}"
    return None


def on_post_build(config: Any, **kwargs: Any) -> None:
    found = problems(Path(config["site_dir"]))
    if found:
        from mkdocs.exceptions import PluginError

        raise PluginError(
            "the built reference breaks the rules of docs/reference/_site_check.py:\n  " + "\n  ".join(found)
        )
