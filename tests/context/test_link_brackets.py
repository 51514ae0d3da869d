"""A digest names a link with brackets in its path whole (`summarize._LINK`): a link keeps
the brackets it opens and closes itself, as GitHub's autolinker does, and not a closer or
the punctuation that follows it in the text. Any bracket used to end a link, so
`https://en.wikipedia.org/wiki/Mercury_(planet)` was listed as `…/wiki/Mercury_`, a link
that opens another page, or none."""

from __future__ import annotations

import json
import time

from gateway.context.summarize import summarize

MERCURY = "https://en.wikipedia.org/wiki/Mercury_(planet)"
VENUS = "https://en.wikipedia.org/wiki/Venus_(planet)"
SESSION = "https://msdn.example.com/S(d3adb33f)/orders/page.htm"
FILTER = "https://tracker.example.org/issues?filter[state]=open&sort=updated"
EVENTS = "https://api.github.com/users/octo/events"  # listed as `…/events{/privacy}`


def block(text: str) -> str:
    """A tool result as an MCP content block carrying `text`."""
    return json.dumps({"type": "text", "text": text})


def test_a_links_own_brackets_are_kept_and_what_follows_it_is_not() -> None:
    text = ("Planet notes, collected from several sources.\n"
            f"Sources for the planets: {MERCURY}, and (see {VENUS}).\n"
            f"Orders are listed at {SESSION}; the open issues at {FILTER}.\n"

            + "Notes on the orbits and the probes sent, by year and by agency.\n" * 12)
    out = summarize(block(text), "tool_result", 3)
    records = next(line for line in out.splitlines() if line.startswith("[records: "))
    assert records[len("[records: "):-1].split("; ") == [MERCURY, VENUS, SESSION, FILTER]


def test_a_uri_templates_link_ends_at_its_brace() -> None:
    text = ("Account activity, as the API lists it.\n"
            f"Events: {EVENTS}{{/privacy}} (a URI template).\n"
            + "Notes on the account, its repositories and its followers.\n" * 12)
    out = summarize(block(text), "tool_result", 3)
    assert f"[records: {EVENTS}]" in out


def test_a_value_list_names_a_link_with_brackets_whole() -> None:
    rows = [f"row {k}: page https://en.wikipedia.org/wiki/Item_{k}_(disambiguation) read, "
            f"status ok_{k}, size {1000 + k}" for k in range(40)]
    out = summarize("\n".join(rows), "tool_result", 3)
    listed = out.splitlines()[-1]
    assert listed.startswith("[omitted text mentions:")
    assert " https://en.wikipedia.org/wiki/Item_38_(disambiguation) " in listed


def test_a_link_line_ends_as_the_text_ends_it() -> None:
    hits = "\n\n".join(f"Title: Planet {k}\nURL: https://en.wikipedia.org/wiki/Planet_({k}).\n"
                       f"Snippet: {'An article about a planet and its moons. ' * 3}"
                       for k in range(10))
    out = summarize(hits, "tool_result", 3)
    assert "https://en.wikipedia.org/wiki/Planet_(2)" in out
    assert "https://en.wikipedia.org/wiki/Planet_(2)." not in out


def test_a_long_run_with_no_address_is_read_in_linear_time() -> None:
    # the address pattern was tried at every character of the run: 20,000 took seconds
    text = "token: " + "a1b2c3d4e5" * 8000 + "\n" + "\n".join(f"row {k}" for k in range(20))
    start = time.perf_counter()
    summarize(text, "tool_result", 3)
    assert time.perf_counter() - start < 2.0
