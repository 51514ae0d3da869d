"""The incremental paths give exactly what the full ones give, on random histories: a step's
re-applied decisions (`apply.reapply`) and the fidelity signals read from a `Haystack`
kept across a session's calls."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.context.apply import apply_decisions, reapply
from gateway.context.fidelity import Haystack, lost_messages, observe, recall_counts
from gateway.context.items import Item
from gateway.context.session import Decision, SessionState
from gateway.context.tokens import TokenCounter

COUNTER = TokenCounter()
ENCODING = "o200k_base"
WORDS = st.text(alphabet="abc xyz/._0123456789\n", min_size=0, max_size=120)
DECISIONS = [
    None,
    Decision("select", "drop", "recency", "drop"),
    Decision("compress", "mask", "aged", "mask", 1),
    Decision("compress", "compress", "aged", "summary", 2),
    Decision("compress", "compress", "aged", "summary", 2, step=3),
    Decision("cluster", "dedup", "duplicate", "dedup", arg="x", text="[ctxgate: repeats]"),
    Decision("select", "compress", "stale_instruction", "strip", arg="[0-9]+"),
]


@st.composite
def histories(draw: Any) -> tuple[list[Item], dict[str, Decision], dict[str, Decision]]:
    """Items with two sets of decisions: before a step and after it."""
    items, earlier, later = [], {}, {}
    for k in range(draw(st.integers(0, 30))):
        text = draw(WORDS)
        tokens = COUNTER.count(text, ENCODING) + 4
        item = Item(id=f"i{k}", kind=draw(st.sampled_from(["tool_result", "user", "tool_call"])),
                    unit=f"u{k}", message_index=k, segment=0, text=text, tokens=tokens,
                    fixed_tokens=4, turn=-draw(st.integers(0, 9)), pinned=draw(st.booleans()),
                    rewritable=draw(st.booleans()))
        items.append(item)
        before = draw(st.sampled_from(DECISIONS))
        after = before if draw(st.booleans()) else draw(st.sampled_from(DECISIONS))
        if before is not None:
            earlier[item.id] = before
        if after is not None:  # equal but not the same object, half of the time
            later[item.id] = after if draw(st.booleans()) else replace(after)
    return items, earlier, later


def _sent(items: list[Item]) -> list[tuple[str, str, int, bool, int]]:
    return [(i.id, i.text, i.tokens, i.pinned, i.age) for i in items]


@settings(max_examples=150, deadline=None)
@given(history=histories())
def test_reapply_gives_what_applying_every_decision_gives(
    history: tuple[list[Item], dict[str, Decision], dict[str, Decision]],
) -> None:
    items, earlier, later = history
    applied = apply_decisions(items, earlier, COUNTER, ENCODING, frozenset())
    full = apply_decisions(items, later, COUNTER, ENCODING, frozenset())
    again = reapply(items, later, earlier, applied, COUNTER, ENCODING, frozenset())
    assert _sent(again) == _sent(full)


VALUES = ["src/a.py", "TOKEN_1", "4821", "x_y_z", "path/to/b.txt"]


@st.composite
def sessions(draw: Any) -> list[dict[str, Any]]:
    """A system prompt, then turns whose calls use values that earlier results may hold."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": draw(st.sampled_from(VALUES))},
                                  {"role": "user", "content": " ".join(draw(st.lists(
                                      st.sampled_from(VALUES), max_size=2)))}]
    for t in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            args = {"path": draw(st.sampled_from(VALUES)), "n": draw(st.integers(0, 5000))}
            msgs.append({"role": "assistant", "content": "", "tool_calls": [{
                "id": f"c{t}", "type": "function",
                "function": {"name": "read", "arguments": json.dumps(args)}}]})
            text = " ".join(draw(st.lists(st.sampled_from([*VALUES, "x\x00y", "ok"]),
                                          max_size=4)))
            msgs.append({"role": "tool", "tool_call_id": f"c{t}", "content": text})
        else:
            words = draw(st.lists(st.sampled_from([*VALUES, "fine"]), max_size=3))
            msgs.append({"role": "assistant", "content": " ".join(words)})
            msgs.append({"role": "user", "content": draw(st.sampled_from([*VALUES, "go"]))})
    return msgs


@settings(max_examples=100, deadline=None)
@given(msgs=sessions(), data=st.data())
def test_signals_with_a_kept_haystack_are_those_read_afresh(
    msgs: list[dict[str, Any]], data: Any
) -> None:
    """A session replayed call by call, each call's plan losing random messages: the
    signals and the state written are the same with one Haystack kept across the calls as
    with none (each call reading its messages afresh)."""
    kept, fresh, haystack = SessionState(), SessionState(), Haystack()
    ends = [i for i, m in enumerate(msgs) if m["role"] == "assistant" and i > 0] + [len(msgs)]
    for end in ends:
        sent = msgs[:end]
        lost = data.draw(st.sets(st.integers(0, end - 1)))
        plan = [(i, None if i not in lost else data.draw(st.sampled_from([None, "gist"])))
                for i in range(end)]
        plan = [(i, t) for i, t in plan if i not in lost or t is not None]
        a = observe(kept, sent, plan, task_class="c", mode="managed", haystack=haystack)
        b = observe(fresh, sent, plan, task_class="c", mode="managed")
        assert a == b
        assert (kept.fidelity, kept.lost) == (fresh.fidelity, fresh.lost)


@settings(max_examples=100, deadline=None)
@given(msgs=sessions(), data=st.data())
def test_recall_with_a_haystack_is_recall_without(msgs: list[dict[str, Any]], data: Any) -> None:
    count = data.draw(st.integers(0, len(msgs) - 1))
    turn = msgs[count] if msgs[count]["role"] == "assistant" else {
        "role": "assistant", "content": " ".join(VALUES)}
    lost = lost_messages(count, [(i, None) for i in range(count)
                                 if data.draw(st.booleans())])
    haystack = Haystack()
    haystack.cover(msgs, data.draw(st.integers(0, count)))  # covered by an earlier call
    assert recall_counts(turn, msgs, count, lost, "", haystack) == recall_counts(
        turn, msgs, count, lost, "")
