"""A content block the framework cut short lists its short multi-word field values (a
record's `"Location": "Long Beach, US"`, a job title) as a whole block's digest does
(`summarize._with_fields` on `cut_payload`): the value list names them one word at a time,
and the records line only cells under naming keys, so a digest of a cut listing lost the
values the agent copied whole into its next calls."""

from __future__ import annotations

import orjson

from gateway.context.engine import ContextEngine
from gateway.context.summarize import cut_payload, summarize
from tests.context.sessions import drops_add_up, fit_each_call, reading_session

CITIES = ["Long Beach, US", "San Diego, US", "Santa Monica, US", "Palo Alto, US",
          "New Haven, US", "Ann Arbor, US"]
JOBS = [
    {"object": "page", "id": f"job-{n:04d}",
     "properties": {"Company": f"Firm{n}", "Location": CITIES[n % len(CITIES)],
                    "Status": "Checking", "Notes": "Reviewed by the hiring panel twice " * 3}}
    for n in range(30)
]
PAYLOAD = orjson.dumps({"object": "list", "results": JOBS}, option=orjson.OPT_INDENT_2).decode()
TOOLS = [{"type": "function", "function": {"name": "call_tool", "parameters": {"type": "object"}}}]


def block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text}).decode()


def cut(text: str, head: int, tail: int) -> str:
    """What the converter does to a long tool output: its head, a marker, its end."""
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def test_a_cut_blocks_digest_lists_its_field_values() -> None:
    text = cut(block(PAYLOAD), 5000, 2500)
    assert cut_payload(text) is not None
    shown = [c for c in CITIES if c in text.replace("\\", "")]
    assert len(shown) >= 3
    out = summarize(text, "tool_result", 3)
    assert len(out) < len(text) / 2
    assert all(c in out for c in shown)  # whole, as the agent types them
    # the same digest of the whole block lists them too: a cut block now reads alike
    whole = summarize(block(PAYLOAD), "tool_result", 3)
    assert all(c in whole for c in CITIES)


def test_a_cut_text_that_is_no_content_block_is_digested_as_before() -> None:
    out = summarize(cut(PAYLOAD, 5000, 2500), "tool_result", 3)  # no block around it
    assert "[omitted fields:" not in out
    assert not all(c in out for c in CITIES[:3])


async def test_an_agent_looks_up_the_locations_of_a_cut_listing(engine: ContextEngine) -> None:
    listing = cut(block(PAYLOAD), 5000, 2500)
    shown = [c for c in CITIES if c in listing.replace("\\", "")]
    messages = reading_session(
        "Find the distance to each company still being checked.", [listing] + [block("\n".join(
            f"Log {k}-{i}: shelf {k * 7 + i} moved" for i in range(60))) for k in range(1, 16)],
        "call_tool", say="Next.", key="step", closing="Measuring.")
    fits = await fit_each_call(engine, messages, TOOLS, "t-cutf", "cutfields")
    last = fits[-1].body["messages"]
    out = str(next(m["content"] for m in last if m.get("tool_call_id") == "call_000"))
    assert len(out) < len(listing) / 2  # digested
    assert all(c in out for c in shown)  # the locations it showed, whole
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up


def test_the_cut_marker_is_no_field_value() -> None:
    text = cut(block(PAYLOAD), 5000, 2500)
    out = summarize(text, "tool_result", 3)
    fields_line = next(line for line in out.splitlines() if line.startswith("[omitted fields:"))
    assert "characters cut" not in fields_line  # the framework's marker, not a value
    assert "Long Beach, US" in fields_line
