"""bench.prefix_breaks: the first message a call's forwarded request changes, the drop events
new on messages the previous call sent, and a long session's breaks found and attributed."""

from bench.corpora import Session
from bench.prefix_breaks import first_change, new_causes, session_breaks, summary
from gateway.context.replay import build_engine
from gateway.settings import Settings
from tests.sessions import synthetic_session

A = {"role": "user", "content": "a"}
B = {"role": "assistant", "content": "b"}
C = {"role": "user", "content": "c"}


def test_first_change_is_none_on_an_extension() -> None:
    assert first_change([A, B], [A, B, C]) is None
    assert first_change([A, B], [A, {**B, "content": "b'"}, C]) == 1
    assert first_change([A, B, C], [A, B]) == 2  # a shorter request breaks at its end


def test_new_causes_only_on_messages_the_previous_call_sent() -> None:
    before = {("compress", "compress", "aged", "i1", 10, 1)}
    after = before | {("compress", "mask", "aged", "i0", 2, 0),
                      ("cluster", "dedup", "duplicate", "i9", 3, 9)}  # a new message's
    assert new_causes(before, after, sent=5) == ("compress:mask:aged",)
    # the same item decided anew (another size) is a new event
    resized = {("compress", "compress", "aged", "i1", 7, 1)}
    assert new_causes(before, resized, sent=5) == ("compress:compress:aged",)


async def test_a_long_sessions_breaks_are_its_aging_steps() -> None:
    _, messages, _ = synthetic_session(1, 40)
    engine = build_engine(Settings())
    calls, breaks = await session_breaks(engine, Session("s", messages), "t")
    assert calls == 40 and breaks
    assert all(b.counted and any(c.startswith("compress:") for c in b.causes) for b in breaks)
    assert [b.since for b in breaks][1:] == [5] * (len(breaks) - 1)  # one step in five calls
    lines = summary("t", {"tune": calls}, breaks)
    assert lines[0] == f"t tune: 40 calls after a session's first, {len(breaks)} breaks, " \
        f"prefix stable {100 * (1 - len(breaks) / 40):.2f}%"
