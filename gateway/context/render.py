"""Render the fitted items back into a valid message list.

Messages whose items all survive unchanged are the client's own objects; a rewritten message
is a shallow copy with new `content`; a message none of whose items survive is left out
(units make tool calls and their results leave together). Order is never changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.context.items import Item


@dataclass(frozen=True, slots=True)
class Rendered:
    messages: list[Mapping[str, Any]]
    changed: bool
    digests: list[str]  # rolling digest after each rendered message (prefix identity)


def render_messages(
    messages: Sequence[Mapping[str, Any]], original: Sequence[Item], final: Sequence[Item]
) -> Rendered:
    by_message: dict[int, list[Item]] = {}
    for item in final:
        by_message.setdefault(item.message_index, []).append(item)
    originals = {item.id: item for item in original}
    out: list[Mapping[str, Any]] = []
    digests: list[str] = []
    rolling = hashlib.blake2b(digest_size=12)
    changed = False
    segments_of: dict[int, int] = {}
    for item in original:
        segments_of[item.message_index] = segments_of.get(item.message_index, 0) + 1
    for i, msg in enumerate(messages):
        kept = by_message.get(i)
        if not kept:
            changed = True
            continue
        same = len(kept) == segments_of.get(i, 0) and all(
            originals[item.id].text is item.text or originals[item.id].text == item.text
            for item in kept
        )
        if same:
            out.append(msg)
        else:
            changed = True
            out.append({**msg, "content": "".join(item.text for item in kept)})
        for item in kept:
            rolling.update(item.id.encode())
            if not same:
                rolling.update(hashlib.blake2b(item.text.encode(), digest_size=8).digest())
        digests.append(rolling.hexdigest())
    return Rendered(out, changed, digests)
