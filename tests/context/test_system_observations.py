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
from gateway.context.items import ends_in_block, parse_request, system_observation
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


# A terminal agent that writes its calls as blocks at the end of its turn (a fenced block
# named after the tool, or the same in XML tags) and gets each block's output back as a system
# message that names no call (`Ran command: ...`, `Saved to main.py`).
ASK = {"role": "user", "content": "initialize a git repository, write main.py, and commit it"}


def fenced(prose: str, info: str, code: str) -> dict[str, str]:
    return {"role": "assistant", "content": f"{prose}\n\n```{info}\n{code}\n```"}


def xml_call(prose: str, tag: str, code: str, args: str = "") -> dict[str, str]:
    return {"role": "assistant",
            "content": f"{prose}\n\n<tool-use>\n<{tag}{args}>\n{code}\n</{tag}>\n</tool-use>"}


def output(text: str) -> dict[str, str]:
    return {"role": "system", "content": text}


def block_session() -> list[dict[str, str]]:
    return [ASK,
            fenced("First the repository:", "shell", "git init"),
            output("Ran command: `git init`\n\nstdout: `Initialized empty Git repository in "
                   "/home/user/workspace/.git/`" + " (details)" * 30),
            xml_call("Now the file:", "save", 'print("Hello, world!")', ' path="main.py"'),
            output("Saved to main.py"),
            fenced("Then the commit:", "shell", "git add main.py && git commit -m init")]


def test_a_turn_that_ends_in_a_block_to_run_ends_in_one() -> None:
    assert ends_in_block(fenced("Let me run it:", "shell", "ls")["content"] + "\n\n")
    assert ends_in_block(xml_call("Saving:", "save", "x = 1", ' path="a.py"')["content"])
    assert ends_in_block("Saving:\n<save>\nx = 1\n</save>")
    # code shown, then prose: an answer, not a block to run
    assert not ends_in_block("Here it is:\n```python\nx = 1\n```\nThat sets x.")
    assert not ends_in_block("An unclosed fence:\n```")  # a fence opened, none closed
    assert not ends_in_block("It is <b>bold</b>")  # a tag inside a line of prose
    assert not ends_in_block("Stray closing tag\n</tool-use>")  # no element opened


def test_a_system_message_after_a_turn_ending_in_a_block_is_its_result() -> None:
    said = fenced("Saving it:", "save main.py", 'print("hi")')["content"]
    assert system_observation(said, "Saved to main.py")
    assert system_observation(xml_call("Running:", "shell", "ls")["content"], "Ran command: `ls`")
    assert not system_observation("Here it is:\n```python\nx = 1\n```\nThat sets x.",
                                  "Remember: answer briefly.")


def test_block_results_sent_as_system_messages_age_as_text_tool_history() -> None:
    messages = block_session()
    parsed = parse_request({"messages": messages}, TokenCounter(), "o200k_base")
    assert parsed.layout is not None and parsed.layout.observations == {2, 4}
    by_index = {item.message_index: item for item in parsed.items}
    assert not by_index[2].pinned and not by_index[4].pinned  # answered: history that ages
    assert parsed.layout.clock.text_calls and parsed.layout.clock.system_results
    assert parsed.layout.clock.task_start == -1  # the outputs start no new task
    assert is_text_tool_request({"messages": messages})
    answered = [*messages, output("Ran command: `git add main.py && git commit -m init`")]
    latest = parse_request({"messages": answered}, TokenCounter(), "o200k_base")
    assert latest.layout is not None and 6 in latest.layout.observations
    assert next(i for i in latest.items if i.message_index == 6).pinned  # the open call's
