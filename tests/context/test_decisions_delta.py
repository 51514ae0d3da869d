"""`SessionState.changes` after `decide` compares only the ids the call said it changed,
and writes and deletes exactly the fields, in the order, a walk of every decision would."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.context.apply import changed_decisions
from gateway.context.session import (
    VERSION_FIELD,
    Decision,
    MemorySessionStore,
    SessionState,
)

KINDS = [Decision("compress", "mask", "aged", "mask", step=1),
         Decision("select", "drop", "recency", "drop", step=1),
         Decision("compress", "compress", "aged", "summary", text="digest", step=2)]

# One call's edit of the decisions: (op, id, kind); op 0 adds or changes, 1 undoes, 2
# moves an id to the end (undone and taken again), 3 replaces with an equal copy.
edits = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 2)),
                 max_size=6)


def _edited(before: dict[str, Decision], call: list[tuple[int, int, int]]) -> dict[str, Decision]:
    after = dict(before)
    for op, n, kind in call:
        item_id = f"m{n}"
        if op == 0:
            after[item_id] = KINDS[kind]
        elif op == 1:
            after.pop(item_id, None)
        elif op == 2:
            after.pop(item_id, None)
            after[item_id] = KINDS[kind]
        elif item_id in after:
            after[item_id] = replace(after[item_id])
    return after


def _scratch(state: SessionState) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """`changes` without what `decide` said: every decision compared."""
    mapping, deleted = replace(state, delta=None, dirty=set(state.dirty)).changes()
    return [kv for kv in mapping.items() if kv[0] != VERSION_FIELD], deleted


@settings(max_examples=300, deadline=None)
@given(st.lists(edits, min_size=1, max_size=12), st.lists(st.integers(0, 40), max_size=60),
       st.booleans())
def test_changes_after_decide_equal_a_walk_of_every_decision(
        calls: list[list[tuple[int, int, int]]], first: list[int], superset: bool) -> None:
    store = MemorySessionStore()
    state = asyncio.run(store.load("t", "s"))
    state.decide({f"m{n}": KINDS[n % 3] for n in first}, [f"m{n}" for n in first])
    asyncio.run(store.save("t", "s", state))
    for call in calls:
        state = asyncio.run(store.load("t", "s"))
        after = _edited(state.decisions, call)
        changed = changed_decisions(after, state.decisions)
        if not changed:
            continue
        # a caller may name ids that did not change (the prefix path names its cuts)
        ids = changed | {f"m{n}" for _, n, _ in call} if superset else changed
        state.decide(after, ids)
        expected = _scratch(state)
        mapping, deleted = state.changes()
        assert [kv for kv in mapping.items() if kv[0] != VERSION_FIELD] == expected[0]
        assert deleted == expected[1]
        asyncio.run(store.save("t", "s", state))
        replica = asyncio.run(MemorySessionStore.load(_copy(store), "t", "s"))
        assert replica.decisions == after


def _copy(store: MemorySessionStore) -> MemorySessionStore:
    """A store holding `store`'s fields but no decoded copy: its load reads the fields."""
    other = MemorySessionStore()
    other._raw = {k: dict(v) for k, v in store._raw.items()}
    return other


def test_a_call_adding_one_decision_compares_only_it() -> None:
    state = SessionState()
    state.decide({f"m{n}": KINDS[n % 3] for n in range(500)}, [f"m{n}" for n in range(500)])
    state.changes()
    state.saved()
    after = {**state.decisions, "m500": KINDS[0]}
    state.decide(after, {"m500"})
    assert state._changed_ids() == ["m500"]
    mapping, deleted = state.changes()
    assert set(mapping) == {b"d:m500", VERSION_FIELD} and deleted == []


def test_an_undone_or_deep_change_walks_every_decision() -> None:
    state = SessionState()
    state.decide({f"m{n}": KINDS[n % 3] for n in range(100)}, [f"m{n}" for n in range(100)])
    state.changes()
    state.saved()
    undone = {k: v for k, v in state.decisions.items() if k != "m7"}
    state.decide(undone, {"m7"})
    assert state._changed_ids() is None
    assert state.changes()[1] == [b"d:m7"]
    state.saved()
    deep = {**state.decisions, "m3": KINDS[2]}
    state.decide(deep, {"m3"})
    assert state._changed_ids() is None  # m3 sits far from the end
    assert set(state.changes()[0]) == {b"d:m3", VERSION_FIELD}
