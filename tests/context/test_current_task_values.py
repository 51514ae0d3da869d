"""At a queue's later task (`focus.Focus`), a digest's capped value lists are main's — the
values the first task's terms and the latest calls rank first, in main's order, under main's
cap — and up to `EXTRA_VALUES` of the values they left out that name the current task's own
terms follow them: a later task's words add values and push out none
(`summarize._extra`; bench/README.md, "Toolathlon queues' recall, part twenty-six"). An
output's digest there lists `LATER_TASK_VALUES` more of main's order before those ("part
thirty-three")."""

from __future__ import annotations

import orjson

from gateway.context.focus import Focus
from gateway.context.summarize import EXTRA_VALUES, LATER_TASK_VALUES, summarize

LEAD = frozenset({"format", "workspace"})
HEADERS = ["University", "City", "Ranking", "Toefl_accepted", "Toefl_min_score",
           "Ielts_accepted", "Ielts_min_score", "Application_fee", "Application_ddl"]


def _header_cells() -> str:
    """A spreadsheet's header row as an Excel tool prints it, in a content block."""
    cells = [{"address": f"{chr(65 + i)}1", "value": v, "row": 1, "column": i + 1,
              "validation": {"has_validation": False}} for i, v in enumerate(HEADERS)]
    text = orjson.dumps({"range": "A1:I1", "sheet_name": "Sheet1", "cells": cells},
                        option=orjson.OPT_INDENT_2).decode()
    return orjson.dumps({"type": "text", "text": text}).decode()


def _listed(digest: str) -> list[str]:
    line = next(ln for ln in digest.splitlines() if ln.startswith("[omitted text mentions:"))
    return line.removeprefix("[omitted text mentions: ").split(" (+")[0].removesuffix("]").split()


def test_a_header_the_current_task_names_follows_mains_list() -> None:
    # the value list of a header row's digest keeps 10 values, nearest the end first; `City`,
    # which the later task's statement names ("University name, city and ranking"), is the
    # 15th: main left it out, a ranking by the union pushed `Toefl_accepted` out for it
    main = summarize(_header_cells(), "tool_result", 3, frozenset(), LEAD)
    later = summarize(_header_cells(), "tool_result", 3, frozenset(),
                      Focus(LEAD | {"city", "toefl", "university"}, LEAD))
    assert "City" not in _listed(main) and "Toefl_accepted" in _listed(main)
    listed = _listed(later)
    # main's list first, in main's order; then the next LATER_TASK_VALUES of that order,
    # `City` the last of them
    assert LATER_TASK_VALUES == 5
    assert listed[:len(_listed(main))] == _listed(main)
    assert listed == [*_listed(main), "D1", "C1", "B1", "Ranking", "City"]
    assert later.split("[omitted text mentions:")[0] == main.split("[omitted text mentions:")[0]
    # the count says how many the list leaves out: none once the later task's five follow
    assert main.endswith("(+5 more)]") and later.endswith(" City]")


def test_a_fields_line_is_mains_and_a_field_naming_the_current_task_follows() -> None:
    rows = [{"id": i, "title": f"Quarterly report number {i}", "owner": f"Team member {i}"}
            for i in range(30)]
    rows[25]["title"] = "Graduate application fee table"
    text = orjson.dumps({"type": "text", "text": orjson.dumps(rows).decode()}).decode()
    lead = frozenset({"quarterly"})
    main = summarize(text, "tool_result", 3, frozenset(), lead)
    later = summarize(text, "tool_result", 3, frozenset(), Focus(lead | {"graduate"}, lead))

    def fields_line(digest: str) -> str:
        return next(ln for ln in digest.splitlines() if ln.startswith("[omitted fields:"))

    shown, more = fields_line(main).removesuffix(" more)]").rsplit(" (+", 1)
    assert "Graduate application fee table" not in shown
    assert fields_line(later) == (
        f"{shown}; Graduate application fee table (+{int(more) - 1} more)]")


def test_at_most_extra_values_are_added() -> None:
    text = "\n".join(["header row", *(f"Field_{i} = Kettle{i}" for i in range(40)), "last"])
    lead = frozenset({"header"})
    current = frozenset(f"kettle{i}" for i in range(40))
    main = summarize(text, "tool_result", 2, frozenset(), lead)
    later = summarize(text, "tool_result", 2, frozenset(), Focus(lead | current, lead))
    assert _listed(later)[:len(_listed(main))] == _listed(main)
    assert len(_listed(later)) == len(_listed(main)) + EXTRA_VALUES


def test_a_plain_focus_adds_nothing() -> None:
    # no task statement (a plain set: tau-bench, a text-tool agent, a single task): main's
    text = _header_cells()
    assert summarize(text, "tool_result", 3, frozenset(), LEAD | {"city"}) == summarize(
        text, "tool_result", 3, frozenset(), LEAD | {"city"})
    assert "City" not in _listed(summarize(text, "tool_result", 3, frozenset(), LEAD))
