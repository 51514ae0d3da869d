"""A script runner's print ends in a banner-headed trailer of `Label: value` lines that
every run repeats (Toolathlon's python tool: `=== EXECUTION INFO ===`, `Return code: 0`,
`Execution time: …`, `Timeout limit: 30 seconds`). A digest (level 3) lists the values only
the trailer names after the result's (bench/README.md, "part twenty-two", variant R); its
lines are as before (the trailer's last line stays: keeping the result line above it instead
cost the Toolathlon claude queues 0.3 points)."""

from __future__ import annotations

from gateway.context.summarize import summarize, trailer_start

RESULTS = [f"  Stock{i}: {100 + i} shares @ ${i}1.{i}5 = ${i}4{i}0.{i}8" for i in range(1, 9)]
PRINT = "\n".join(["=== STDOUT ===", "Positions:", *RESULTS, "=== EXECUTION INFO ===",
                   "Return code: 0", "Execution time: 0.045 seconds",
                   "Timeout limit: 30 seconds"])


def test_trailer_values_are_listed_last() -> None:
    listed = summarize(PRINT, "tool_result", level=3).splitlines()[-1]
    shown = listed.split(" (+")[0].split()
    assert not {"time", "code", "Return", "0.045", "Timeout", "limit"} & set(shown)
    assert {"Stock7", "shares", "Positions"} <= set(shown)


def test_an_output_without_a_trailer_keeps_its_last_line() -> None:
    text = "\n".join(["first", *RESULTS, "Total: 9 rows"])
    assert "Total: 9 rows" in summarize(text, "tool_result", level=3)
    lines = text.splitlines()
    assert trailer_start(lines) == len(lines)


def test_a_banner_alone_is_no_trailer() -> None:
    lines = ["=== RESULT ===", "Return code: 0"]
    assert trailer_start(lines) == len(lines)
    closing = ["done", "=====", "Return code: 0", "Took: 3 s", "x" * 100]
    assert trailer_start(closing) == len(closing)
