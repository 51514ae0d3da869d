"""A step the instability budget does not allow yet, not the session's first (the young
session credit's later step, `steps.ahead_of_share`), is weighed over half the session's
age (`steps.ahead_calls`, `repay_ahead_share`), not over at least `repay_calls`. The
Moatless runs took their second step on credit at the
sixth call, and half of them end within seven: prefix stable 79.8 · 78.9 -> 81.0 · 80.4%
(bench/README.md, "A step ahead of the share weighed over half the session's age")."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import corpora
from bench.prefix_breaks import session_breaks
from gateway.context.agents import RUN_MARKS
from gateway.context.items import Clock, Item
from gateway.context.replay import build_engine
from gateway.context.session import SessionState
from gateway.context.steps import ahead_calls, ahead_of_share, long_running, unrepaid
from gateway.context.taskclass import Compaction
from gateway.settings import Settings

from .conftest import with_compaction

C = Compaction(repay_calls=20, early_max_tokens=8000, max_step_share=0.2,
               repay_ahead_share=0.5)
MOATLESS = Path("/tmp/gen56")


def _state(steps: int, calls: int) -> SessionState:
    return SessionState(steps=steps, calls=calls)


def _on_task(later: bool) -> list[Item]:
    """An API agent's items; `later`: the user gave it a later task (a queue's), the layout's
    `Clock.task_start` set at that message."""
    clock = Clock(6)
    clock.api_calls = True
    if later:
        clock.task_start = 9
    return [Item(id="m1", kind="tool", unit="m1", message_index=2, segment=0, text="output",
                 tokens=50, fixed_tokens=0, turn=1, pinned=False, rewritable=True, clock=clock)]


def test_a_later_step_the_share_does_not_allow_yet_is_ahead() -> None:
    first = _on_task(later=False)
    assert ahead_of_share(_state(1, 5), C, first)  # a second step on the 6th call: share says 10
    assert not ahead_of_share(_state(0, 2), C, first)  # the session's first step
    assert not ahead_of_share(_state(1, 10), C, first)  # the share allows it
    assert not ahead_of_share(_state(1, 5), C.model_copy(update={"repay_ahead_share": 0.0}),
                              first)


def test_a_step_on_a_queues_later_task_is_not_ahead() -> None:
    """A queue's later task: the session's age says nothing of what that task has left
    (tau-bench airline queues' tune recall 99.458 -> 99.343 weighed so on every task)."""
    assert not ahead_of_share(_state(1, 5), C, _on_task(later=True))


def test_a_step_ahead_is_weighed_over_half_the_sessions_age() -> None:
    assert ahead_calls(6, C) == 3
    assert ahead_calls(1, C) == 1


RECORD = C.model_copy(update={"repay_agent_runs": 20, "repay_ahead_runs": 5})


def _record(reached: dict[int, int], started: int = 30) -> tuple[int, ...]:
    """An agent's run record (`agents.AgentRunStore`): of `started` sessions, how many
    reached each of `RUN_MARKS` calls; `reached` gives the count from a mark on."""
    counts, now = [], started
    for mark in RUN_MARKS:
        now = reached.get(mark, now)
        counts.append(now)
    return tuple(counts)


def test_an_agent_whose_runs_go_on_is_long_running() -> None:
    """Half of its sessions that reached this age ran on to `repay_calls` (20) or past the
    record's last mark: long running. Before `repay_ahead_runs` sessions, never."""
    assert long_running(6, RECORD, _record({}))
    assert long_running(6, RECORD, _record({24: 12}))  # half ended only after 20 calls
    assert not long_running(6, RECORD, _record({7: 12, 8: 6, 9: 0}))  # half end at 6
    assert not long_running(6, RECORD, _record({12: 10, 14: 0}))  # half end by 11
    assert not long_running(6, RECORD, None)
    assert not long_running(6, RECORD, _record({}, started=5))  # too few sessions yet
    assert long_running(6, RECORD, _record({}, started=6))
    assert not long_running(6, RECORD.model_copy(update={"repay_ahead_runs": 0}),
                            _record({}))


def test_a_long_running_agents_step_is_not_ahead() -> None:
    """mini-SWE-agent's runs last 13-145 calls: weighed over half their age, their second
    steps on credit were left out and came back later, larger (tune recall down)."""
    first = _on_task(later=False)
    state = _state(1, 5)
    state.agent_runs = _record({})
    assert not ahead_of_share(state, RECORD, first)
    state.agent_runs = _record({7: 12, 8: 6, 9: 0})
    assert ahead_of_share(state, RECORD, first)


def _item(index: int, text: str, tokens: int) -> Item:
    return Item(id=f"m{index}", kind="tool" if index % 2 == 0 else "assistant",
                unit=f"m{index}", message_index=index, segment=0, text=text, tokens=tokens,
                fixed_tokens=0, turn=(index + 1) // 2, pinned=False, rewritable=True)


def test_a_step_ahead_that_repays_only_over_twenty_calls_is_left_out() -> None:
    """The rewrite takes 600 of a 1,000-token turn and re-sends 900: over 20 calls to come
    it saves 1,200 (at 0.1) for 810 (at 0.9); over 3 (half of 6), 180."""
    before = [_item(0, "task", 100), _item(1, "turn", 1000), _item(2, "output", 500)]
    after = [_item(0, "task", 100), _item(1, "digest", 400), _item(2, "output", 500)]
    assert unrepaid(before, after, 3, 6, C) == set()
    assert unrepaid(before, after, 3, 6, C, ahead=True) == {1}
    assert unrepaid(before, after, 3, 6, C.model_copy(update={"repay_ahead_share": 0.0}),
                    ahead=True) == set()


def _run(name: str) -> corpora.Session:
    if not (MOATLESS / "moatless").is_dir():
        pytest.skip(f"the Moatless runs are not converted at {MOATLESS} (bench/moatless.py)")
    return next(s for s in corpora.load("moatless", MOATLESS) if s.id.endswith(name))


@pytest.mark.parametrize("share, breaks_at", [(0.5, [3]), (0.0, [3, 5])])
async def test_a_short_runs_second_step_on_credit_is_not_taken(
    settings: Settings, share: float, breaks_at: list[int],
) -> None:
    """A Moatless run of 6 calls (`django__django-12700`, tune split): its first step on
    the 4th call; the credit's second on the 6th, its last, changed 7.9k characters of the
    cached prefix to take 4.7k off that call alone. Weighed over half its age, it is not
    taken (without the rule, it is)."""
    session = _run("django__django-12700")
    engine = build_engine(with_compaction(settings, repay_ahead_share=share),
                          with_embedder=False)
    _, breaks = await session_breaks(engine, session, "moatless")
    assert [b.call for b in breaks] == breaks_at
