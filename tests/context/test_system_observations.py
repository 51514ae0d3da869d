"""An agent whose harness sends each command's result back as a system message after the
conversation started (`Command read_file returned: ...`), and rebuilds the system messages
of its header (a date, what its memory recalled) on every call: such a result answers the
call the assistant turn before it wrote (`items.system_observation`), so it is history that
ages as a text tool's result does, not a pinned instruction (`Layout.observations`); the
session is a text-tool agent's (`RequestScan.text_tools`); its agent is its leading system
prompt, not every system message (`classify.agent_fingerprint`); and a young session of it
takes no step on credit (`steps.takes_credit`). A system message mid-conversation that
names no call the assistant just wrote (a reminder of the rules, a new task's prompt) stays
pinned (bench/README.md, "Results sent back as system messages")."""

from __future__ import annotations

import json
from typing import Any

from gateway.context.classify import RequestScan, agent_fingerprint, is_text_tool_request
from gateway.context.items import parse_request, system_observation
from gateway.context.session import SessionState
from gateway.context.steps import horizon_after, takes_credit
from gateway.context.taskclass import Compaction, TaskClass
from gateway.context.tokens import TokenCounter

PROMPT = {"role": "system", "content": "You are file-GPT. Commands: read_file, write_to_file."}
NEXT = {"role": "user", "content": "Determine which next command to use."}


def reply(command: str, **args: str) -> dict[str, str]:
    return {"role": "assistant", "content": json.dumps(
        {"thoughts": {"text": "I should go on with the task " * 8},
         "command": {"name": command, "args": args}}, indent=2)}


def result(command: str, text: str) -> dict[str, str]:
    return {"role": "system", "content": f"Command {command} returned: {text}"}


def header(memory: str) -> list[dict[str, str]]:
    return [PROMPT, {"role": "system", "content": "The current time and date is Mon 1 Jan"},
            {"role": "system", "content": f"This reminds you of these events: {memory}"}]


def session(memory: str = "I was created") -> list[dict[str, Any]]:
    return [*header(memory), NEXT,
            reply("read_file", filename="instructions_1.txt"),
            result("read_file", "The task id is 2314. Read instructions_2.txt next."), NEXT,
            reply("read_file", filename="instructions_2.txt"),
            result("read_file", "Write the task id to output.txt."), NEXT]


def test_a_system_message_naming_the_call_just_written_is_its_result() -> None:
    said = reply("read_file", filename="a.txt")["content"]
    assert system_observation(said, "Command read_file returned: hello")
    assert system_observation("I will call read_file(\"a.txt\")", "read_file(\"a.txt\") gave: x")
    assert not system_observation(said, "Remember: answer in JSON only.")
    assert not system_observation("Done: the file says hello.", "You are a new agent now.")


def test_a_result_sent_as_a_system_message_ages_and_the_latest_stays_pinned() -> None:
    messages = session()
    parsed = parse_request({"messages": messages}, TokenCounter(), "o200k_base")
    assert parsed.layout is not None and parsed.layout.observations == {5, 8}
    by_index = {item.message_index: item for item in parsed.items}
    first, latest = by_index[5], by_index[8]
    assert first.kind == "user" and not first.pinned  # an older result: history
    assert latest.kind == "user" and latest.pinned  # the call still open
    assert all(by_index[i].kind == "system" and by_index[i].pinned for i in (0, 1, 2))
    # the harness's prompt after a result starts no new task
    assert parsed.layout.clock.task_start == -1
    assert parsed.layout.clock.text_calls and parsed.layout.clock.system_results


def test_a_reminder_mid_conversation_stays_a_pinned_instruction() -> None:
    messages = [PROMPT, NEXT, reply("read_file", filename="a.txt"),
                {"role": "system", "content": "Reminder: reply with one JSON object only."},
                NEXT, reply("write_to_file", filename="b.txt"), NEXT]
    parsed = parse_request({"messages": messages}, TokenCounter(), "o200k_base")
    assert parsed.layout is not None and not parsed.layout.observations
    reminder = next(item for item in parsed.items if item.message_index == 3)
    assert reminder.kind == "system" and reminder.pinned
    assert not is_text_tool_request({"messages": messages})
    assert takes_credit(parsed.items)


def test_such_a_session_carries_text_tool_history() -> None:
    messages = session()
    assert is_text_tool_request({"messages": messages})
    scan = RequestScan()  # read on call by call, each call only its new messages
    assert not scan.text_tools(messages[:5])
    assert scan.text_tools(messages[:6])


def test_the_agent_is_its_leading_system_prompt_not_its_rebuilt_header() -> None:
    one = agent_fingerprint({"messages": session("I was created")})
    other = agent_fingerprint({"messages": session("I read instructions_1.txt")[:6]})
    assert one is not None and one == other
    renamed = [{"role": "system", "content": "You are web-GPT."}, *session()[1:]]
    assert agent_fingerprint({"messages": renamed}) != one
    assert agent_fingerprint({"messages": [NEXT, result("read_file", "x")]}) is None


def test_a_young_session_of_such_an_agent_takes_no_step_on_credit() -> None:
    parsed = parse_request({"messages": session()}, TokenCounter(), "o200k_base")
    assert not takes_credit(parsed.items)
    credit = Compaction(verbatim_tokens_high=1000, verbatim_tokens_low=0, max_step_share=0.2,
                        early_calls=12, early_max_tokens=8000, early_share=0.6)
    cls = TaskClass(name="c", compaction=credit)
    third = SessionState(horizon=0, calls=2, steps=0)  # the share allows no step yet
    over = {2: 300, 3: 900}
    assert horizon_after([2, 4], over, 6, third, cls, call_tokens=3000) == 4
    assert horizon_after([2, 4], over, 6, third, cls, call_tokens=3000, credit=False) == 0
