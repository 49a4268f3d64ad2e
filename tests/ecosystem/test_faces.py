"""The faces helper itself: one call of a plain tool answers the same on every face and level."""

from __future__ import annotations

import pytest
import trio

from tests._support.faces import FACES, LEVELS, open_face
from tests.conftest import TOOLS


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("face", FACES)
async def test_a_plain_call_answers_alike_on_every_face(face: str, level: str) -> None:
    with trio.fail_after(90):
        async with open_face(face, level, str(TOOLS / "basic.py")) as f:
            good = await f.call("add", {"a": 1, "b": 2})
            bad = await f.call("add", {"a": "x"})
    assert (good.is_error, good.text, good.details) == (False, "3", {"sum": 3})
    assert bad.is_error
