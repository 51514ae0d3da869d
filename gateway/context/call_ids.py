"""Tool-call ids sent short.

A client's tool-call ids (`call_` and 24 random characters from OpenAI, `toolu_` and 24 from
Anthropic) pair a call with its result inside one request and mean nothing else to the
model: the upstream never answers with an old id, so the client never needs its own back.
On a long agent session they are a fixed share of every call (tau-bench's 300-call ticket
queues: 2.5% of the characters the client sends; `bench/README.md`, "Short tool-call ids").
A managed call sends every id longer than `SHORT_ID_CHARS` as `short_id(id)`: a pure
function of the id (9 characters, letters and digits, as strict upstreams ask), so

- a call and its result, renamed apart, still pair (every wire adapter renames both sides
  with the same function: `gateway/wire/responses.py`, `gateway/wire/messages.py`);
- a message renders the same bytes on every call of its session (the prefix cache holds),
  whatever was dropped or rewritten around it;
- nothing is remembered: a new process, a lost prefix cache rename alike.

Two ids of one request that hash alike (53 bits: ~5e-11 for 1,000 ids) would pair wrongly;
that is accepted. Ids of `SHORT_ID_CHARS` or fewer are sent as they are.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import is_
from typing import Any

SHORT_ID_CHARS = 9  # Mistral's rule for a call id: exactly 9 of [a-zA-Z0-9]
_ALPHABET = string.digits + string.ascii_letters


@lru_cache(maxsize=65536)
def short_id(call_id: str) -> str:
    """The id a call (and its result) is sent with: `call_id` itself when it is short."""
    if len(call_id) <= SHORT_ID_CHARS:
        return call_id
    n = int.from_bytes(hashlib.blake2b(call_id.encode(), digest_size=8).digest(), "big")
    chars = []
    for _ in range(SHORT_ID_CHARS):
        n, r = divmod(n, len(_ALPHABET))
        chars.append(_ALPHABET[r])
    return "".join(chars)


def renamed(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """A chat message with its tool calls' ids (assistant) or its `tool_call_id` (tool)
    short; the message itself when it has none to shorten."""
    calls = message.get("tool_calls")
    if calls:
        new = [
            {**call, "id": short_id(call["id"])}
            if isinstance(call, Mapping) and isinstance(call.get("id"), str)
            and len(call["id"]) > SHORT_ID_CHARS else call
            for call in calls
        ]
        if all(map(is_, new, calls)):
            return message
        return {**message, "tool_calls": new}
    call_id = message.get("tool_call_id")
    if isinstance(call_id, str) and len(call_id) > SHORT_ID_CHARS:
        return {**message, "tool_call_id": short_id(call_id)}
    return message


@dataclass(slots=True)
class ShortIds:
    """The chat messages a session's last managed call forwarded, before and after their ids
    were shortened: a call whose messages start with the very same objects (a session's
    calls only append between steps, `prefix.py`) renames only the new ones. Kept with the
    session's prefix, as `calls.RepeatScan` is."""

    source: list[Mapping[str, Any]] = field(default_factory=list)
    out: list[Mapping[str, Any]] = field(default_factory=list)
    changed: bool = False  # whether any of `out` differs from its source

    def rename(self, messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        n = len(self.source)
        if n and n <= len(messages) and messages[n - 1] is self.source[n - 1] and all(
            map(is_, self.source, messages)
        ):
            new = [renamed(m) for m in messages[n:]]
            self.out = self.out + new
            self.changed = self.changed or not all(map(is_, new, messages[n:]))
        else:  # a step rewrote some: the others, the very same objects, are taken as made
            # wherever they now stand (a step that left messages out moves the later ones;
            # an id is `source`'s message's while `source` holds it)
            made = dict(zip(map(id, self.source), self.out, strict=True))
            self.out = [made.get(id(m)) or renamed(m) for m in messages]
            self.changed = not all(map(is_, self.out, messages))
        self.source = list(messages)
        return self.out
