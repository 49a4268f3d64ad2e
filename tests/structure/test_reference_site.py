"""The check of the built reference (docs/reference/_site_check.py) finds each thing --strict lets through.

Each rule is fed a small site shaped as mkdocstrings renders one, with the
problem and without it; the real site is built and checked by
``test_api_types.py`` (and by ``make docs``, whose build runs the check as a hook).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def check() -> Iterator[ModuleType]:
    """The hook's module, loaded from its file as mkdocs loads it (registered while in use: it has a dataclass)."""
    spec = importlib.util.spec_from_file_location("site_check", ROOT / "docs" / "reference" / "_site_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def _class(name: str, signature: str | None, text: str) -> str:
    """A class as mkdocstrings renders it: heading, optional merged signature, then its own text."""
    shown = f'<div class="doc-signature highlight"><pre><code>{signature}</code></pre></div>' if signature else ""
    return (
        f'<div class="doc doc-object doc-class"><h2 id="pkg.{name}" class="doc doc-heading">'
        f'<code class="doc-symbol doc-symbol-heading doc-symbol-class"></code>'
        f'<span class="doc doc-object-name doc-class-name">{name}</span></h2>{shown}'
        f'<div class="doc doc-contents first"><p class="doc doc-class-bases">Bases: <code>Base</code></p>'
        f"<p>{text}</p>"
        f'<h3 id="pkg.{name}.call" class="doc doc-heading">call</h3><p>Get one from nowhere.</p></div></div>'
    )


CLEAN = (
    '<h1 id="top">Runners</h1><p>See <a href="#pkg.open"><code>open</code></a> and '
    '<a href="other.html#there">there</a>, or <a href="https://example.org/#x">elsewhere</a>.</p>'
    '<h2 id="pkg.open">open</h2><div class="doc-signature highlight"><pre><code>open(\n'
    "    timeout: float = 60.0,\n    size: int = 64 * 1024,\n    level: str = LEVELS[0],\n)</code></pre></div>"
    "<p>Code may show <code>[a][b]</code> and <code>x = DEFAULT_TIMEOUT</code>.</p>"
    + _class("Runner", None, "Owns workers. Get one from <code>open</code>.")
    + _class("Config", "Config(*, timeout: float = 60.0)", "Every option.")
)


def _problems(check: ModuleType, tmp_path: Path, page: str) -> list[str]:
    (tmp_path / "other.html").write_text('<h1 id="there">Other</h1>')
    (tmp_path / "404.html").write_text('<a href="#nowhere">home</a>')
    (tmp_path / "page.html").write_text(f"<html><body>{page}</body></html>")
    return list(check.problems(tmp_path))


def test_a_clean_site_passes(check: ModuleType, tmp_path: Path) -> None:
    assert _problems(check, tmp_path, CLEAN) == []


@pytest.mark.parametrize("role", [":class:", ":func:", ":meth:", ":mod:", ":attr:", ":data:", ":exc:"])
def test_a_sphinx_role_fails(check: ModuleType, tmp_path: Path, role: str) -> None:
    page = CLEAN + f"<p>Get one from {role}<code>open_runner</code>.</p>"
    assert _problems(check, tmp_path, page) == [f"page.html: a Sphinx role {role!r} shows as text (rule 1)"]


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ('<p><autoref identifier="pkg.Gone">Gone</autoref></p>', "1 cross-reference(s) left unresolved as <autoref>"),
        ("<p>See [<code>Runner</code>][pkg.Runner] too.</p>", "the cross-reference [Runner][pkg.Runner] shows as text"),
        ('<p><a href="#pkg.gone">gone</a></p>', "the link '#pkg.gone' names no id 'pkg.gone' on page.html"),
        ('<p><a href="other.html#gone">gone</a></p>', "the link 'other.html#gone' names no id 'gone' on other.html"),
        ('<p><a href="missing.html">gone</a></p>', "the link 'missing.html' leads to no page"),
    ],
)
def test_an_unresolved_cross_reference_fails(check: ModuleType, tmp_path: Path, extra: str, problem: str) -> None:
    assert _problems(check, tmp_path, CLEAN + extra) == [f"page.html: {problem} (rule 2)"]


@pytest.mark.parametrize("constant", ["DEFAULT_TIMEOUT", "p.DEFAULT_MAX_FRAME_BYTES"])
def test_a_constant_name_as_a_default_fails(check: ModuleType, tmp_path: Path, constant: str) -> None:
    page = CLEAN.replace("timeout: float = 60.0,\n", f"timeout: float = {constant},\n")
    assert _problems(check, tmp_path, page) == [
        f"page.html: open's signature shows {constant} as a default, not its value (rule 3)"
    ]


def test_a_constructor_shown_for_a_class_one_gets_from_an_opener_fails(check: ModuleType, tmp_path: Path) -> None:
    page = CLEAN.replace(
        _class("Runner", None, "Owns workers. Get one from <code>open</code>."),
        _class("Runner", "Runner(nursery: Nursery)", "Owns workers. Get one\nfrom <code>open</code>."),
    )
    assert _problems(check, tmp_path, page) == [
        "page.html: pkg.Runner shows a constructor, but one gets it from an opener (rule 4)"
    ]
