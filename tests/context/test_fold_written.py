"""An exact-text editor's texts that its file still holds go as written in a turns note
(bench/README.md, "Session 69, write69"): the agent's next edit quotes several lines of a
file it wrote whole or edited, indentation and repeated lines included, and a turns note
sends a call's text line by line, stripped and once each."""

from __future__ import annotations

import json
from typing import Any

from gateway.context.fold import FoldMemo, fold
from gateway.context.quoting import standing

FIRST = "def area(shape):\n    return 0\n"
FILE = ("def area(shape):\n    if shape.kind == 'square':\n        return shape.side ** 2\n"
        "    if shape.kind == 'circle':\n        return 3.14 * shape.r ** 2\n"
        "    return 0\n")
OLD = "    if shape.kind == 'circle':\n        return 3.14 * shape.r ** 2\n"
NEW = "    if shape.kind == 'circle':\n        return math.pi * shape.r ** 2\n"
TEST = "def test_square():\n    assert area(Square(2)) == 4\n"


def _call(cid: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function",
         "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _session(*calls: dict[str, Any]) -> list[dict[str, Any]]:
    """Calls by `calls`' arguments, then closed turns of talk and a new request."""
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Write shapes.py, then use math.pi in it."},
    ]
    for k, arguments in enumerate(calls):
        out += [_call(f"c{k}", "tool", arguments),
                {"role": "tool", "tool_call_id": f"c{k}", "content": "Done."}]
    out.append({"role": "assistant", "content": "Done: shapes.py uses math.pi."})
    for k in range(3):
        out += [{"role": "user", "content": f"Thanks. Anything else in step {k}?"},
                {"role": "assistant", "content": f"Nothing else for step {k}."}]
    return [*out, {"role": "user", "content": "Now add rectangles after the circles."}]


def _note(messages: list[dict[str, Any]]) -> str:
    def head(i: int) -> tuple[str, int]:
        return f"id{i}", 400 + len(str(messages[i].get("content")))

    horizon = len(messages) - 1
    folded = fold(messages, None, [], horizon, FoldMemo().original(messages, "enc", head),
                  len, FoldMemo(), client=messages)
    assert folded is not None
    notes = [str(m["content"]) for m in folded.messages if " turns folded]" in
             str(m.get("content"))]
    assert len(notes) == 1
    return notes[0]


def test_a_file_written_whole_then_edited_goes_as_written() -> None:
    note = _note(_session({"file_path": "src/shapes.py", "content": FILE},
                          {"file_path": "src/shapes.py", "old": OLD, "new": NEW}))
    assert FILE in note  # what the next edit quotes: layout and all
    assert NEW in note


def test_a_later_write_of_the_file_supersedes_the_earlier_text() -> None:
    note = _note(_session({"file_path": "src/shapes.py", "content": FIRST},
                          {"file_path": "src/shapes.py", "content": FILE},
                          {"file_path": "src/shapes.py", "new": NEW, "old": OLD}))
    assert FILE in note and NEW in note
    assert FIRST not in note  # line by line, as before
    assert "return 0" in note.split("\n")


def test_only_the_latest_touched_file_goes_as_written() -> None:
    note = _note(_session({"file_path": "tests/test_shapes.py", "content": TEST},
                          {"file_path": "src/shapes.py", "content": FILE},
                          {"file_path": "src/shapes.py", "old": OLD, "new": NEW}))
    assert FILE in note
    assert TEST not in note
    assert "assert area(Square(2)) == 4" in note.split("\n")


def test_a_file_without_a_suffix_is_named_by_its_folder() -> None:
    texts = standing(_session({"file_path": "~/.local/bin/shapes", "content": FILE},
                              {"file_path": "~/.local/bin/shapes", "new": NEW, "old": OLD}),
                     0, 10)
    assert texts.edits and texts.first_edit == 4
    assert texts.files == {"~/.local/bin/shapes": [FILE.replace(OLD, NEW)]}
    assert texts.written == {"~/.local/bin/shapes": [FILE, NEW]}


def test_an_agent_that_never_edits_by_exact_text_gets_its_notes_as_before() -> None:
    note = _note(_session({"file_path": "src/shapes.py", "content": FILE}))
    assert FILE not in note  # line by line, as a turns note reads every call
    assert "return 3.14 * shape.r ** 2" in note.split("\n")
