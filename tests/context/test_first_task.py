"""A session's large calls are weighed by the repay rule (`steps.young`) only while it is
on its first task, by the engine's own task boundary (`Clock.task_start`) in a session
whose agent has made a tool call, through the API or written in its turn and answered as the
layout reads a call's result (`text_tool_result`; `steps.on_first_task`): a queue's later
task is a long session; a text-tool agent whose outputs the layout cannot tell from a new
task is never weighed (bench/README.md, "Short runs' cost @0.1, part seven", "part nine",
and "The newest corpora's short runs…", session 48)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.context.agents import RUN_MARKS
from gateway.context.engine import _leave_unrepaid
from gateway.context.items import parse_request
from gateway.context.session import Decision, SessionState
from gateway.context.stages.base import StageContext
from gateway.context.steps import horizon_after, on_first_task, runs_of_one, young
from gateway.context.taskclass import Compaction, TaskClass, task_class
from gateway.context.tokens import TokenCounter

YOUNG = Compaction(verbatim_tokens_high=1000, verbatim_tokens_low=0, max_step_share=0.2,
                   repay_calls=20, early_max_tokens=8000, repay_young_calls=40)


def _call(k: int) -> list[dict[str, Any]]:
    call = {"id": f"c{k}", "type": "function",
            "function": {"name": "read", "arguments": f'{{"path": "f{k}.txt"}}'}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": f"line {k} " * 40}]


def _first(msgs: list[dict[str, Any]]) -> bool:
    return on_first_task(parse_request({"messages": msgs}, TokenCounter(), "o200k_base").items)


def test_a_queues_second_task_ends_the_first() -> None:
    one = [{"role": "system", "content": "You are an agent."},
           {"role": "user", "content": "task one: sum the files"}, *_call(0), *_call(1)]
    assert _first(one)
    answered = [*one, {"role": "assistant", "content": "The sum is 12."}]
    assert _first(answered)
    two = [*answered, {"role": "user", "content": "task two: count the lines"}, *_call(2)]
    assert not _first(two)


def test_several_user_messages_before_the_first_answer_are_one_task() -> None:
    msgs = [{"role": "user", "content": "context: the repo"},
            {"role": "user", "content": "task: sum the files"}, *_call(0), *_call(1)]
    assert _first(msgs)


def test_a_text_tool_agents_session_is_never_weighed() -> None:
    """Outputs come as user messages after the turn that wrote the command; the layout
    does not tell them from a task when they do not name a call (`text_tool_result`), so
    a queue of such tasks would pass for one first task: the agent made no call through
    the API, its session is not weighed young (acr queue, part nine)."""
    msgs = [{"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "goal: fix parser.py"}]
    for k in range(4):
        msgs += [{"role": "assistant", "content": f"```\nopen file{k}.py\n```"},
                 {"role": "user", "content": f"{k}: value = compute({k})\n" * 30}]
    assert not _first(msgs)
    # nor before its first call through the API, nor with no layout at all
    assert not _first([{"role": "user", "content": "task: sum the files"}])
    assert not on_first_task([])


def test_a_shell_agents_answered_commands_are_its_first_task() -> None:
    """A text-tool agent whose outputs the layout reads as its calls' results (an exit
    status after a fenced shell block, mini-SWE-agent) is on its first task until a user
    message that answers no call comes after its answer (a queue's next task statement)."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You can interact with a computer shell."},
        {"role": "user", "content": "<pr_description>fix parser.py</pr_description>"}]
    assert not _first(msgs)  # no call yet
    for k in range(3):
        msgs += [{"role": "assistant", "content": f"THOUGHT: look.\n\n```bash\ncat f{k}.py\n```"},
                 {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n"
                                             f"{'value = 1' * 20}\n</output>"}]
        assert _first(msgs)
    msgs += [{"role": "assistant", "content": "THOUGHT: done.\n\n```bash\nsubmit\n```"},
             {"role": "user", "content": "<pr_description>fix lexer.py</pr_description>"}]
    assert not _first(msgs)


