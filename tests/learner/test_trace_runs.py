"""A trace's message runs remembered by identity are the runs serialised afresh."""

from __future__ import annotations

import copy
import random

from gateway.learner.traces import (
    MESSAGE_RUN,
    MessageRuns,
    MessageSizes,
    TraceWindows,
    keep_recent,
    split_messages,
)


def _split(history: list[dict[str, str]], runs: MessageRuns | None) -> object:
    return split_messages(history, keep_recent(history, 48_000, 24_000), runs)


def test_runs_remembered_by_identity_are_the_runs_serialised_afresh() -> None:
    rng = random.Random(7)
    history = [{"role": "system", "content": "S" * 200}]
    runs = MessageRuns()
    serialised = []
    for turn in range(150):
        history += [{"role": "user", "content": f"turn {turn} " + "x" * rng.randrange(400)},
                    {"role": "assistant", "content": f"done {turn}"}]
        if turn % 7 == 3:  # the client's messages decoded whole: new objects, same values
            history = copy.deepcopy(history)
        if turn % 11 == 5:  # an old message rewritten in place of the old object
            at = rng.randrange(1, len(history))
            history[at] = {**history[at], "content": f"rewritten at turn {turn}"}
        before = len(runs._runs)
        assert _split(history, runs) == _split(history, None)
        serialised.append(len(runs._runs) - before)
    # A call whose messages are the last call's objects serialises its newest run or two.
    assert max(serialised[-20:]) >= 2 and sorted(serialised)[len(serialised) // 2] <= 2
    assert len(keep_recent(history, 48_000, 24_000)) > 3 * MESSAGE_RUN


def test_a_run_of_new_objects_is_never_answered_from_the_memory() -> None:
    runs = MessageRuns(size=4)
    first = [{"role": "user", "content": str(n)} for n in range(MESSAGE_RUN)]
    digest, raw = runs.run(0, first)
    again = [dict(m) for m in first]
    again[3]["content"] = "changed"
    other_digest, other_raw = runs.run(0, again)
    assert other_raw != raw and b"changed" in other_raw and other_digest != digest
    assert runs.run(0, list(first)) == (digest, raw)  # the same objects: remembered
    for n in range(8):  # bounded: the oldest are forgotten
        runs.run(n + 1, first)
    assert len(runs._runs) == 4


def test_sizes_remembered_by_identity_trim_as_measured_afresh() -> None:
    """`keep_recent` with its measures remembered keeps what it keeps measuring every
    message, while a session's messages are sometimes new objects, rewritten or short."""
    rng = random.Random(11)
    history: list[dict[str, str]] = [{"role": "system", "content": "S" * 300}]
    sizes = MessageSizes(size=64)
    for turn in range(200):
        history += [{"role": "user", "content": f"turn {turn} " + "x" * rng.randrange(600)},
                    {"role": "assistant", "content": "ok" if turn % 3 else "y" * 900}]
        if turn % 9 == 4:  # decoded whole: new objects, same values
            history = copy.deepcopy(history)
        if turn % 5 == 2:  # an old message rewritten (a digest), a new object in its place
            at = rng.randrange(1, len(history))
            history[at] = {**history[at], "content": "z" * rng.randrange(3000)}
        for limits in ((48_000, 24_000), (6_000, None), (20_000, 3_000)):
            assert keep_recent(history, *limits, sizes) == keep_recent(history, *limits)
    assert len(sizes._known) == 64  # bounded


def test_a_sessions_trace_split_from_its_last_one_is_the_split_afresh() -> None:
    """`TraceWindows.split` keeps a session's sums and runs from its last trace: call by
    call it gives what `split_messages(keep_recent(...))` gives afresh, with three limits
    taking turns, while the session grows, traces the same objects again or fewer of them,
    has a message inside or before its kept window replaced by another object (longer, or
    shorter), has its newest rewritten short (the window reaches back past what it had
    measured), is decoded whole, restarts shorter, and shares its key with another history;
    and between those it measures only new messages."""
    rng = random.Random(5)
    windows, runs, sizes = TraceWindows(sessions=2), MessageRuns(), MessageSizes()
    history: list[dict[str, str]] = [{"role": "system", "content": "S" * 300}, *(
        {"role": "user", "content": f"old {n} " + "y" * rng.randrange(900)} for n in range(150))]
    other = [{"role": "system", "content": "O"}, *({"role": "user", "content": "o" * 500}
                                                    for _ in range(40))]
    measured = []
    for turn in range(220):
        history += [{"role": "user", "content": f"turn {turn} " + "x" * rng.randrange(900)},
                    {"role": "tool", "content": "r" * rng.randrange(40)},
                    {"role": "assistant", "content": f"ok {turn}"}]
        if turn % 13 == 6:  # a message inside the kept window: another object, longer
            at = len(history) - rng.randrange(2, 40)
            history[at] = {**history[at], "content": "w" * rng.randrange(200, 4000)}
        if turn % 17 == 9:  # an old one, before the window: another object, shorter
            at = rng.randrange(1, len(history) // 2)
            history[at] = {**history[at], "content": "."}
        if turn % 19 == 7:  # the newest ones rewritten short: the window reaches back
            history[-60:] = [{**m, "content": m["content"][:3]} for m in history[-60:]]
        if turn % 29 == 11:  # decoded whole: new objects, the same values
            history = copy.deepcopy(history)
        if turn == 150:  # restarted shorter
            history = history[:40]
        for limits in ((48_000, 24_000), (6_000, None), (20_000, 3_000)):
            before = len(sizes._known)
            assert windows.split("s", history, *limits, sizes, runs) == split_messages(
                history, keep_recent(history, *limits), None)
            measured.append(len(sizes._known) - before)
        if turn % 23 == 0:  # the same objects, the last few left out (a run cut short)
            cut = history[:-5]
            assert windows.split("s", cut, 48_000, 24_000, sizes, runs) == split_messages(
                cut, keep_recent(cut, 48_000, 24_000), None)
        if turn % 5 == 0:  # another history under the same key, then under its own
            for key in ("s", "t"):
                assert windows.split(key, other, 48_000, 24_000, sizes, runs) == (
                    split_messages(other, keep_recent(other, 48_000, 24_000), None))
    assert max(measured[-40:]) >= 3  # new messages measured
    assert len(windows._last) == 2
