"""What a compaction step reads again of the session's history, done once (bench/README.md,
"Per-call time on long sessions, part thirty-eight"): the fold's events of what it folds
again, a word's value in a fold note, the cluster stage's question of an item it may not
change, a placeholder's first line."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.context import fold as fold_module
from gateway.context.apply import first_nonblank
from gateway.context.fold import FoldMemo, fold, value_words
from gateway.context.forecast import Budget
from gateway.context.items import parse_request
from gateway.context.session import Decision
from gateway.context.stages import cluster as cluster_module
from gateway.context.stages.base import StageContext
from gateway.context.stages.cluster import cluster_items
from gateway.context.taskclass import BudgetSplit, task_class
from gateway.context.tokens import TokenCounter
from tests.context.test_fold import _queue_session

COUNTER = TokenCounter()


def _fold(messages: list[Mapping[str, Any]], horizon: int, memo: FoldMemo) -> Any:
    original = memo.original(messages, "enc", lambda i: (
        f"id{i}", 30 + len(str(messages[i].get("content")))))
    return fold(messages, None, [], horizon, original, len, memo)


def test_a_steps_fold_sends_the_events_it_makes_again_as_the_last_folds_very_objects() -> None:
    """A step's fold (the horizon moved: folded afresh) makes an event equal to the last
    fold's for each old message it folds again: it is that very object (the drop log then
    resumes past them by identity), and the fold equals the fold with a new memo."""
    memo = FoldMemo()
    messages: list[Mapping[str, Any]] = list(_queue_session(random.Random(7), 200))
    horizon = len(messages) - 40
    first = _fold(messages, horizon, memo)
    assert first is not None
    before = {e.message_index: e for e in first.events}
    second = _fold(messages, horizon + 30, memo)
    fresh = _fold(messages, horizon + 30, FoldMemo())
    assert second.events == fresh.events and second.messages == fresh.messages
    again = [e for e in second.events if e.message_index in before
             and e == before[e.message_index]]
    assert len(again) >= 100
    assert all(e is before[e.message_index] for e in again)
    assert not any(e is before.get(e.message_index) for e in fresh.events)


def test_a_words_value_is_found_once() -> None:
    """A fold note's words (a script's names and paths, read again at every step) are each
    framed and searched once; a word longer than `WORD_CHARS` every time."""
    memo = fold_module._known_word
    memo.cache_clear()
    script = "cd /repo && python run_tests.py --case test_axis_12 (see utils/io.py) done. " * 50
    assert value_words(script) == ["run_tests.py", "test_axis_12", "utils/io.py"]
    info = memo.cache_info()
    assert info.misses == 10 and info.hits == 10 * 49  # its 10 distinct words
    blob = "a_1" + "=" * fold_module.WORD_CHARS
    assert value_words(f"{blob} {blob}") == [blob]
    assert memo.cache_info().misses == 10  # not kept


def _cluster(decided: int, queries: list[int]) -> dict[str, Decision]:
    """The cluster stage's new pointers over 12 listings of 3 directories (each a near
    repeat of the one 3 before), the first `decided` of them decided already; `queries`
    counts the index's questions."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                      {"role": "user", "content": "list the files"}]
    for k in range(12):
        call = {"id": f"c{k}", "type": "function",
                "function": {"name": "ls", "arguments": f'{{"dir": "d{k % 3}"}}'}}
        listing = " ".join(f"file_{k % 3}_{j}.py" for j in range(60))
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{k}", "content": f"{listing} total {k}"}]
    items = parse_request({"messages": messages}, COUNTER, "o200k_base").items
    results = [i for i in items if i.kind == "tool_result"]
    decisions = {i.id: Decision("compress", "compress", "aged", "summary", 3)
                 for i in results[:decided]}
    ctx = StageContext(task_class=task_class("t", {}), counter=COUNTER, encoding="o200k_base",
                       embedder=None, fixed_tokens=3, horizon=len(messages), query="",
                       decisions=dict(decisions), originals={i.id: i for i in items})
    query = cluster_module._Bands.query

    def counted(self: cluster_module._Bands, sketch: bytes) -> set[str]:
        queries.append(1)
        return query(self, sketch)

    cluster_module._Bands.query = counted  # type: ignore[method-assign]
    try:
        budget = Budget(input=10**6, split=BudgetSplit())
        result = asyncio.run(cluster_items(items, budget, ctx))
    finally:
        cluster_module._Bands.query = query  # type: ignore[method-assign]
    return {k: d for k, d in result.decisions.items() if k not in decisions}


def test_only_an_item_the_step_may_change_asks_what_it_repeats() -> None:
    """The cluster stage asks its index only of the items it may make pointers of (not
    decided, not pinned, before the horizon); the others join it as before, so each later
    repeat points to the same copy."""
    undecided: list[int] = []
    late: list[int] = []
    fresh, later = _cluster(0, undecided), _cluster(9, late)
    assert len(fresh) >= 6 and later == {k: d for k, d in fresh.items() if k in later}
    assert len(later) >= 2 and all(d.method == "dedup" for d in later.values())
    assert len(late) == len(undecided) - 9  # main: the decided ones asked too


_BLANKS = list(" \t\n\r\v\f\x1c\x1d\x1e\x1f\x85\u2028\u2029\u00a0\u3000")


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from([*_BLANKS, "a", "b_", "é", "{"]), max_size=24).map("".join))
def test_a_placeholders_first_line_is_the_first_nonblank_split_line(text: str) -> None:
    assert first_nonblank(text) == next(
        (line.strip() for line in text.splitlines() if line.strip()), "")
