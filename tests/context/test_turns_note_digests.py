"""A digest inside a turns note goes as the lines it kept and the values its mention list
names, not its cuts nor its lists of omitted fields and records (bench/README.md, "Digests
in a turns note"): an old task's 32k page observation, digested to ~8k, was re-sent whole
inside the note on every later call."""

from __future__ import annotations

from typing import Any

from gateway.context.fold import TURNS_HEAD, Run, digest_values, mentioned, turns_note

FIELDS = "; ".join(f"* [Section {k}](section_{k}.html)" for k in range(60))
RECORDS = "; ".join(f"https://example.org/issues/{9000 + k}" for k in range(60))
PAGE_DIGEST = "\n".join([
    '{"kind":"page_observation","text":"(32083 chars below)","current_page":1,"total_pages":13}',
    "Title: Release history — release 0.19.2 documentation",
    "[…425 lines]",
    "function signature. [#9206](https://example.org/issues/9206) by A. Author and",
    "[…32 lines]",
    f"[omitted fields: {FIELDS}]",
    f"[records: {RECORDS}]",
    "[omitted text mentions: GridSearchCV n_iter_ 2017. sklearn.grid_search (+663 more)]",
])


def _turns(observation: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Which release fixed issue 9206?"},
        {"role": "assistant", "content": '{"kind": "read_document_action", "url": "x.org/a_1"}'},
        {"role": "user", "content": observation},
        {"role": "assistant", "content": '{"kind": "next_page_action"}'},
    ]


def test_a_digest_keeps_its_lines_and_names_its_mentions_not_its_lists() -> None:
    kept = digest_values(PAGE_DIGEST)
    assert kept is not None
    page = PAGE_DIGEST.split("\n")
    assert kept.split("\n") == [*page[:2], page[3]]
    assert mentioned(PAGE_DIGEST) == ["GridSearchCV", "n_iter_", "2017.", "sklearn.grid_search"]
    assert digest_values("[…12 lines]") == ""  # a digest that kept no line names nothing
    assert mentioned("[…12 lines]") == []
    assert digest_values("Please check order W0042 again.") is None  # not a digest


def test_a_turns_note_sends_an_old_page_digest_without_its_lists() -> None:
    note = turns_note(_turns(PAGE_DIGEST), Run(0, 1, 3))
    assert TURNS_HEAD.match(note)
    lines = note.split("\n")
    assert lines[1] == "Which release fixed issue 9206?"  # a user's own text: as sent
    assert lines[2] == "read_document_action x.org/a_1"  # the step's values
    assert "[omitted fields:" not in note and "[records:" not in note
    assert "Title: Release history — release 0.19.2 documentation" in lines  # kept lines
    assert lines[-2:] == ["GridSearchCV n_iter_ 2017. sklearn.grid_search", "next_page_action"]
    assert "lines]" not in note and "(+663" not in note
    assert len(note) < len(PAGE_DIGEST) // 4
    # a user text with no digest line still goes whole
    plain = "Title: Release history\nThe fix landed in 0.19.1."
    assert plain in turns_note(_turns(plain), Run(0, 1, 3))
