"""Tool results forwarded as MCP content blocks (`{"type": "text", "text": "…"}`): digested
as the text they carry, with the payload's short field values (headers, titles, names)
listed whole."""

from __future__ import annotations

import orjson

from gateway.context.summarize import envelope, fields, summarize, values

ROWS = [f"| Course {n} Studies-7 | Teacher Number{n} | Friday {n},2,3 |" for n in range(30)]
TABLE = "\n".join(["| Course Name | Instructor | Class Time |", "|---|---|---|", *ROWS])


def block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text, "annotations": None}).decode()


def test_a_content_block_is_read_as_the_text_it_carries() -> None:
    assert envelope(block(TABLE)) == TABLE
    two = orjson.dumps([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]).decode()
    assert envelope(two) == "a\nb"
    # anything else is not a block: another type, another key, not JSON
    assert envelope(orjson.dumps({"type": "image", "data": "xx"}).decode()) is None
    assert envelope(orjson.dumps({"type": "text", "text": "a", "id": 3}).decode()) is None
    assert envelope('{"type": "text", "text": ') is None
    assert envelope("| Course Name |") is None


def test_fields_are_a_payloads_short_multi_word_values() -> None:
    got = fields(TABLE)
    assert got[:3] == ["Course Name", "Class Time", "Course 0 Studies-7"]
    assert "Instructor" not in got  # one word: the value list carries it
    doc = orjson.dumps({"items": [{"title": "Are you satisfied with our delivery?",
                                   "body": "x " * 80, "n": 3}]}).decode()
    assert fields(doc) == ["Are you satisfied with our delivery?"]  # not the 160-char body
    # a `Key: value` line's value alone when it is several words (the cell repeated it)
    assert fields("Subject: Stock Below Safety Threshold\nok") == ["Stock Below Safety Threshold"]


def test_an_aged_content_block_keeps_its_payloads_fields_whole() -> None:
    out = summarize(block(TABLE), "tool_result", 3)
    assert not out.startswith('{"type"')  # the payload's digest, not the envelope's
    assert "Course Name" in out and "Class Time" in out
    assert "Course 3 Studies-7" in out and "Teacher Number3" in out
    assert len(out) < len(block(TABLE)) // 2  # within its bound
    # the same payload not in a block: no field line (every other tool result as before)
    assert "[omitted fields:" not in summarize(TABLE, "tool_result", 3)


def test_a_content_block_of_json_is_digested_by_its_structure() -> None:
    hits = [{"id": 1000 + n, "title": f"Paper number {n} on graphs"} for n in range(40)]
    out = summarize(block(orjson.dumps(hits).decode()), "tool_result", 3)
    assert out.startswith('[{"id":1000,"title":"Paper number 0 on graphs"}')
    assert "Paper number 5 on graphs" in out
    assert "1039" in values(out)
