"""bench.recall_seen: a queue's runs found back in the joined session, and a needed value
counted as the current run's only when it occurs since the run's first message."""

import pytest

from bench.corpora import Session
from bench.recall_misses import Call
from bench.recall_seen import CallSplit, figures, run_starts, split_call

SYSTEM = {"role": "system", "content": "You are an agent."}


def _run(task: str, value: str, call_id: str) -> list[dict]:
    return [
        {"role": "user", "content": task},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": call_id, "content": f"found {value}"},
        {"role": "assistant", "content": f"Done: {value}"},
    ]


def _queue() -> tuple[Session, list[Session]]:
    first, second = _run("Task A", "ORDER-1234", "c1"), _run("Task B", "ORDER-5678", "c1")
    runs = [Session("r/a", [SYSTEM, *first]), Session("r/b", [SYSTEM, *second])]
    # the queue builder renames a repeated call id (`CallIds`): the run is found all the same
    renamed = [dict(m) for m in second]
    renamed[1] = {**renamed[1], "tool_calls": [{**renamed[1]["tool_calls"][0], "id": "c1_2"}]}
    renamed[2] = {**renamed[2], "tool_call_id": "c1_2"}
    return Session("q/ab", [SYSTEM, *first, *renamed]), runs


def test_run_starts_finds_each_joined_run() -> None:
    queue, runs = _queue()
    assert run_starts(queue, runs) == [1, 5]


def test_run_starts_finds_runs_whose_system_prompt_came_as_a_user_turn() -> None:
    # a queue without a system message, each run's own system prompt joined as a user turn
    first = [{"role": "system", "content": "Task A rules"}, *_run("go", "ORDER-1", "c1")]
    second = [{"role": "system", "content": "Task B rules"}, *_run("go", "ORDER-2", "c2")]
    runs = [Session("r/a", first), Session("r/b", second)]
    as_user = [{**first[0], "role": "user"}, *first[1:], {**second[0], "role": "user"},
               *second[1:]]
    assert run_starts(Session("q/ab", as_user), runs) == [0, 5]


def test_a_queue_with_a_message_of_no_run_is_refused() -> None:
    queue, runs = _queue()
    queue.messages[6] = {**queue.messages[6], "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "other", "arguments": "{}"}}]}
    with pytest.raises(ValueError, match="no run starts at message 5"):
        run_starts(queue, runs)


def test_a_value_only_an_earlier_run_holds_is_not_the_current_runs() -> None:
    queue, runs = _queue()
    starts = run_starts(queue, runs)
    # the second run's last call (it ends before message 8) needs both order numbers and
    # lost both: only ORDER-5678 was ever in that run's agent's context
    call = Call(k=3, end=8, sent=queue.messages[:8], forwarded=[],
                needed={"ORDER-1234", "ORDER-5678"}, lost=["ORDER-1234", "ORDER-5678"])
    start, lost_current, record = split_call(queue, starts, call)
    assert start == 5
    assert lost_current == ["ORDER-5678"]
    assert (record.needed, record.lost, record.current, record.current_lost) == (2, 2, 1, 1)


def test_figures_split_the_yardsticks_loss() -> None:
    records = [
        CallSplit("tune", needed=2, lost=1, current=1, current_lost=0),  # lost an earlier one
        CallSplit("tune", needed=4, lost=1, current=4, current_lost=1),
        CallSplit("tune", needed=2, lost=0, current=0, current_lost=0),  # no current value
    ]
    f = figures(records)
    assert f.calls == 3 and f.current_calls == 2
    assert f.recall == pytest.approx(100 * (0.5 + 0.75 + 1) / 3)
    assert f.current_recall == pytest.approx(100 * (1 + 0.75) / 2)
    assert f.earlier_points == pytest.approx(100 * 0.5 / 3)
    assert f.current_points == pytest.approx(100 * 0.25 / 3)
    assert f.earlier_points + f.current_points == pytest.approx(100 - f.recall)
