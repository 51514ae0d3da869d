"""`bench/geminicli.py` on made-up Gemini CLI chat recordings committed to a git repository
written here (not the real data): each `gemini` message is a call sending the chat before
it; its calls answered by their `output` / `error` strings (or `[no result recorded]`), a
long one cut as the shared corpora are;
`thoughts` and `info` / `error` notes left out; a reply right after a reply kept as
recorded; of one file name in both folders the longer copy read; short conversations and
other files left out; the queue; and the real mirror where present."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import corpora, geminicli
from bench.corpora import session_calls
from bench.toolathlon import cut
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/mischa-thisness+M-Gemini/repo")
SYSTEM = {"role": "system", "content": geminicli.SYSTEM}


def user(text: str) -> dict[str, Any]:
    return {"id": text, "timestamp": "t", "type": "user", "content": text}


def gemini(text: str, *calls: dict[str, Any]) -> dict[str, Any]:
    return {"id": text, "timestamp": "t", "type": "gemini", "content": text,
            "thoughts": [{"subject": "Planning", "description": "think first"}],
            "tokens": {"input": 100, "output": 5}, "model": "gemini-test",
            "toolCalls": list(calls)}


def tool(cid: str, name: str, response: dict[str, Any] | None, **args: Any
         ) -> dict[str, Any]:
    result = [] if response is None else [
        {"functionResponse": {"id": cid, "name": name, "response": response}}]
    return {"id": cid, "name": name, "args": args, "result": result, "status": "success",
            "resultDisplay": "shown only"}


def call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, separators=(",", ":"))}}


MAIN = [
    user("List the files"),
    gemini("I will list them.",
           tool("ls-1", "run_shell_command", {"output": "Output: a.txt b.txt"}, command="ls"),
           tool("rf-2", "read_file", {"error": "File not found: c.txt"}, path="c.txt")),
    {"id": "i1", "timestamp": "t", "type": "info", "content": "Request cancelled."},
    gemini("Two files."),
    gemini("Anything else?"),  # recorded right after a reply without calls
    user("Fetch the page"),
    gemini("Fetching.", tool("wf-3", "web_fetch", None, url="https://example.org")),
    gemini("It did not answer."),
    {"id": "e1", "timestamp": "t", "type": "error", "content": "[API Error: quota]"},
]


LONG = "x" * 20_000 + "y" * 10_000  # over the shared corpora's 24,000 characters


def recording(sid: str, messages: list[dict[str, Any]]) -> str:
    return json.dumps({"sessionId": sid, "projectHash": "h", "startTime": "t",
                       "lastUpdated": "t", "messages": messages})


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "m-gemini"
    archives, logs = repo / "Archives", repo / "chat_logs"
    archives.mkdir(parents=True)
    logs.mkdir()
    (repo / "LICENSE").write_text("CC0 1.0 Universal\n")
    (repo / "README.md").write_text("archive\n")
    (archives / "session-2025-12-01T10-00-aaaa.json").write_text(recording("a", MAIN))
    # the same file name in the other folder, shorter: left out
    (logs / "session-2025-12-01T10-00-aaaa.json").write_text(recording("a", MAIN[:4]))
    # a later conversation whose chat_logs copy is longer: that copy is read
    later = [user("Hi"), gemini("Hello.", tool("cat-4", "read_file", {"output": LONG})),
             user("Date?"), gemini("Today."), user("Bye"), gemini("Bye.")]
    (archives / "session-2025-12-02T09-00-bbbb.json").write_text(recording("b", later[:2]))
    (logs / "session-2025-12-02T09-00-bbbb.json").write_text(recording("b", later))
    (archives / "session-2025-12-03T08-00-cccc.json").write_text(
        recording("c", [user("Hi"), gemini("Hello."), user("Bye"), gemini("Bye.")]))
    (archives / "session-2025-12-01T10-00-aaaa.md").write_text("# not read\n")
    return committed(repo, "recordings")


def test_each_reply_is_a_call_sending_the_chat_before_it(source: tuple[Path, str],
                                                         tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = geminicli.convert(repo, out, rev=rev)

    runs, queues = loaded(written, out, "gemini-cli")
    assert written == {"gemini-cli": 2, "gemini-cli-queue": 1}  # 2-call "cccc" left out
    first, second = runs
    assert first.id == "gemini-cli/000-2025-12-01T10-00-aaaa"
    calls = session_calls(first)
    asked = [SYSTEM, {"role": "user", "content": "List the files"}]
    listed = {"role": "assistant", "content": "I will list them.",
              "tool_calls": [call("ls-1", "run_shell_command", command="ls"),
                             call("rf-2", "read_file", path="c.txt")]}
    assert calls[0] == (asked, listed)
    answered = [*asked, listed,
                {"role": "tool", "tool_call_id": "ls-1", "content": "Output: a.txt b.txt"},
                {"role": "tool", "tool_call_id": "rf-2", "content": "File not found: c.txt"}]
    two = {"role": "assistant", "content": "Two files."}
    assert calls[1] == (answered, two)  # the info note is not sent
    assert calls[2] == ([*answered, two], {"role": "assistant", "content": "Anything else?"})
    fetch = {"role": "assistant", "content": "Fetching.",
             "tool_calls": [call("wf-3", "web_fetch", url="https://example.org")]}
    assert calls[3] == ([*answered, two, {"role": "assistant", "content": "Anything else?"},
                         {"role": "user", "content": "Fetch the page"}], fetch)
    # a call without a recorded result is answered by the placeholder
    no_result = {"role": "tool", "tool_call_id": "wf-3", "content": geminicli.NO_RESULT}
    assert calls[4] == ([*calls[3][0], fetch, no_result],
                        {"role": "assistant", "content": "It did not answer."})
    assert first.messages == [*calls[4][0],
                              {"role": "assistant", "content": "It did not answer."}]
    # the longer copy of the second file (from chat_logs/) was read; its long read cut
    later = session_calls(second)
    assert len(later) == 3
    assert later[1][0][3] == {"role": "tool", "tool_call_id": "cat-4",
                              "content": cut(LONG)}
    assert "[... 6000 characters cut ...]" in cut(LONG) and len(cut(LONG)) < 24_100
    line = rows(out, "gemini-cli")[1]
    assert (line["path"], line["model"], line["tools"]) == (
        "chat_logs/session-2025-12-02T09-00-bbbb.json", "gemini-test", [])
    readme = (out / "gemini-cli" / "README.md").read_text()
    assert f"`{rev}`" in readme and "CC0-1.0" in readme
    for counted in ("files read 5", "conversations of fewer than 3 calls 1",
                    "copies of a file read in the other folder (shorter one left out) 2",
                    "replies right after a reply without calls (no turn between) 1",
                    "info notes (shown, never sent) 1", "error notes (shown, never sent) 1",
                    "tool calls without a recorded result (NO_RESULT) 1",
                    "contents over 24,000 characters cut to that 1"):
        assert counted in readme
    [queue] = queues
    assert session_calls(queue)[:5] == calls
    assert len(session_calls(queue)) == 8


def test_a_response_without_output_or_error_is_sent_as_its_json() -> None:
    assert geminicli.result_text(tool("x", "f", {"files": 2})) == '{"files":2}'
    assert geminicli.result_text(tool("x", "f", None)) is None


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of {geminicli.SOURCE} at {MIRROR}")
def test_the_recorded_conversations(tmp_path: Path) -> None:
    assert geminicli.convert(MIRROR, tmp_path) == {"gemini-cli": 66, "gemini-cli-queue": 32}
    sessions = corpora.load("gemini-cli", tmp_path)
    assert sum(len(session_calls(s)) for s in sessions) == 1797
