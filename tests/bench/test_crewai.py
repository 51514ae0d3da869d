"""`bench/crewai.py` on tiny VCR cassettes committed to a git repository written here (not
the real data), in two commits: every version of a cassette is read, a request continues the
execution whose last request it extends, an execution is kept only with 3 calls or more
whose requests are one chat's prefixes, the last reply read from JSON, a gzipped body or an
event stream, a copied cassette kept once, queues per agent; and, where the mirror of
`crewAIInc/crewAI` is on this machine, the real cassettes."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import corpora, crewai
from bench.yardstick import call_ends
from tests.bench.converted import committed, git, loaded, rows

MIRROR = Path("/work/.mirror/crewAIInc+crewAI/repo")
URI = "https://api.openai.com/v1/chat/completions"
SYSTEM = {"role": "system", "content": "You are Researcher. Tools: get_data. Use the format: "
                                       "Thought/Action/Action Input/Observation."}


def task(text: str) -> dict[str, str]:
    return {"role": "user", "content": f"\nCurrent Task: {text}\n\nThought:"}


def step(n: int) -> dict[str, str]:
    return {"role": "assistant",
            "content": f"Thought: step {n}\nAction: get_data\nAction Input: {{\"step\": {n}}}"
                       f"\nObservation: data {n} is 4{n}"}


def completion(content: str | None, calls: list[dict[str, Any]] | None = None) -> str:
    return json.dumps({"object": "chat.completion", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": content, "tool_calls": calls}}]})


def interaction(messages: list[dict[str, Any]], response: dict[str, Any], *,
                uri: str = URI, **extra: Any) -> dict[str, Any]:
    return {"request": {"method": "POST", "uri": uri,
                        "body": json.dumps({"messages": messages, "model": "gpt-4o", **extra})},
            "response": response}


def text(body: str) -> dict[str, Any]:
    return {"content": body, "status_code": 200}


def gzipped(body: str) -> dict[str, Any]:
    return {"body": {"string": gzip.compress(body.encode())}, "status": {"code": 200}}


def stream(*parts: str) -> dict[str, Any]:
    lines = [f"data: {json.dumps({'choices': [{'delta': {'content': p}}]})}" for p in parts]
    return {"body": {"string": "\n\n".join([*lines, "data: [DONE]"]) + "\n\n"}}


FINAL = {"role": "assistant", "content": "Thought: I now know the final answer\n"
                                         "Final Answer: 41 and 42"}
FINAL2 = {"role": "assistant", "content": "Thought: I now know the final answer\n"
                                          "Final Answer: 41 and 42."}
REACT = [SYSTEM, task("collect data 1 and 2")]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]


def call(cid: str, q: str) -> dict[str, Any]:
    return {"id": cid, "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"q": q})}}


FC = [SYSTEM, task("look up x and y"),
      {"role": "assistant", "content": None, "tool_calls": [call("call_1", "x")]},
      {"role": "tool", "tool_call_id": "call_1", "content": "x is 7"},
      {"role": "assistant", "content": None, "tool_calls": [call("call_1", "y")]},
      {"role": "tool", "tool_call_id": "call_1", "content": "y is 9"}]


def react_cassette(last: dict[str, Any], **top: Any) -> dict[str, Any]:
    """A text-format execution of 3 calls (observations in the assistant turns), a 2-call
    one, and an embeddings request."""
    return {**top, "interactions": [
        interaction(REACT, text(completion(step(1)["content"]))),
        interaction([SYSTEM, task("say hi")], text(completion("Thought: x"))),
        interaction([*REACT, step(1)], text(completion(step(2)["content"]))),
        interaction([SYSTEM, task("say hi"), {"role": "assistant", "content": "Thought: x"}],
                    text(completion("Final Answer: hi"))),
        interaction([*REACT, step(1), step(2)], last),
        interaction([{"role": "user", "content": "embed me"}], text("{}"),
                    uri="https://api.openai.com/v1/embeddings"),
    ]}


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "crewai"
    folder = repo / "tests" / "cassettes"
    folder.mkdir(parents=True)
    # first version: the last reply as JSON text
    (folder / "test_react.yaml").write_text(yaml.safe_dump(
        react_cassette(text(completion(FINAL["content"])))))
    (repo / "README.md").write_text("crewAI\n")
    committed(repo, "first")
    # second version (re-recorded): the last reply as an event stream; a function-calling
    # execution whose last response is gzipped; a copy of the first version elsewhere
    (folder / "test_react.yaml").write_text(yaml.safe_dump(
        react_cassette(stream("Thought: I now know the final answer\n",
                              "Final Answer: 41 and 42."))))
    (folder / "test_tools.yaml").write_text(yaml.safe_dump({"interactions": [
        interaction(FC[:2], text(completion(None, [call("call_1", "x")])), tools=TOOLS),
        interaction(FC[:4], text(completion(None, [call("call_1", "y")])), tools=TOOLS),
        interaction(FC, gzipped(completion("x is 7, y is 9")), tools=TOOLS),
    ]}))
    copy = repo / "lib" / "tests" / "cassettes"
    copy.mkdir(parents=True)
    (copy / "test_react_moved.yaml").write_text(yaml.safe_dump(
        react_cassette(text(completion(FINAL["content"])), version=1)))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "second")
    return repo / ".git", git(repo, "rev-parse", "HEAD")


def test_converts_executions_and_queues_that_the_replay_reads(source: tuple[Path, str],
                                                               tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = crewai.convert(repo, out, rev=rev, queue_calls=10)

    assert written == {"crewai": 3, "crewai-queue": 2}
    runs, queues = loaded(written, out, "crewai")
    # every version read, newest first: the re-recorded test_react.yaml (its last reply an
    # event stream), test_tools.yaml, the moved copy (another file, the first version's
    # executions); the first version itself then holds nothing new
    assert [s.id.split("/")[1] for s in runs] == ["test_react_moved", "test_react",
                                                  "test_tools"]
    react = [*REACT, step(1), step(2), FINAL]
    assert runs[0].messages == react and runs[0].tools is None
    assert runs[1].messages == [*react[:-1], FINAL2]
    assert [len(call_ends(s.messages)) for s in runs] == [3, 3, 3]
    tools = runs[2]
    assert tools.tools == TOOLS
    # the reused call id renamed, its result with it; the gzipped last reply read
    assert [m.get("tool_call_id") for m in tools.messages if m["role"] == "tool"] == [
        "call_1", "call_1_2"]
    assert tools.messages[-1] == {"role": "assistant", "content": "x is 7, y is 9"}
    # queues per agent (system prompt and tools): the two text executions joined, the
    # system prompt once, nothing added; the function-calling agent alone
    assert [len(call_ends(q.messages)) for q in queues] == [6, 3]
    assert queues[0].messages == [*react, *react[1:-1], FINAL2]
    assert queues[1].messages == tools.messages
    lines = rows(out, "crewai")
    assert {s["model"] for s in lines} == {"gpt-4o"}
    readme = (out / "crewai" / "README.md").read_text()
    assert "MIT" in readme and f"`{rev}`" in readme
    assert "executions of fewer than 3 calls 3" in readme
    assert "executions seen already (a copied or moved cassette) 1" in readme
    assert "Assistant turns: 9; 4 carry a tool's answer" in readme
    assert "Queues" in (out / "crewai-queue" / "README.md").read_text()


def test_a_request_that_rewrites_the_history_starts_another_execution() -> None:
    tally: Counter[str] = Counter()
    runs = crewai.executions([
        interaction(REACT, text(completion(step(1)["content"]))),
        interaction([*REACT, {"role": "user", "content": "Invalid format, try again"}],
                    text(completion(step(1)["content"]))),
        interaction([*REACT, step(1)], text(completion(FINAL["content"]))),
    ], tally)
    # the retry extends the first request; the next request drops the retry's turn: another
    # execution; the first (its reply never sent back) is not one chat
    assert [len(r["requests"]) for r in runs] == [2, 1]
    assert crewai.chat_of(runs[0]) is None
    assert tally["requests"] == 3


def test_a_last_reply_calling_a_tool_is_not_kept() -> None:
    run = {"requests": [FC[:2], FC[:4], FC], "tools": TOOLS,
           "response": text(completion(None, [call("call_9", "z")]))}
    assert crewai.chat_of(run) is None


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of crewAIInc/crewAI at {MIRROR}")
def test_the_recorded_cassettes(tmp_path: Path) -> None:
    written = crewai.convert(MIRROR, tmp_path)
    assert written == {"crewai": 51, "crewai-queue": 34}
    runs = corpora.load("crewai", tmp_path)
    assert sum(len(call_ends(s.messages)) for s in runs) == 214
    assert all(s.messages[-1]["role"] == "assistant" for s in runs)
