"""An exact-text editor's old edits folded into a turns note keep their new text as the
file now holds it (bench/README.md, "Session 68, edit68"): the agent's next edit of those
lines quotes them, indentation and repeated lines included, as its old text; a note that
sends them line by line, stripped and once each, no longer carries the quote."""

from __future__ import annotations

import json
from typing import Any

from gateway.context.fold import FoldMemo, fold
from gateway.context.quoting import Edits

FILE = ("def area(shape):\n    if shape.kind == 'square':\n        return shape.side ** 2\n"
        "    if shape.kind == 'circle':\n        return 3.14 * shape.r ** 2\n"
        "    return 0\n")
OLD = "    if shape.kind == 'circle':\n        return 3.14 * shape.r ** 2\n"
NEW = ("    if shape.kind == 'circle':\n        return math.pi * shape.r ** 2\n"
       "    if shape.kind == 'rect':\n        return shape.w * shape.h\n")


def _call(cid: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function",
         "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _session(edit: dict[str, Any]) -> list[dict[str, Any]]:
    """A read, an edit by `edit`'s arguments, then closed turns of talk and recent work."""
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Use math.pi in shapes.py and add rectangles."},
        _call("r1", "read_file", {"path": "shapes.py"}),
        {"role": "tool", "tool_call_id": "r1", "content": FILE},
        _call("e1", "apply_edit", edit),
        {"role": "tool", "tool_call_id": "e1", "content": "Edited shapes.py."},
        {"role": "assistant", "content": "Done: circles use math.pi, rectangles added."},
    ]
    for k in range(3):
        out += [{"role": "user", "content": f"Thanks. Anything else in step {k}?"},
                {"role": "assistant", "content": f"Nothing else for step {k}."}]
    return [*out, {"role": "user", "content": "Now add triangles after the rectangles."}]


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


def test_a_turns_note_keeps_an_edits_new_text_as_the_file_holds_it() -> None:
    note = _note(_session({"path": "shapes.py", "old_text": OLD, "new_text": NEW}))
    assert NEW in note  # the quote of the next edit: layout and all
    assert OLD not in note  # the file no longer holds it: a gist of it goes
    assert "shape.r" in note


def test_the_new_text_is_the_one_no_earlier_message_carries_whatever_its_place() -> None:
    messages = _session({"new_text": NEW, "path": "shapes.py", "old_text": OLD})
    assert Edits(messages).of(4) == ((OLD, NEW),)  # the read carries OLD
    note = _note(messages)
    assert NEW in note and OLD not in note


def test_a_file_written_whole_is_noted_as_before() -> None:
    note = _note(_session({"path": "shapes.py", "content": NEW}))
    assert NEW not in note  # one text, no quote beside it: not an edit by exact text
    assert "return math.pi * shape.r ** 2" in note.split("\n")
