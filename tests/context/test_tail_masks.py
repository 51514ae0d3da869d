"""A counted text-tool run (its harness says how many calls are left) rewrites a result on
the call where it stops being the newest, when that repays over the calls left
(`engine._tail_masks`, `steps.tail_mask_repays`): the rewrite lands at the tail of what the
last call sent, so it re-sends only itself (bench/README.md, "Short runs beside masking at
equal recall")."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.steps import tail_mask_repays
from tests.context.test_calls_left import _run


def test_a_tail_rewrite_repays_over_the_calls_left() -> None:
    # 400 tokens cached at 0.1 (40) -> 40 at full price now, 360 * 0.1 saved on each later call
    assert tail_mask_repays(400, 40, 2, 0.1)
    # never on the last call: it would save on that call alone (here 40 <= 40 cached) and
    # still change the cached prefix
    assert not tail_mask_repays(400, 40, 1, 0.1)
    assert not tail_mask_repays(400, 4, 1, 0.1)
    assert not tail_mask_repays(400, 60, 1, 0.1)
    assert not tail_mask_repays(100, 60, 2, 0.1)
    assert tail_mask_repays(100, 20, 4, 0.1)


async def _calls(engine: ContextEngine, messages: list[dict[str, Any]], sid: str
                 ) -> list[list[str]]:
    headers = {"x-ctxgate-session-id": sid, "x-ctxgate-task-class": "default"}
    out = []
    for end in [i for i, m in enumerate(messages) if m["role"] == "assistant"]:
        fitted = await engine.fit({"messages": messages[:end]}, CallContext("t-tail", "s", headers))
        out.append([str(m["content"]) for m in fitted.body["messages"]])
    return out


async def test_a_counted_run_rewrites_a_result_as_it_stops_being_the_newest(
    engine: ContextEngine,
) -> None:
    messages = _run(counted=True)
    calls = await _calls(engine, messages, "tail-counted")
    for k in (2, 3):  # the 3rd and 4th calls (3 and 2 calls left): a result older than the newest
        sent, before = calls[k], calls[k - 1]
        aging = len(before) - 1  # the result the last call ended with
        assert sent[:aging] == before[:aging]  # nothing before it changes
        assert len(sent[aging]) < len(messages[aging]["content"]) / 3  # it goes shorter
        assert sent[aging + 1:] == [str(m["content"]) for m in messages[aging + 1:len(sent)]]
    # on the last call (1 left) the newly aged result's digest does not repay: it stays
    assert calls[4][6] == messages[6]["content"]
    # its rows' values stay readable, the last ones first (a digest, not keep-1's placeholder)
    assert "1443" in calls[-1][2] and "You have 4 steps left" in calls[-1][2]
    # an uncounted run of the same turns sends its results verbatim until a step
    plain = await _calls(engine, _run(counted=False), "tail-uncounted")
    assert plain[2][2] == _run(counted=False)[2]["content"]
