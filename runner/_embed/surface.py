"""One surface, documented once: the faces of the runner take their members' docstrings from :class:`Runner`.

Rules:

1. **The Runner's docstring is the only text** of a member: a face's member
   of the same name gets it with :func:`runner_doc`, so there is no copy to
   drift. What is true only of one face is a ``note`` after the Runner's text.
2. **Settings are not forwarded at all**: the read-only members that only
   read ``config`` come from ``RunnerSettings``, which the trio, blocking and
   asyncio faces all inherit.
3. **A face's body only forwards** (and hops threads): what a member does is
   the Runner's. ``tests/structure/test_runner_parity.py`` checks names,
   parameters and docstrings against the Runner.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from xcsh_run._host import Runner

F = TypeVar("F", bound=Callable[..., Any])


def doc_of(name: str) -> str:
    """The docstring of the Runner's member ``name`` (cleaned as ``inspect.getdoc`` does)."""
    member = inspect.getattr_static(Runner, name, None)
    doc = inspect.getdoc(member) if member is not None else None
    if not doc:
        raise AttributeError(f"Runner has no documented member {name!r}: a face can only share a Runner member's doc")
    return doc


@overload
def runner_doc(fn: F, /) -> F: ...
@overload
def runner_doc(*, note: str) -> Callable[[F], F]: ...
def runner_doc(fn: F | None = None, /, *, note: str | None = None) -> F | Callable[[F], F]:
    """Give a face's member the docstring of the Runner's member of the same name, then ``note`` if given.

    For a property, put it below ``@property`` (the property takes its
    getter's docstring when it is made).
    """

    def share(member: F) -> F:
        doc = doc_of(member.__name__)
        member.__doc__ = doc if note is None else f"{doc}\n\n{inspect.cleandoc(note)}"
        return member

    return share(fn) if fn is not None else share