def _shell_run(reminder: bool) -> list[dict[str, Any]]:
    """mini-SWE-agent's run: fenced shell blocks answered by their exit status; `reminder`:
    one turn wrote two blocks, and the harness answered with its format reminder."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You can interact with a computer shell."},
        {"role": "user", "content": "<pr_description>\nfix parser.py\n</pr_description>"}]
    for k in range(4):
        if reminder and k == 2:
            msgs += [{"role": "assistant",
                      "content": "THOUGHT: both.\n\n```bash\nls\n```\n\n```bash\npwd\n```"},
                     {"role": "user", "content": "Please always provide EXACTLY ONE action in "
                                                 "triple backticks, found 2 actions."}]
        msgs += [{"role": "assistant", "content": f"THOUGHT: look.\n\n```bash\ncat f{k}.py\n```"},
                 {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n"
                                             f"{'value = 1' * 20}\n</output>"}]
    return msgs


def test_a_shell_run_stays_on_its_first_task_through_a_format_reminder() -> None:
    """The harness's reply to a malformed turn answers no call: read as a new task, it ended
    the run's first task, and the run's later large calls stepped unweighed. Where the
    agent's record says its sessions are runs of one task (`runs_of_one`), the run stays
    on its first task through it, until a later task opens as the first did."""
    run = parse_request({"messages": _shell_run(reminder=True)}, TokenCounter(), "o200k_base")
    assert not on_first_task(run.items)  # the reminder ends it, by the layout alone
    assert on_first_task(run.items, through=True)
    assert on_first_task(parse_request({"messages": _shell_run(reminder=False)}, TokenCounter(),
                                       "o200k_base").items)
    queue = [*_shell_run(reminder=True),
             {"role": "assistant", "content": "THOUGHT: done.\n\n```bash\nsubmit\n```"},
             {"role": "user", "content": "<pr_description>\nfix lexer.py\n</pr_description>"}]
    later = parse_request({"messages": queue}, TokenCounter(), "o200k_base")
    assert not on_first_task(later.items, through=True)


def _record(started: int, long: int) -> tuple[int, ...]:
    """An agent's run record (`agents.AgentRunStore`): `started` sessions, `long` of them
    past the last of `RUN_MARKS` (the others ended at 13 calls)."""
    return tuple(started if mark <= 13 else long for mark in RUN_MARKS)


def test_runs_of_one_task_by_the_agents_record() -> None:
    """Runs of one task each: more than `repay_ahead_runs` sessions before this one, fewer
    than nine in ten of them past the record's last mark (mini-SWE-agent's runs: 61%). A
    queue's sessions all run long: never, nor with no record or too few sessions."""
    c = YOUNG.model_copy(update={"repay_ahead_runs": 5, "repay_agent_quantile": 0.9})
    assert runs_of_one(6, c, _record(11, 6))
    assert not runs_of_one(6, c, _record(11, 10))  # a queue of tasks
    assert runs_of_one(40, c, _record(11, 9))  # this session past the mark is not counted
    assert not runs_of_one(6, c, _record(6, 0))  # five sessions before this one
    assert not runs_of_one(6, c, None)
    assert not runs_of_one(6, c.model_copy(update={"repay_ahead_runs": 0}), _record(11, 0))


def test_a_large_call_on_a_later_task_is_not_weighed() -> None:
    assert young(5, YOUNG) and young(5, YOUNG, first_task=True)
    assert not young(5, YOUNG, first_task=False)
    assert not young(41, YOUNG, first_task=True)
    # a weighed step stops before the latest answer; on a later task it reaches the end
    cls = TaskClass(name="y", compaction=YOUNG.model_copy(update={"max_step_share": 0.5}))
    turns, tokens_from = [2, 4], {2: 300, 3: 400, 4: 300, 5: 400}
    state = SessionState(horizon=0, calls=5, steps=0)
    assert horizon_after(turns, tokens_from, 6, state, cls, call_tokens=9000) == 4
    assert horizon_after(turns, tokens_from, 6, state, cls, call_tokens=9000,
                         first_task=False) == 6


def _left_out_batch(api: bool, later: bool) -> bool:
    """tests/context/test_late_batch.py's step on a session's second call, which leaves out
    a mask of the digests' batch (message 3, the reply to the agent's first answer); `api`:
    that answer made a call through the API; `later`: message 3 is a user message (a
    customer's next request, a queue's next task, or a text-tool agent's output), else the
    API call's tool output (the first task goes on)."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You help customers."},
                                  {"role": "user", "content": "my order " * 50}]
    for k in range(4):
        msgs += [{"role": "assistant", "content": f"looking up {k} " * 5},
                 {"role": "user" if k == 0 else "assistant", "content": f"reply {k} " * 100}]
    if api:
        msgs[2]["tool_calls"] = [{"id": "c0", "type": "function",
                                  "function": {"name": "lookup", "arguments": "{}"}}]
    if not later:
        msgs[3] = {"role": "tool", "tool_call_id": "c0", "content": msgs[3]["content"]}
    counter = TokenCounter()
    before = parse_request({"messages": msgs}, counter, "o200k_base").items
    assert on_first_task(before) is (api and not later)
    taken = {3: 10, 7: next(i.tokens for i in before if i.message_index == 7) // 2}
    final = [replace(i, text=i.text[: len(i.text) // 2], tokens=i.tokens - taken[i.message_index])
             if i.message_index in taken else i for i in before]
    c = YOUNG.model_copy(update={"repay_young_calls": 30})
    ctx = StageContext(task_class=task_class("t", {"compaction": c.model_dump()}),
                       counter=counter, encoding="o200k_base", embedder=None, fixed_tokens=3,
                       horizon=9, query="", originals={i.id: i for i in before},
                       decisions={}, calls=2)
    by_index = {i.message_index: i.id for i in before}
    ctx.decisions[by_index[3]] = Decision("compress", "mask", "aged", "mask", 1)
    ctx.decisions[by_index[7]] = Decision("compress", "compress", "aged", "summary")
    _, _, batch = _leave_unrepaid(msgs, before, final, ctx, {}, SessionState(calls=1), c, 9)
    return batch


def test_only_a_first_tasks_left_out_batch_makes_the_next_one_late() -> None:
    assert _left_out_batch(api=True, later=False)
    assert not _left_out_batch(api=True, later=True)
    # a text-tool agent's session is not weighed: its batch is never late
    assert not _left_out_batch(api=False, later=True)
