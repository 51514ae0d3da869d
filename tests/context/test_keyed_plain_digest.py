"""A plain-text tool output (a script's stdout, not an MCP content block) whose digest keeps
none of its lines lists the multi-word values of its `Key: value` lines (`summarize`;
bench/README.md, "Toolathlon queues' recall, part twenty-one"): a line all of whose words the
model has read above is left out of the digest, and the value list carries the words one at
a time, so a composed title (`Welcome to English Literature-7`) the agent re-typed next was
sent nowhere. Only a printed record's, whose `Key: value` lines are a tenth of its lines at
least: a browser page's tab header over its accessibility tree lists nothing ("part
twenty-one's fields line for printed records only")."""

from __future__ import annotations

from gateway.context.summarize import summarize, values

STDOUT = """=== STDOUT ===
Prepared 27 announcements

Sample announcement:
================================================================================
Course: English Literature-7
Title: Welcome to English Literature-7

Welcome to English Literature-7!

Instructor: Melissa Sanchez
Class Time: Monday 7,8,9

We look forward to an exciting semester ahead.

Best regards,
Melissa Sanchez
=== EXECUTION INFO ===
Return code: 0
Execution time: 0.045 seconds
Timeout limit: 30 seconds"""


def test_an_all_elided_digest_lists_its_keyed_values() -> None:
    out = summarize(STDOUT, "tool_result", 3, frozenset(values(STDOUT)))
    assert not any(line.startswith("Title:") for line in out.splitlines())  # the line is gone
    line = next(x for x in out.splitlines() if x.startswith("[omitted fields:"))
    assert "Welcome to English Literature-7" in line
    assert "Melissa Sanchez" in line
    # numbers with a unit are no name: `0.045 seconds` is not listed
    assert "seconds" not in line


def test_a_digest_that_kept_a_line_is_as_before() -> None:
    # the first line's values are new: the digest keeps it and lists no fields
    text = "Run: build-7731 finished\n" + STDOUT
    known = frozenset(values(STDOUT))
    out = summarize(text, "tool_result", 3, known)
    assert out.startswith("Run: build-7731 finished")
    assert "[omitted fields:" not in out


def test_levels_below_the_digest_are_untouched() -> None:
    out = summarize(STDOUT, "tool_result", 2, frozenset(values(STDOUT)))
    assert "[omitted fields:" not in out


ROWS = "\n".join(f"\t\t[{200 + i}] link 'Catalog item {i}'" for i in range(40))
PAGE = f"""# Currently open tabs
Tab 0 (active tab)
  Title: Products / Inventory / Catalog / Magento Admin
  URL: http://10.0.0.1:7780/admin/catalog/product/

# Current page Accessibility Tree

RootWebArea 'Products / Inventory / Catalog / Magento Admin', focused
\t[174] link 'Magento Admin Panel'
\t[176] navigation ''
{ROWS}"""


def test_a_page_under_its_tab_header_lists_no_fields() -> None:
    # two `Key: value` lines over 40-odd tree lines: a page, not a printed record
    out = summarize(PAGE, "tool_result", 3, frozenset(values(PAGE)))
    assert out.startswith("[…")
    assert "[omitted fields:" not in out
