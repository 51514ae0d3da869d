"""A new agent's step is weighed over at most `repay_calls` calls to come, not the session's
age, where its harness's record says runs of one task (`engine._harness_left`): a harness
whose every task brings its own tools (Toolathlon's MCP servers) makes each run a new
agent, with no record of its own to bound the estimate (`steps.agent_left`), and its runs
have about as many calls left at 40 as at 5 (bench/README.md, "Session 74, tla74")."""

from __future__ import annotations

from gateway.context.agents import RUN_MARKS
from gateway.context.engine import _harness_left
from gateway.context.items import Item
from gateway.context.session import SessionState
from gateway.context.steps import unrepaid
from gateway.context.taskclass import Compaction

C = Compaction(repay_calls=20, early_max_tokens=8000, repay_ahead_runs=5,
               repay_agent_quantile=0.9)


def _record(lengths: list[int]) -> tuple[int, ...]:
    """The record of sessions of these lengths in calls: how many reached each mark."""
    return tuple(sum(1 for n in lengths if n >= mark) for mark in RUN_MARKS)


RUNS = _record([10] * 6 + [30] * 2 + [40])  # eight runs before this one of 40 calls
NEW_AGENT = _record([40])  # its own tools: its first session


def _item(index: int, text: str, tokens: int) -> Item:
    return Item(id=f"m{index}", kind="tool" if index % 2 == 0 else "assistant",
                unit=f"m{index}", message_index=index, segment=0, text=text, tokens=tokens,
                fixed_tokens=0, turn=(index + 1) // 2, pinned=False, rewritable=True)


def test_a_late_step_of_a_run_is_weighed_over_the_runs_calls_to_come() -> None:
    """At call 40 a rewrite taking 800 tokens, re-sending 3,200: it repays over the 40 calls
    the age says are to come, not over 20; so it is left out of the step."""
    state = SessionState(calls=39, agent_runs=NEW_AGENT, harness_runs=RUNS)
    assert _harness_left(state, C) == 20
    before = [_item(0, "task", 100), _item(1, "turn", 1000), _item(2, "output", 3000)]
    after = [_item(0, "task", 100), _item(1, "digest", 200), _item(2, "output", 3000)]
    assert unrepaid(before, after, 3, 40, C) == set()  # over its age: taken
    assert unrepaid(before, after, 3, 40, C, _harness_left(state, C)) == {1}


def test_an_agent_with_its_own_record_or_a_queues_harness_is_weighed_as_before() -> None:
    assert _harness_left(SessionState(calls=39, agent_runs=RUNS, harness_runs=RUNS), C) is None
    queue = _record([300] * 8 + [40])  # the harness's sessions run long: a queue of tasks
    assert _harness_left(SessionState(calls=39, agent_runs=NEW_AGENT, harness_runs=queue),
                         C) is None
    assert _harness_left(SessionState(calls=39, agent_runs=NEW_AGENT), C) is None  # no record
    few = _record([10] * 3 + [40])  # three runs before this one: no evidence yet
    assert _harness_left(SessionState(calls=39, agent_runs=NEW_AGENT, harness_runs=few),
                         C) is None
