"""Tool-call arguments rendered shorter, still a JSON object with the same keys.

An assistant turn's tool calls are sent as the model wrote them; on agents that re-run the
same command (intercode: 38.5% of a late call's characters are tool-call JSON) they are what
is left once old outputs are digested. Two renderings, both pure and deterministic, both
valid for every wire format (Chat `arguments` string, Responses `function_call.arguments`,
Anthropic `tool_use.input`: the result parses to a JSON object with the original keys):

- `repeat_pointer`: a call whose arguments repeat, byte for byte, an earlier call's of the
  same request: each string value becomes a pointer to that call. Nothing is lost while the
  earlier call is sent as it came (its copy is in the same request), and nothing sent before
  changes (the first copy stays; a repeat is known from the earlier messages alone).
- `cut_arguments`: long string values of an aged call cut to their start with a marker
  saying how much was cut; values a later call repeats are kept whole.

`repeated_calls` finds the repeats of a chat message list. Not wired into the engine yet:
`bench/call_args.py` measures what they would save on the forwarded calls.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import orjson

REPEAT_MIN_CHARS = 120  # shorter arguments stay: a pointer is ~50 characters
CUT_KEEP_CHARS = 40


def _object(arguments: str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _map_strings(value: Any, change: Any) -> Any:
    """`value` with every string leaf (not the keys) passed through `change`."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {k: _map_strings(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, change) for v in value]
    return value


def repeat_pointer(arguments: str, call_id: str) -> str | None:
    """The arguments of a call repeating call `call_id`'s: each string value a pointer to
    it. None when the arguments are not a JSON object."""
    parsed = _object(arguments)
    if parsed is None:
        return None
    note = f"[ctxgate: same as call {call_id}]"
    return orjson.dumps(_map_strings(parsed, lambda _s: note)).decode()


def cut_arguments(
    arguments: str, max_chars: int, keep: Collection[str] = (), keep_chars: int = CUT_KEEP_CHARS
) -> str | None:
    """The arguments with string values over `max_chars` cut to their first `keep_chars`
    and a marker; values in `keep` stay whole. None when nothing is cut or the arguments
    are not a JSON object."""
    parsed = _object(arguments)
    if parsed is None:
        return None

    cuts = 0

    def cut(s: str) -> str:
        nonlocal cuts
        if len(s) <= max_chars or s in keep:
            return s
        cuts += 1
        return f"{s[:keep_chars]}…[ctxgate: {len(s) - keep_chars} chars cut]"

    out = orjson.dumps(_map_strings(parsed, cut)).decode()
    return out if cuts and len(out) < len(arguments) else None


def _arguments(call: Mapping[str, Any]) -> str | None:
    function = call.get("function")
    raw = function.get("arguments") if isinstance(function, Mapping) else None
    return raw if isinstance(raw, str) else None


def repeated_calls(
    messages: Sequence[Mapping[str, Any]], min_chars: int = REPEAT_MIN_CHARS
) -> dict[tuple[int, int], str]:
    """Per (message index, call index): the arguments a repeated call is sent with, for
    every call whose arguments (`min_chars` or more) repeat an earlier call's."""
    first: dict[str, str] = {}  # arguments -> id of the first call that used them
    out: dict[tuple[int, int], str] = {}
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant":
            continue
        for k, call in enumerate(msg.get("tool_calls") or ()):
            raw = _arguments(call) if isinstance(call, Mapping) else None
            if raw is None or len(raw) < min_chars:
                continue
            earlier = first.get(raw)
            if earlier is None:
                first[raw] = str(call.get("id", ""))
                continue
            pointer = repeat_pointer(raw, earlier)
            if pointer is not None and len(pointer) < len(raw):
                out[(i, k)] = pointer
    return out
