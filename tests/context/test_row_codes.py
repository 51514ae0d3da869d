"""A text that lists records one a row, each row led by its code (a course timetable read
from a PDF: `01711100  算法分析与设计 -01班 郁莲 48 上午 …`), names those codes in its digest's
records line (`summarize._TEXT_CELL`): the agent looks the courses up one a call, by code,
many steps after it read the table, and the digest's value list, capped, names ten values
of a hundred."""

from __future__ import annotations

import json

from gateway.context.summarize import summarize

CODES = [f"0171{k:04d}" for k in range(1100, 1100 + 37 * 7, 7)]


def block(text: str) -> str:
    """A tool result as an MCP content block carrying `text`."""
    return json.dumps({"type": "text", "text": text})


def timetable() -> str:
    rows = ["PDF total pages: 3", "", "=== Page 1 ===", "课程编号  课程名称  主讲 教师 学时 时间"]
    for k, code in enumerate(CODES):
        rows.append(f"{code}  课程 {k} 班 教师{k} 48 上午 {k % 9}/3303    教务员")
        rows.append(f"限软件工程、人工智能方向选课，{k % 12 + 1}月开课，"
                    "每次课 4课时，授课时间为 13：00-17：00")
    return "\n".join(rows)


def test_a_tables_row_codes_are_its_records() -> None:
    text = timetable()
    out = summarize(block(text), "tool_result", 3)
    assert len(out) < len(text) / 2
    records = next(line for line in out.splitlines() if line.startswith("[records: "))
    assert records[len("[records: "):-1].split("; ") == CODES


def test_dates_and_short_numbers_leading_rows_are_not_codes() -> None:
    rows = [f"2025-10-{k % 28 + 1:02d} 12:{k % 60:02d}:00 INFO worker {k} done in {k * 3} ms"
            for k in range(80)]
    rows += [f"{k:3d}  step {k} of the run, loss {1 / (k + 1):.4f}" for k in range(80)]
    out = summarize(block("\n".join(rows)), "tool_result", 3)
    assert "[records: " not in out
