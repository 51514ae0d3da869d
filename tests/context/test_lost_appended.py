"""A call between steps writes the session's `lost` (the messages not forwarded as sent, by
index, with the text sent in their place) from the last call's JSON and its own new entries
(`Haystack.lost_after`), never by dumping the whole map again: the bytes are those of
`lost_messages` dumped whole, and so are the runs they are stored in."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.context.fidelity import Haystack, lost_messages, observe
from gateway.context.session import SessionState, lost_runs, run_hashes

Plan = list[tuple[int, str | None]]


def _whole(lost: dict[int, str | None]) -> bytes | None:
    return orjson.dumps({str(i): text for i, text in lost.items()}) if lost else None


@st.composite
def growing_plans(draw: Any) -> list[tuple[int, Plan]]:
    """(messages, plan) per call of a session between steps: the plan only grows; a new
    message is sent as is, dropped, or sent as a text that holds JSON's own punctuation."""
    calls: list[tuple[int, Plan]] = []
    plan: Plan = []
    count = 0
    texts = st.sampled_from(["gist", 'a ,"5": b', "}", "é \u2028 \\ \"", ""])
    for _ in range(draw(st.integers(2, 14))):
        added = draw(st.integers(0, 6))
        for i in range(count, count + added):
            fate = draw(st.sampled_from(["sent", "sent", "dropped", "text"]))
            if fate == "sent":
                plan.append((i, None))
            elif fate == "text":
                plan.append((i, f"{draw(texts)} {i}"))
        count += added
        calls.append((count, list(plan)))
    return calls


@settings(max_examples=300, deadline=None)
@given(calls=growing_plans())
def test_a_grown_plan_appends_its_new_entries_to_the_last_json(
    calls: list[tuple[int, Plan]],
) -> None:
    """After the first call (whose JSON the caller writes), every call of a plan that grows
    knows its JSON without the caller dumping it (`same`), and it is the JSON written whole."""
    haystack = Haystack()
    plan: Plan = []
    for n, (count, grown) in enumerate(calls):
        plan += grown[len(plan):]  # the same object, grown in place (the prefix's)
        lost, same = haystack.lost_after(count, plan)
        assert lost == lost_messages(count, plan)
        assert list(lost) == list(lost_messages(count, plan))
        if n == 0:
            assert not same  # a plan never read: the caller dumps it (`fidelity._remember`)
            haystack.found_raw = _whole(lost)
            continue
        assert same, "a grown plan's JSON was not appended"
        assert haystack.found_raw == _whole(lost)


@settings(max_examples=150, deadline=None)
@given(calls=growing_plans())
def test_a_session_between_steps_stores_the_lost_runs_written_whole(
    calls: list[tuple[int, Plan]],
) -> None:
    """Through `observe`: the session's `lost` and its stored runs after every call are
    those of the whole map, however many calls appended to them."""
    state, haystack = SessionState(), Haystack()
    plan: Plan = []
    for count, grown in calls:
        plan += grown[len(plan):]
        messages = [{"role": "user", "content": str(i)} for i in range(count)]
        observe(state, messages, plan, task_class="c", mode="managed", haystack=haystack)
        whole = _whole(lost_messages(count, plan))
        assert state.lost == whole
        if state.lost_split is not None and state.lost_split[0] == whole:
            _, runs, hashes = state.lost_split
            assert runs == lost_runs(whole)
            assert hashes == run_hashes(runs)
