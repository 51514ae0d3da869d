"""State a late call carries from its session's earlier calls instead of reading the whole
history again (issue 7, per-call time grows with the new content only), pinned to what
reading it whole gives: the fidelity signals' index of earlier tool calls (`CallIndex`),
a value placed by its occurrences in the haystack's joined texts."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.context.fidelity import (
    FILED_HASHES,
    NEAR_SAME,
    CallIndex,
    Haystack,
    IndexedCall,
    _may_be_near,
    call_sketch,
    refetch_counts,
    similarity,
)

WINDOW = 6  # observe keeps the latest MAX_INDEXED_CALLS; a small window slides often here
WORDS = [f"w{i}" for i in range(24)]


def _call(name: str, words: list[str]) -> dict[str, Any]:
    return {"id": "c", "type": "function",
            "function": {"name": name, "arguments": json.dumps({"a": " ".join(words)})}}


calls_st = st.lists(
    st.tuples(st.sampled_from(["run", "read"]),
              st.lists(st.sampled_from(WORDS), max_size=20)),
    min_size=0, max_size=4)


@settings(max_examples=150, deadline=None)
@given(batches=st.lists(calls_st, min_size=1, max_size=12), results=st.data())
def test_the_kept_call_index_compares_what_comparing_every_call_finds(
    batches: list[list[tuple[str, list[str]]]], results: st.DataObject
) -> None:
    """Calls added batch by batch to a sliding window (as `observe` adds a call's new tool
    calls): the index moved on with each batch files what an index of the window built
    afresh files, and each new call's (calls, repeats, refetches) against the window is
    the count over every call of it."""
    index, earlier, first, number = CallIndex(), [], 0, 0
    lost = {i: None for i in range(0, 40, 3)}
    for batch in batches:
        made = [_call(name, words) for name, words in batch]
        turn = {"role": "assistant", "content": None, "tool_calls": made}
        assert refetch_counts(turn, earlier, lost, index) == refetch_counts(turn, earlier, lost)
        added = [IndexedCall(c["function"]["name"], call_sketch(c),
                             results.draw(st.integers(-1, 40))) for c in made]
        number += len(added)
        calls = [*earlier, *added][-WINDOW:]
        first = number - len(calls)
        index.update(earlier, calls, first)
        fresh = CallIndex()
        fresh.update([], calls, first)
        assert index.by == fresh.by and index.of is calls and index.first == first
        earlier = calls


def test_an_index_of_another_list_is_not_used() -> None:
    calls = [IndexedCall("run", call_sketch(_call("run", ["w1", "w2"])), 3)]
    index = CallIndex()
    index.update([], calls, 0)
    other = list(calls)
    assert index.near(other, "run", calls[0].sketch) is None
    assert index.near(calls, "run", calls[0].sketch) == calls


@st.composite
def near_pairs(draw: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A sketch and another made from it by taking out a few of its hashes (its smallest
    ones most often: those are what it is filed under) and putting others in."""
    a = sorted(draw(st.sets(st.integers(0, 999), max_size=16)))
    out = draw(st.integers(0, min(4, len(a))))
    gone = set(a[:out]) if draw(st.booleans()) else set(draw(st.permutations(a))[:out])
    added = draw(st.sets(st.integers(1000, 1100), max_size=4))
    b = sorted((set(a) - gone) | added)[:16]
    return tuple(a), tuple(b)


@settings(max_examples=600, deadline=None)
@given(pair=near_pairs())
def test_a_near_call_shares_one_of_the_filed_hashes(pair: tuple[Any, Any]) -> None:
    """What `CallIndex` files a call under finds every call the signal may count near it."""
    a, b = pair
    if _may_be_near(set(b), a) and similarity(a, b) >= NEAR_SAME:
        assert set(a[:FILED_HASHES]) & set(b) or not (a or b)


# Non-ASCII pieces (2-, 4-byte and a lone surrogate's UTF-8): the joined texts are bytes.
piece = st.sampled_from(["ab", "abc", "x", "\n", "\x00", "\n\x00", "", "cab", "é", "b😀",
                         "\udc80a"])


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.lists(st.one_of(st.none(), st.lists(piece, max_size=5).map("".join)),
                                 max_size=4), min_size=1, max_size=5),
       value=st.sampled_from(["ab", "abc", "cab", "b\n\x00a", "x\nx", "bab", "éa", "😀",
                              "\udc80", "b😀é"]),
       lost=st.sets(st.integers(0, 20)))
def test_a_value_placed_by_its_occurrences_in_the_joined_texts_is_found_as_per_message(
    batches: list[list[str | None]], value: str, lost: set[int]
) -> None:
    """The fidelity signals' recall places a value by scanning the haystack's joined texts
    back from occurrence to occurrence (`Haystack.holders`): as the haystack grows call by
    call (system messages, empty texts, texts holding the separator), whether a message
    holds the value, and whether one outside `lost` does, are what testing every message's
    text gives (fails when an occurrence spanning two messages counts, when `starts`
    is not moved on with the texts, or when a text's length is taken in characters where
    its bytes are searched)."""
    haystack, messages = Haystack(), []
    for batch in batches:
        for text in batch:
            messages.append({"role": "system", "content": "sys ab"} if text is None
                            else {"role": "user", "content": text})
        texts = haystack.cover(messages, len(messages))
        holding = [i for i, t in enumerate(texts) if t is not None and value in t]
        assert haystack.holders(value, dict.fromkeys(lost)) == (
            bool(holding), any(i not in lost for i in holding))


def test_a_value_held_only_by_lost_messages_is_not_searched_lost_message_by_lost_message(
) -> None:
    """Late in a session most messages are lost (rewritten or left out) and a value the
    agent re-types from an old output occurs in many of them. `Haystack.holders` finds the
    latest occurrence and then searches only the messages outside `lost` before it, not
    on from each lost message that holds the value back to the history's start (on main:
    one search per lost holder, 401 here); the answer is testing every message's text."""
    value = "FMR, LLC"
    messages = [{"role": "system", "content": "You are an agent."},
                {"role": "user", "content": "Summarise the holders of NVDA."}]
    messages += [{"role": "user" if n % 2 else "assistant",
                  "content": f"holder {n}: {value} holds {n * 7} shares"} for n in range(400)]
    messages += [{"role": "assistant", "content": f"noted {n}"} for n in range(10)]
    messages.append({"role": "user", "content": f"again: {value}"})
    haystack = Haystack()
    texts = haystack.cover(messages, len(messages))
    lost = dict.fromkeys([*range(2, 402), len(messages) - 1])
    holding = [i for i, t in enumerate(texts) if t is not None and value in t]
    assert len(holding) == 401
    before = haystack.scans
    assert haystack.holders(value, lost) == (True, False)
    assert haystack.scans - before <= 3
    # one kept message among the lost ones that holds it: found, in as few searches
    kept = {i: None for i in lost if i != 200}
    assert haystack.holders(value, kept) == (True, True)
    assert haystack.holders("absent", lost) == (False, False)
    assert haystack.holders("noted 3", lost) == (True, True)
