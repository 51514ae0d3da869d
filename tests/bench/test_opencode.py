"""`bench/opencode.py` on made-up OpenCode session exports committed to a git repository
written here (not the real data): each assistant message with a step is a call sending the
chat before it; user texts (synthetic ones too, not ignored ones) as one turn; tool outputs,
errors and interrupted calls as tool messages; reasoning left out; an output pruned before a
call sent cleared; a compaction cutting later calls back to its turn and summary; an aborted
reply kept or left out; short exports left out; and the real mirror where present."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import corpora, opencode
from bench.corpora import session_calls
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/victoryforphil+dark-factory/repo")
SYSTEM = {"role": "system", "content": opencode.SYSTEM}


def user(mid: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"info": {"id": mid, "role": "user", "time": {"created": 0}}, "parts": list(parts)}


def reply(mid: str, at: int, *parts: dict[str, Any], **info: Any) -> dict[str, Any]:
    return {"info": {"id": mid, "role": "assistant", "modelID": "model-test",
                     "time": {"created": at}, "finish": "stop", **info},
            "parts": [{"type": "step-start"}, *parts]}


def text(value: str, **flags: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **flags}


def tool(cid: str, name: str, state: dict[str, Any], **args: Any) -> dict[str, Any]:
    return {"type": "tool", "callID": cid, "tool": name, "state": {"input": args, **state}}


def done(output: str, compacted: int | None = None) -> dict[str, Any]:
    times: dict[str, Any] = {"start": 1, "end": 2}
    if compacted is not None:
        times["compacted"] = compacted
    return {"status": "completed", "output": output, "time": times}


def call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, separators=(",", ":"))}}


THOUGHT = {"type": "reasoning", "text": "thinking"}
ABORTED = {"name": "MessageAbortedError", "data": {"message": "aborted"}}
MAIN = [
    user("u1", text("Fix the build in @src/"),
         {"type": "file", "mime": "application/x-directory", "filename": "src/"},
         {"type": "file", "mime": "image/png", "filename": "shot.png"},
         text("Called the Read tool with the following input: {}", synthetic=True),
         text("draft", ignored=True)),
    reply("a1", 10, THOUGHT, text("Looking."),
          tool("c1", "read", done("int main;", compacted=25), filePath="a.c"),
          tool("c2", "bash", {"status": "error", "error": "exit 2"}, command="make"),
          tool("c3", "grep", {"status": "running"}, pattern="main")),
    reply("a2", 20, text("Fixed.")),
    # aborted before writing anything but reasoning: a call, not sent again
    reply("a3", 22, THOUGHT, error=ABORTED),
    # the export's record of an aborted reply that never started a step: not a call
    {"info": {"id": "a4", "role": "assistant", "time": {"created": 23}, "error": ABORTED},
     "parts": []},
    user("u2", text("And the tests?")),
    reply("a5", 30, text("Partly"), error=ABORTED),  # aborted after text: sent again
    user("u3", {"type": "compaction", "auto": True}),
    reply("a6", 40, text("Summary: the build is fixed."), summary=True, parentID="u3"),
    user("u4", text("Go on.")),
    reply("a7", 50, text("Done.")),
]
SHORT = [user("u1", text("hi")), reply("a1", 1, text("hello"))]


def export(slug: str, messages: list[dict[str, Any]]) -> str:
    return json.dumps({"info": {"id": f"ses_{slug}", "slug": slug}, "messages": messages})


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "dark-factory"
    folder = repo / opencode.FOLDER
    folder.mkdir(parents=True)
    (repo / "LICENSE").write_text("MIT License\n")
    (repo / "README.md").write_text("dark-factory\n")
    (folder / "session__a.json").write_text(export("main-run", MAIN))
    (folder / "session__a.md").write_text("# not read\n")
    (folder / "session__b.json").write_text(export("short-run", SHORT))
    return committed(repo, "exports")


def test_each_call_sends_the_chat_before_it(source: tuple[Path, str], tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = opencode.convert(repo, out, rev=rev)

    runs, queues = loaded(written, out, "opencode")
    assert written == {"opencode": 1, "opencode-queue": 1}  # the short export left out
    [run] = runs
    assert run.id == "opencode/000-main-run"
    calls = session_calls(run)
    assert len(calls) == 6  # a1 a2 a3 a5 a6 a7; a4 started no step
    asked = [SYSTEM, {"role": "user", "content": [
        {"type": "text", "text": "Fix the build in @src/"},
        {"type": "text", "text": "[file: shot.png]"},
        {"type": "text", "text": "Called the Read tool with the following input: {}"}]}]
    first = {"role": "assistant", "content": "Looking.",
             "tool_calls": [call("c1", "read", filePath="a.c"),
                            call("c2", "bash", command="make"),
                            call("c3", "grep", pattern="main")]}
    assert calls[0] == (asked, first)
    results = [{"role": "tool", "tool_call_id": "c1", "content": "int main;"},
               {"role": "tool", "tool_call_id": "c2", "content": "exit 2"},
               {"role": "tool", "tool_call_id": "c3", "content": opencode.INTERRUPTED}]
    assert calls[1] == ([*asked, first, *results],
                        {"role": "assistant", "content": "Fixed."})
    # pruned at 25: the calls from 30 on are sent it cleared; a3 (reasoning only) is not
    # sent again, a5 (text before the abort) is
    cleared = [results[0] | {"content": opencode.CLEARED}, *results[1:]]
    fixed = {"role": "assistant", "content": "Fixed."}
    assert calls[2] == ([*asked, first, *results, fixed],
                        {"role": "assistant", "content": ""})
    assert calls[3][0] == [*asked, first, *cleared, fixed,
                           {"role": "user", "content": "And the tests?"}]
    assert calls[4] == ([*asked, first, *cleared, fixed,
                         {"role": "user", "content": "And the tests?"},
                         {"role": "assistant", "content": "Partly"},
                         {"role": "user", "content": opencode.COMPACTION_ASK}],
                        {"role": "assistant", "content": "Summary: the build is fixed."})
    # after the summary: its turn, the summary and what follows only
    assert calls[5][0] == [SYSTEM, {"role": "user", "content": opencode.COMPACTION_ASK},
                           {"role": "assistant", "content": "Summary: the build is fixed."},
                           {"role": "user", "content": "Go on."}]
    assert run.messages == [*calls[5][0], {"role": "assistant", "content": "Done."}]
    line = rows(out, "opencode")[0]
    assert (line["model"], line["tools"], line["task_id"]) == ("model-test", [],
                                                               "ses_main-run")
    readme = (out / "opencode" / "README.md").read_text()
    assert f"`{rev}`" in readme and "MIT" in readme
    assert f"exports of fewer than {opencode.MIN_CALLS} calls 1" in readme
    assert "assistant messages without a step (no request sent) 1" in readme
    [queue] = queues
    assert session_calls(queue) == calls


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of {opencode.SOURCE} at {MIRROR}")
def test_the_recorded_sessions(tmp_path: Path) -> None:
    assert opencode.convert(MIRROR, tmp_path) == {"opencode": 18, "opencode-queue": 12}
    sessions = corpora.load("opencode", tmp_path)
    assert sum(len(session_calls(s)) for s in sessions) == 617
