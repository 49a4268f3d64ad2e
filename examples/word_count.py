"""word_count: counts the words, lines and characters of a text (a tool `xcsh-run fuzz` finds nothing wrong with)."""

from typing import Annotated

import msgspec


class Params(msgspec.Struct, forbid_unknown_fields=True):
    text: str
    top: Annotated[int, msgspec.Meta(ge=0, le=20)] = 3


def factory(api):
    def execute(tool_call_id, params: Params, on_update, ctx, signal):
        words = params.text.split()
        counts: dict[str, int] = {}
        for word in words:
            counts[word] = counts.get(word, 0) + 1
        top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: params.top]
        return {
            "content": [{"type": "text", "text": f"{len(words)} words, {len(params.text.splitlines())} lines"}],
            "details": {"words": len(words), "chars": len(params.text), "top": top},
        }

    return api.pi.CustomTool(
        name="word_count",
        label="Word Count",
        description="Counts the words, lines and characters of a text",
        parameters=Params,
        execute=execute,
    )
