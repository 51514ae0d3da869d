"""A large MCP content block's digest keeps the cells naming its records (ids, names,
e-mail addresses, codes, links), also when the framework cut its JSON short
(`summarize.cut_payload`, `_with_records`): the values an agent picks from a listing and
re-types calls later, which the value list splits (`aevans@mcp.com` is `aevans mcp.com`)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.engine import ContextEngine
from gateway.context.summarize import FIELD_MIN, cut_payload, summarize
from tests.context.sessions import drops_add_up, fit_each_call

CUSTOMERS = [
    {"id": 100 + n, "status": "completed", "currency": "USD", "total": f"{n}.50",
     "billing": {"first_name": f"First{n}", "last_name": f"Last{n}", "company": "",
                 "address_1": f"{n} Main Street", "city": "Springfield", "postcode": "",
                 "email": f"customer.{n}_x@mcp.com", "phone": ""},
     "customer_note": "Please leave the parcel at the door, ring twice " * 2,
     "line_items": [{"name": f"Widget model {n}", "sku": f"WID-{n:03d}", "quantity": 1}]}
    for n in range(40)
]
PAYLOAD = orjson.dumps(CUSTOMERS, option=orjson.OPT_INDENT_2).decode()
EMAILS = [f"customer.{n}_x@mcp.com" for n in range(40)]


def block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text, "annotations": None}).decode()


def cut(text: str, head: int, tail: int) -> str:
    """What the converter does to a long tool output: its head, a marker, its end."""
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def test_a_cut_block_is_read_as_its_payloads_pieces() -> None:
    whole = block(PAYLOAD)
    text = cut(whole, 6000, 3000)
    got = cut_payload(text)
    assert got is not None and got.startswith('[\n  {\n    "id": 100,')
    assert '"email": "customer.0_x@mcp.com"' in got  # the escapes decoded
    assert "characters cut ...]" in got
    assert cut_payload(whole) is None  # a block that parses: `envelope` reads it
    assert cut_payload(cut(PAYLOAD, 6000, 3000)) is None  # no content block
    assert cut_payload('{"user_id": "mia_li_3668", "name": {"first_name": "Mia"') is None


def test_a_large_json_blocks_digest_names_every_record() -> None:
    out = summarize(block(PAYLOAD), "tool_result", 3)
    assert len(out) < len(PAYLOAD) / 3
    for n in range(40):
        assert f"customer.{n}_x@mcp.com" in out and f"WID-{n:03d}" in out
        assert f"First{n}" in out and f"Widget model {n}" in out
    assert "Springfield" not in out.split("[records:")[1].split("]")[0]  # not a naming key
    # the same payload outside a content block is digested as before: no records line
    assert "[records:" not in summarize(PAYLOAD, "tool_result", 3)


def test_a_cut_blocks_digest_names_the_records_left_in_its_head_and_tail() -> None:
    text = cut(block(PAYLOAD), 9000, 6000)
    kept = [e for e in EMAILS if e in text]
    assert 8 < len(kept) < 40
    out = summarize(text, "tool_result", 3)
    assert len(out) < len(text) / 3
    assert all(e in out for e in kept)
    before = summarize(cut(PAYLOAD, 9000, 6000), "tool_result", 3)  # no block: as before
    assert "[records:" not in before and not all(e in before for e in kept)


def test_a_large_text_blocks_digest_keeps_its_links_and_addresses_whole() -> None:
    snippet = "We study how images and captions align in a shared space. " * 7
    lines = [f"Paper {n}: Learning transferable visual models, part {n}. {snippet}Read it at "
             f"https://hf.co/papers/2103.{n:05d} or write to author{n}@uni.edu." for n in range(12)]
    out = summarize(block("\n".join(lines)), "tool_result", 3)
    assert len(out) < len(block("\n".join(lines))) / 3
    assert all(f"https://hf.co/papers/2103.{n:05d}" in out for n in range(12))
    assert all(f"author{n}@uni.edu" in out for n in range(12))
    # under ~600 tokens: a records line of its links and addresses only, within FIELD_MIN
    # (bench/README.md, "Toolathlon queues' recall, part fifteen")
    short = summarize(block("\n".join(lines[:4])), "tool_result", 3)
    records = next(line for line in short.splitlines() if line.startswith("[records:"))
    assert len(records) <= FIELD_MIN + len("[records: ]")
    assert all(f"author{n}@uni.edu" in short for n in range(4))


TOOLS = [{"type": "function", "function": {"name": "call_tool",
                                            "parameters": {"type": "object"}}}]


def page(k: int) -> str:
    return block("\n".join(f"Log {k}-{i}: synced shelf {k * 7 + i} of aisle {i}, "
                           f"{i + 3} boxes moved" for i in range(60)))


async def test_an_agent_mails_customers_from_a_listing_read_long_before(
    engine: ContextEngine,
) -> None:
    listing = cut(block(PAYLOAD), 12000, 6000)
    kept = [e for e in EMAILS if e in listing]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": "Send the survey to every customer with a completed order."},
    ]
    for k in range(16):
        call = f"call_{k:03d}"
        messages.append({"role": "assistant", "content": "Next.", "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": "call_tool", "arguments": f'{{"step": {k}}}'}}]})
        messages.append({"role": "tool", "tool_call_id": call,
                         "content": listing if k == 0 else page(k)})
    messages.append({"role": "assistant", "content": "Sending."})
    fits = await fit_each_call(engine, messages, TOOLS, "t-rec", "records")
    last = fits[-1].body["messages"]
    out = str(next(m["content"] for m in last if m.get("tool_call_id") == "call_000"))
    assert len(out) < len(listing) / 2  # digested
    assert all(e in out for e in kept)  # every address the listing showed, whole
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up


OPTIONS = [["Discarded", "Unused", "Broken", "Returned"], ["Refund", "Replacement", "Credit"],
           ["Morning", "Afternoon", "Evening"]]


def test_a_forms_field_names_and_options_survive_its_digest() -> None:
    """A form definition read once (markdown around JSON), filled in one field per call."""
    form = [{"name": f"Question {n} about the recalled kettle", "type": "radio",
             "required": True, "description": "Pick the one that fits best " * 4,
             "options": OPTIONS[n % 3]}
            for n in range(12)]
    text = ("# Product recall form\n\nPlease fill out the following fields.\n\n```json\n"
            + orjson.dumps({"fields": form}, option=orjson.OPT_INDENT_2).decode() + "\n```")
    out = summarize(block(text), "tool_result", 3)
    assert len(out) < len(text) / 2
    for n in range(12):
        assert f"Question {n} about the recalled kettle" in out
    assert all(o in out for options in OPTIONS for o in options)
