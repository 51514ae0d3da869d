"""A call between steps whose new output repeats an earlier one (`cluster.on_arrival` points
it to the copy sent above) decides the repeat on its session's prefix: it no longer takes the
full path, which re-reads the whole history. What it sends, logs and remembers is what the
full path gives: a plain output repeated, a JSON output repeated (its copy above went out
minified, or goes out minified in the same call), two copies in one exchange, and runs of
repeated lines beside them."""

from __future__ import annotations

import json
import uuid
from typing import Any

from gateway.settings import Settings
from tests.context.sessions import fit_both, memory_engine

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("sh", "get_order")]


def _order(k: int) -> str:
    """A JSON record laid out with spaces (sent minified on arrival)."""
    return json.dumps({"order_id": f"#W{k:04d}", "user_id": "yusuf_rossi_9620",
                       "items": [{"name": "lamp", "price": 130 + k, "options": {"color": "red"}},
                                 {"name": "kettle", "price": 220 + k}],
                       "status": "delivered", "note": f"left at door {k}"}, indent=1)


def _log(k: int) -> str:
    return "".join(f"tests/test_mod{k}.py::test_case_{j} PASSED [{j}%]\n" for j in range(9))


def _output(k: int) -> list[str]:
    """The outputs of turn k: one in three repeats a plain output, one in three a JSON one
    (seen before, or twice in this exchange); some turns re-run a log with a line changed."""
    if k % 6 == 5:
        return [_order(k - 3), _order(k - 3)]  # a repeat of an earlier one, twice
    if k % 6 == 4:
        return [_order(k), _order(k)]  # new, and its copy in the same exchange
    if k % 3 == 2:
        return [_log(k - 2)]  # the same text as two turns ago
    if k % 7 == 6:
        return [_log(k - 6).replace("PASSED [4%]", "FAILED [4%]")]  # repeated lines
    return [_log(k)]


def _session(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You fix failing tests and look up orders."},
        {"role": "user", "content": "Find the failing test, then check order #W0001."},
    ]
    for k in range(turns):
        outputs = _output(k)
        calls = [{"id": f"call_{k}_{j}", "type": "function", "function": {
            "name": "sh" if j == 0 else "get_order",
            "arguments": json.dumps({"command": f"pytest -x -k c{k} part {j}"})}}
            for j in range(len(outputs))]
        messages.append({"role": "assistant", "content": f"Step {k}.", "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": out}
                     for c, out in zip(calls, outputs, strict=True)]
    return messages


async def test_a_repeat_on_arrival_is_decided_on_the_prefix_as_on_the_full_path(
    settings: Settings, embedder: Any
) -> None:
    cached = memory_engine(settings, embedder, True)
    plain = memory_engine(settings, embedder, False)
    session = uuid.uuid4().hex
    messages = _session(48)
    pointed_on_prefix = 0
    async for end, fitted, again, on_prefix in fit_both(cached, plain, messages, TOOLS, session):
        assert (fitted.body, fitted.drops, fitted.tokens_after) == (
            again.body, again.drops, again.tokens_after), end
        mine = await cached.sessions.load("t1", session)
        theirs = await plain.sessions.load("t1", session)
        assert mine.decisions == theirs.decisions, end
        assert (mine.horizon, mine.calls) == (theirs.horizon, theirs.calls), end
        latest = fitted.body["messages"][-2:]
        if on_prefix and any(
                "repeats an earlier" in str(m.get("content")) for m in latest):
            pointed_on_prefix += 1
    # main took the full path on every one of these calls
    assert pointed_on_prefix >= 10, pointed_on_prefix
