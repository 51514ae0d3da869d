"""`bench/autogpt.py` on tiny VCR cassettes committed to a git repository written here (not
the real data): every version of every cassette read, agent cycles kept and helper calls
left out, a call recorded again kept once, calls chained into runs by their replies, each
run written as a per-call session that the replay loads with its calls as sent; and the real
mirror where present."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import autogpt, corpora
from bench.corpora import session_calls
from tests.bench.converted import committed, git, loaded, rows

MIRROR = Path("/work/.mirror/Significant-Gravitas+Auto-GPT-test-cassettes/repo")
PROMPT = "You are Follow-Instructions-GPT, an AI designed to read files.\n\nGOALS:\n1. Read"
NOW = {"role": "system", "content": "The current time and date is Sat Jan  1 00:00:00 2000"}
CYCLE = {"role": "user", "content": "Determine which next command to use, and respond using "
                                    "the format specified above:"}
R1 = '{"command": {"name": "read_file", "args": {"filename": "instructions_1.txt"}}}'
R2 = '{"command": {"name": "write_to_file", "args": {"filename": "output.txt"}}}'
R3 = '{"command": {"name": "task_complete", "args": {"reason": "done"}}}'
R4 = '{"command": {"name": "list_files", "args": {"directory": "."}}}'


def call(*history: dict[str, str], prompt: str = PROMPT, past: str = "I was created"
         ) -> list[dict[str, str]]:
    """A cycle's messages: the header rebuilt (the date, what memory recalled), the history."""
    recalled = {"role": "system", "content": f"This reminds you of these events from your "
                                             f"past: {past}"}
    return [{"role": "system", "content": prompt}, NOW, recalled, *history, CYCLE]


def said(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def result(text: str) -> dict[str, str]:
    return {"role": "system", "content": f"Command read_file returned: {text}"}


FIRST = call()
SECOND = call(CYCLE, said(R1), result("This task_id is 2314"), past="I read a file")
THIRD = call(CYCLE, said(R1), result("This task_id is 2314"), CYCLE, said(R2),
             result("File written to successfully."), past="I wrote a file")
OTHER = call(CYCLE, said(R4), result("instructions_1.txt"), past="I listed files")


def interaction(messages: list[dict[str, str]], reply: str | None) -> dict[str, Any]:
    body = {"model": "gpt-3.5-turbo", "messages": messages, "temperature": 0}
    response = ("" if reply is None else
                json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}))
    return {"request": {"body": json.dumps(body), "method": "POST"},
            "response": {"body": {"string": response}, "status": {"code": 200}}}


def cassette(*items: dict[str, Any]) -> str:
    return yaml.safe_dump({"interactions": list(items), "version": 1})


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "cassettes"
    (repo / "test_memory").mkdir(parents=True)
    (repo / "LICENSE").write_text("MIT License\n")
    path = repo / "test_memory" / "test_memory.yaml"
    # first recording: the first two cycles, a helper call between them, a call whose
    # response was not recorded, and a lone cycle of another agent
    path.write_text(cassette(
        interaction(FIRST, R1),
        interaction([{"role": "user", "content": "Write a concise summary of: x"}], "x"),
        interaction(SECOND, R2),
        interaction(call(prompt="You are Other-GPT.\n\nGOALS:\n1. Browse"), None),
        interaction(call(prompt="You are Lone-GPT.\n\nGOALS:\n1. Wait"), R3)))
    committed(repo, "first")
    # re-recorded: the first cycle again, then the third; and another execution whose
    # first cycle answered otherwise
    path.write_text(cassette(interaction(FIRST, R1), interaction(THIRD, R3),
                             interaction(FIRST, R4), interaction(OTHER, R3)))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "re-recorded")
    (repo / "test_broken").mkdir()
    (repo / "test_broken" / "test_broken.yaml").write_text("interactions:\n- a: [\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "broken")
    return repo / ".git", git(repo, "rev-parse", "HEAD")


def test_runs_are_chained_and_written_per_call(source: tuple[Path, str],
                                                tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = autogpt.convert(repo, out, rev=rev)

    runs, queues = loaded(written, out, "autogpt")
    assert written == {"autogpt": 2, "autogpt-queue": 1}
    assert [s.id for s in runs] == ["autogpt/test_memory/r000", "autogpt/test_memory/r001"]
    # each call as sent, across the two versions of the cassette, with its reply
    assert session_calls(runs[0]) == [(FIRST, said(R1)), (SECOND, said(R2)),
                                      (THIRD, said(R3))]
    assert runs[0].messages == [*THIRD, said(R3)]
    assert session_calls(runs[1]) == [(FIRST, said(R4)), (OTHER, said(R3))]
    line = rows(out, "autogpt")[0]
    assert (line["model"], line["task_id"], line["tools"]) == ("gpt-3.5-turbo", "test_memory", [])
    readme = (out / "autogpt" / "README.md").read_text()
    assert f"`{rev}`" in readme and "MIT" in readme
    assert ("Read: cassette versions read 2, helper calls (not an agent cycle) 1, agent "
            "calls without a recorded reply 1, agent calls recorded again (same messages and "
            "reply) 1, cassette versions that do not parse 1. Agent calls kept: 6") in readme
    assert "runs: 3 (2 of 2+ calls\n  used, 1 single calls not used)" in readme
    assert "3 of the runs' 5 calls\n  are not a prefix" in readme
    # the queue: the system prompt once, the first run's chat, then the second run's calls
    # after it, nothing added
    [queue] = queues
    assert queue.messages == [*runs[0].messages, *runs[1].messages[1:]]
    assert session_calls(queue)[:3] == session_calls(runs[0])
    assert session_calls(queue)[3:] == [
        ([*runs[0].messages, *FIRST[1:]], said(R4)), ([*runs[0].messages, *OTHER[1:]], said(R3))]
    # without per-call mode the replay would read the last call's prefixes instead
    [prefixes, _] = corpora.load("autogpt", out, per_call=False)
    assert len(session_calls(prefixes)) == 3 and session_calls(prefixes)[0][0] != FIRST
    assert session_calls(prefixes)[0][0][2]["content"].endswith("I wrote a file")


def test_a_call_whose_predecessor_is_missing_starts_its_own_run() -> None:
    calls = [{"messages": THIRD, "reply": said(R3)},
             {"messages": FIRST, "reply": said(R1)}, {"messages": SECOND, "reply": said(R2)}]
    # FIRST -> SECOND -> THIRD, whatever the order recorded
    assert autogpt.chain(calls) == [[1, 2, 0]]
    # with SECOND missing, THIRD follows nothing recorded: a run of its own
    assert autogpt.chain([calls[0], calls[1]]) == [[0], [1]]


def test_only_agent_cycles_are_calls() -> None:
    assert autogpt.is_cycle(FIRST)
    assert not autogpt.is_cycle([{"role": "user", "content": "Determine the summary"}])
    assert not autogpt.is_cycle([{"role": "system", "content": PROMPT},
                                 {"role": "user", "content": "Summarise"}])


@pytest.mark.skipif(not MIRROR.is_dir(),
                    reason=f"no mirror of Significant-Gravitas/Auto-GPT-test-cassettes at {MIRROR}")
def test_the_recorded_cassettes(tmp_path: Path) -> None:
    assert autogpt.convert(MIRROR, tmp_path) == {"autogpt": 150, "autogpt-queue": 71}
    sessions = corpora.load("autogpt", tmp_path)
    assert sum(len(session_calls(s)) for s in sessions) == 560
    assert all(s.calls is not None and s.messages[-1]["role"] == "assistant" for s in sessions)
