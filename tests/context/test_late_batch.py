"""The session records a mask batch a step left out (`SessionState.late_batch`): only the
batch that catches up after it keeps the on-time phase (`compress._expired_digests`);
a batch no step left out, on a long session's tail, masks every digest due
(bench/README.md, "Short runs' cost @0.1, part six")."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.context.engine import _late_batch, _leave_unrepaid
from gateway.context.items import parse_request
from gateway.context.session import Decision, MemorySessionStore, SessionState
from gateway.context.stages.base import StageContext
from gateway.context.taskclass import Compaction, task_class
from gateway.context.tokens import TokenCounter

COUNTER = TokenCounter()
REPAY = Compaction(verbatim_tokens_high=1000, verbatim_tokens_low=0, max_step_share=0.2,
                   repay_calls=20, early_max_tokens=8000, repay_young_calls=30)
MASK = Decision("compress", "mask", "aged", "mask", 1)
DIGEST = Decision("compress", "compress", "aged", "summary")


def _messages() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You help customers."},
                                  {"role": "user", "content": "my order " * 50}]
    for k in range(4):
        msgs += [{"role": "assistant", "content": f"looking up {k} " * 5},
                 {"role": "user" if k == 0 else "assistant", "content": f"reply {k} " * 100}]
    # the agent calls its tools through the API (a text-tool session is never weighed,
    # `steps.on_first_task`): message 3 is that call's output, the first task goes on
    msgs[2]["tool_calls"] = [{"id": "c0", "type": "function",
                              "function": {"name": "lookup", "arguments": "{}"}}]
    msgs[3] = {"role": "tool", "tool_call_id": "c0", "content": msgs[3]["content"]}
    return msgs


def _left_out(early: Decision) -> tuple[bool, dict[str, Decision]]:
    """A step on the second call taking a few tokens from message 3 (decided `early`) and
    half of message 7 (a digest): message 3's rewrite does not repay its re-send
    (`steps.unrepaid`, as in tests/context/test_steps.py) and is left out."""
    msgs = _messages()
    before = parse_request({"messages": msgs}, COUNTER, "o200k_base").items
    taken = {3: 10, 7: next(i.tokens for i in before if i.message_index == 7) // 2}
    final = [replace(i, text=i.text[: len(i.text) // 2], tokens=i.tokens - taken[i.message_index])
             if i.message_index in taken else i for i in before]
    cls = task_class("t", {"compaction": REPAY.model_dump()})
    ctx = StageContext(task_class=cls, counter=COUNTER, encoding="o200k_base", embedder=None,
                       fixed_tokens=3, horizon=9, query="", originals={i.id: i for i in before},
                       decisions={}, calls=2)
    by_index = {i.message_index: i.id for i in before}
    ctx.decisions[by_index[3]] = early
    ctx.decisions[by_index[7]] = DIGEST
    state = SessionState(calls=1)
    kept, horizon, batch = _leave_unrepaid(msgs, before, final, ctx, {}, state, REPAY, 9)
    assert horizon == 9  # message 7's digest repays: the step is taken
    was = {i.id: i.text for i in before}
    assert [i.text == was[i.id] for i in kept if i.message_index in (3, 7)] == [True, False]
    return batch, ctx.decisions


def test_a_step_that_leaves_out_a_mask_of_the_batch_says_so() -> None:
    batch, decisions = _left_out(MASK)
    assert batch
    assert MASK not in decisions.values()  # the left-out message keeps its old form
    assert DIGEST in decisions.values()


def test_a_step_that_leaves_out_only_digests_left_no_batch_out() -> None:
    batch, decisions = _left_out(replace(DIGEST, text="short"))
    assert not batch and MASK not in decisions.values()


def test_the_next_batch_is_late_until_a_batch_comes() -> None:
    decisions = {"a": MASK, "b": DIGEST}
    assert _late_batch(False, True, decisions, ["b"])  # a step left a batch out
    assert _late_batch(True, False, decisions, ["b"])  # digests only: still late
    assert _late_batch(True, False, decisions, [])  # no change (a call without a step)
    assert not _late_batch(True, False, decisions, ["a", "b"])  # the batch came
    assert _late_batch(True, True, decisions, ["a"])  # came, but part of it left out again
    assert not _late_batch(False, False, decisions, ["a"])


def test_the_late_batch_is_kept_with_the_sessions_counts() -> None:
    state = SessionState(horizon=7, calls=20, steps=3, late_batch=True)
    raw = {b"horizon": state.encode("horizon")}
    assert raw[b"horizon"] == b"7:20:3:1"
    again = SessionState.decode(raw)
    assert (again.horizon, again.calls, again.steps, again.late_batch) == (7, 20, 3, True)
    # none recorded: the field as before, and a record from before reads as none
    assert SessionState(horizon=7, calls=20, steps=3).encode("horizon") == b"7:20:3"
    old = SessionState.decode({b"horizon": b"7:20:3"})
    assert (old.steps, old.late_batch) == (3, False)


async def test_the_memory_store_keeps_the_late_batch() -> None:
    store = MemorySessionStore()
    state = await store.load("t1", "s")
    state.calls, state.late_batch = 5, True
    state.dirty.add("horizon")
    await store.save("t1", "s", state)
    loaded = await store.load("t1", "s")
    assert (loaded.calls, loaded.late_batch) == (5, True)
