"""Property tests: any valid message list comes out valid, within budget or refused loudly,
pinned items byte-identical, and the drop log adds up."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import parse_request
from gateway.errors import ContextBudgetExceeded

WORDS = st.text(alphabet="abcdefghij klmnop/.:0123456789\n", min_size=1, max_size=400)


@st.composite
def conversations(draw: Any) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(WORDS)})
    msgs.append({"role": "user", "content": draw(WORDS)})
    for t in range(draw(st.integers(0, 8))):
        if draw(st.booleans()):
            ids = [f"c{t}_{k}" for k in range(draw(st.integers(1, 2)))]
            msgs.append(
                {
                    "role": "assistant",
                    "content": draw(WORDS),
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {"name": "bash", "arguments": "{}"},
                        }
                        for i in ids
                    ],
                }
            )
            msgs.extend({"role": "tool", "tool_call_id": i, "content": draw(WORDS)} for i in ids)
        else:
            msgs.append({"role": "assistant", "content": draw(WORDS)})
        if draw(st.booleans()):
            msgs.append({"role": "user", "content": draw(WORDS)})
    return msgs


def _check_valid(messages: list[dict[str, Any]]) -> None:
    open_calls: set[str] = set()
    answered: set[str] = set()
    for msg in messages:
        assert msg["role"] in ("system", "user", "assistant", "tool")
        if msg["role"] == "assistant":
            assert open_calls <= answered, "a tool call lost its result"
            open_calls = {c["id"] for c in msg.get("tool_calls") or ()}
            answered = set()
        if msg["role"] == "tool":
            assert msg["tool_call_id"] in open_calls
            answered.add(msg["tool_call_id"])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    msgs=conversations(),
    budget=st.integers(20, 3000),
    cls=st.sampled_from(["coding_agent", "plain_chat", "default", "retrieval_qa"]),
)
async def test_fit_is_valid_bounded_and_accounted(
    engine: ContextEngine, msgs: list[dict[str, Any]], budget: int, cls: str
) -> None:
    call = CallContext(
        tenant="prop",
        trace_id="t",
        headers={
            "x-ctxgate-budget-tokens": str(budget),
            "x-ctxgate-task-class": cls,
            "x-ctxgate-session-id": f"p{id(msgs)}",
        },
    )
    parsed = parse_request({"messages": msgs}, engine.counter, "o200k_base")
    pinned = parsed.base_tokens + sum(i.tokens for i in parsed.items if i.pinned)
    try:
        fitted = await engine.fit({"messages": msgs}, call)
    except ContextBudgetExceeded as exc:
        assert exc.allowed == budget and exc.needed > budget
        return
    assert pinned <= budget
    out = fitted.body["messages"]
    _check_valid(out)
    assert fitted.tokens_after <= budget
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after
    # order kept: the output is a subsequence of the input by (role, tool ids)
    pos = 0
    for msg in out:
        while (msgs[pos]["role"], msgs[pos].get("tool_call_id")) != (
            msg["role"],
            msg.get("tool_call_id"),
        ):
            pos += 1
        pos += 1
    # pinned messages byte-identical
    for item in parsed.items:
        if (
            item.pinned
            and item.segment == 0
            and len([i for i in parsed.items if i.message_index == item.message_index]) == 1
        ):
            assert msgs[item.message_index] in out
