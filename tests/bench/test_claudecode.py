"""`bench/claudecode.py` on a made-up Claude Code session file committed to a git repository
written here (not the real data): each reply's chat rebuilt through `parentUuid`, reply
blocks of one message merged, tool results as tool messages, thinking and non-chat entries
left out, a sub-agent chat and a compacted chat as runs of their own, a missing result
filled, short runs left out; and the real mirror where present."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import claudecode, corpora
from bench.chat_corpus import RepoReader
from bench.corpora import session_calls
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/Durban-Designer+vsla/repo")
SYSTEM = {"role": "system", "content": claudecode.SYSTEM}


def entry(uuid: str, parent: str | None, kind: str, content: Any, *, mid: str | None = None,
          side: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if mid:
        message.update(id=mid, model="claude-test")
    return {"uuid": uuid, "parentUuid": parent, "type": kind, "isSidechain": side,
            "message": message}


def use(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": name, "input": args}


def result(cid: str, text: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": cid, "content": text}


def call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, separators=(",", ":"))}}


ENTRIES = [
    {"type": "summary", "summary": "Fix the build", "leafUuid": "x"},
    entry("u1", None, "user", "Fix the build please."),
    entry("a1", "u1", "assistant", [{"type": "thinking", "thinking": "hmm"}], mid="m1"),
    entry("a2", "a1", "assistant", [{"type": "text", "text": "Looking."}], mid="m1"),
    entry("a3", "a2", "assistant", [use("t1", "Read", file_path="a.c")], mid="m1"),
    entry("a4", "a3", "assistant", [use("t2", "Bash", command="make")], mid="m1"),
    entry("r1", "a4", "user", [result("t1", "int main;")]),
    entry("r2", "r1", "user", [result("t2", [{"type": "text", "text": "error"}]),
                               {"type": "text", "text": "also check b.c"}]),
    entry("a5", "r2", "assistant", [use("t3", "Task", prompt="find b.c")], mid="m2"),
    # the sub-agent's own chat: a root of its own
    entry("s1", None, "user", "find b.c", side=True),
    entry("s2", "s1", "assistant", [use("t4", "Glob", pattern="b.c")], mid="m3", side=True),
    entry("s3", "s2", "user", [result("t4", "src/b.c")], side=True),
    entry("s4", "s3", "assistant", [{"type": "text", "text": "src/b.c"}], mid="m4",
          side=True),
    {"uuid": "y1", "parentUuid": "a5", "type": "system", "content": "note"},
    entry("r3", "y1", "user", [{"type": "text", "text": "[Request interrupted]"}]),
    entry("a6", "r3", "assistant", [{"type": "text", "text": "Stopped."}], mid="m5"),
    # compaction: a boundary with no parent, the summary as the new chat's user turn
    {"uuid": "c0", "parentUuid": None, "type": "system", "subtype": "compact_boundary"},
    entry("c1", "c0", "user", "Summary: the build is fixed."),
    entry("c2", "c1", "assistant", [{"type": "text", "text": "Ok."}], mid="m6"),
]


def jsonl(entries: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(e) + "\n" for e in entries)


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "vsla"
    folder = repo / claudecode.FOLDER / "-home-dev-proj"
    folder.mkdir(parents=True)
    (repo / "LICENSE").write_text("MIT License\n")
    (repo / "README.md").write_text("vsla\n")
    (folder / "0001.jsonl").write_text(jsonl(ENTRIES))
    return committed(repo, "sessions")


def test_each_reply_carries_the_chain_before_it(source: tuple[Path, str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    repo, rev = source
    out = tmp_path / "out"
    monkeypatch.setattr(claudecode, "MIN_CALLS", 2)

    written = claudecode.convert(repo, out, rev=rev)

    runs, queues = loaded(written, out, "claude-code")
    # the main chat (3 replies) and the sub-agent's (2); the compacted chat has 1: left out
    assert written == {"claude-code": 2, "claude-code-queue": 1}
    main, side = runs
    assert (main.id, side.id) == ("claude-code/000-0001", "claude-code/001-0001-side")
    calls = session_calls(main)
    opened = [SYSTEM, {"role": "user", "content": "Fix the build please."}]
    assert calls[0] == (opened, {"role": "assistant", "content": "Looking.",
                                 "tool_calls": [call("t1", "Read", file_path="a.c"),
                                                call("t2", "Bash", command="make")]})
    asked = [*opened, calls[0][1],
             {"role": "tool", "tool_call_id": "t1", "content": "int main;"},
             {"role": "tool", "tool_call_id": "t2", "content": "error"},
             {"role": "user", "content": "also check b.c"}]
    assert calls[1] == (asked, {"role": "assistant", "content": "",
                                "tool_calls": [call("t3", "Task", prompt="find b.c")]})
    # the system note is not a turn; the call without a result gets one written
    assert calls[2][0] == [*asked, calls[1][1],
                           {"role": "tool", "tool_call_id": "t3",
                            "content": claudecode.NO_RESULT},
                           {"role": "user", "content": "[Request interrupted]"}]
    assert main.messages == [*calls[2][0], {"role": "assistant", "content": "Stopped."}]
    assert [m for m, _ in session_calls(side)][1][1:] == [
        {"role": "user", "content": "find b.c"},
        {"role": "assistant", "content": "", "tool_calls": [call("t4", "Glob",
                                                                 pattern="b.c")]},
        {"role": "tool", "tool_call_id": "t4", "content": "src/b.c"}]
    line = rows(out, "claude-code")[0]
    assert (line["model"], line["tools"]) == ("claude-test", [])
    readme = (out / "claude-code" / "README.md").read_text()
    assert f"`{rev}`" in readme and "MIT" in readme
    assert "runs of fewer than 2 calls 1" in readme
    assert "tool calls without a recorded result (NO_RESULT) 1" in readme
    [queue] = queues
    assert len(session_calls(queue)) == 5
    assert session_calls(queue)[3][0][:len(main.messages)] == main.messages


def test_runs_shorter_than_min_calls_are_left_out(source: tuple[Path, str]) -> None:
    repo, rev = source
    reader = RepoReader(repo, "README.md")
    runs, counts = claudecode.load(reader, rev)
    assert counts["files read"] == 1 and counts["files absent from the snapshot"] == 0
    assert [len(r["calls"]) for r in runs] == [3]  # at MIN_CALLS 3: the main chat only


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of {claudecode.SOURCE} at {MIRROR}")
def test_the_recorded_sessions(tmp_path: Path) -> None:
    assert claudecode.convert(MIRROR, tmp_path) == {"claude-code": 23,
                                                    "claude-code-queue": 16}
    sessions = corpora.load("claude-code", tmp_path)
    assert sum(len(session_calls(s)) for s in sessions) == 1118
