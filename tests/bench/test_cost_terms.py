"""bench.cost_terms: the engine's cost @0.1 less keep-1's, split into a size term and a
re-send term by phase; the terms add up to the gap, and a long session's steps are the
calls that re-send."""

from bench.corpora import Session
from bench.cost_terms import Call, session_calls, terms
from gateway.context.replay import build_engine
from gateway.settings import Settings
from tests.sessions import synthetic_session


def test_the_terms_add_up_to_the_gap() -> None:
    calls = [Call("first", 100, 0, 100, 0, 100, 0),
             Call("early", 150, 100, 150, 100, 120, 60),
             Call("step", 200, 150, 160, 40, 130, 120, resent=110, depth=3),
             Call("append", 260, 200, 220, 160, 150, 130)]
    t = terms(calls)
    total = sum(size + fresh for _, size, fresh in t["phases"].values())
    assert abs(total - t["gap"]) < 1e-9
    assert t["phases"]["first"] == [1, 0.0, 0.0]
    assert t["depths"] == {"1-3": [1, t["depths"]["1-3"][1]]}
    base = 100 + (150 - 90) + (200 - 135) + (260 - 180)
    assert abs(t["depths"]["1-3"][1] - 100 * 0.9 * 110 / base) < 1e-9


async def test_a_long_sessions_steps_are_the_calls_that_re_send() -> None:
    _, messages, _ = synthetic_session(1, 40)
    engine = build_engine(Settings())
    calls = await session_calls(engine, Session("s", messages))
    assert len(calls) == 41 and calls[0].phase == "first"  # one a turn, the first answer too
    steps = [c for c in calls if c.phase == "step"]
    assert steps and all(c.resent > 0 and c.depth > 0 for c in steps)
    assert all(c.resent == 0 for c in calls if c.phase != "step")
    first_step = calls.index(steps[0])
    assert {c.phase for c in calls[1:first_step]} <= {"early"}
    assert {c.phase for c in calls[first_step + 1:]} <= {"step", "append"}
