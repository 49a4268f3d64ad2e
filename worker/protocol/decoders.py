"""Typed decoders, made once per type: payloads into their method's types, and a whole answer in one pass.

Rule 3 (``messages.py``) keeps ``params`` and ``result`` as Raw until the
receiver knows their type. For an answer that costs two passes over its
result: the envelope pass that finds the Raw member, and the typed decode of
it. An answer in this side's own encoding (``{"id":N,"result":...``) to a
request whose method is known can instead be decoded whole, once, into a
struct whose ``result`` has the method's result type. That is only a faster
way to the same answer: a body it does not accept goes the general way,
which decides, and words any error.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

import msgspec

_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {}
_ANSWER_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {}
# How encode_message starts a Response; no other start is looked at.
_ANSWER_HEAD: Final = re.compile(rb'\{"id":(0|[1-9][0-9]{0,17}),"result":')


def decoder(tp: Any) -> msgspec.json.Decoder[Any]:
    """The decoder of values of type ``tp``."""
    found = _DECODERS.get(tp)
    if found is None:
        found = _DECODERS[tp] = msgspec.json.Decoder(tp)
    return found


def answer_id(body: bytearray | memoryview) -> int | None:
    """The request id of a body that starts like this side's encoding of a Response; None for any other."""
    head = _ANSWER_HEAD.match(body)
    return None if head is None else int(head[1])


class TooDeep(Exception):
    """An answer to one of our requests whose value nests deeper than this side's decoder can go."""


def decode_answer(tp: Any, body: bytearray | memoryview, req_id: int) -> tuple[Any] | None:
    """``(result,)`` if ``body`` is exactly a Response to ``req_id`` with a ``tp`` result; None if in any doubt.

    Raises:
        TooDeep: it is such a Response, nested too deep to decode (a RecursionError in msgspec).
    """
    found = _ANSWER_DECODERS.get(tp)
    if found is None:
        fields = [("id", int), ("result", tp), ("jsonrpc", Literal["2.0"])]
        found = _ANSWER_DECODERS[tp] = msgspec.json.Decoder(
            msgspec.defstruct("TypedResponse", fields, forbid_unknown_fields=True)
        )
    try:
        answer = found.decode(body)
    except msgspec.DecodeError:
        return None
    except RecursionError:
        raise TooDeep from None
    return (answer.result,) if answer.id == req_id else None  # not so for a repeated "id" member
