"""What a masked MCP text block keeps beside the cells naming the task: the records it lists
one a line — a list item that is one name, a `Key: value` line whose value is one path,
address or link — within one character per 8 of its payload (a cloud tool's list of log
sinks and their destination buckets), the real engine on the embedded Redis, the shipped
configuration."""

from __future__ import annotations

import orjson

from gateway.context.engine import ContextEngine
from gateway.context.focus import task_focus
from gateway.context.summarize import KEPT_CHARS, kept_fields
from tests.context.sessions import drops_add_up, fit_each_call, reading_session

TASK = "Write a warning log entry for each student whose score dropped to the right bucket."
TOOLS = [{"type": "function", "function": {"name": "list_log_sinks",
                                           "parameters": {"type": "object"}}}]


def sinks(n: int) -> str:
    lines = [f"Found {n} log sinks:"]
    for i in range(n):
        lines += [f"- sink_{i:02d}_alerts",
                  f"  Destination: logging.example.com/projects/p1/buckets/bucket-{i:02d}",
                  f'  Filter: severity="CRITICAL" AND resource.type="global" AND n={i}']
    return "\n".join(lines)


def block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text, "annotations": None}).decode()


def test_a_masked_text_block_names_the_records_it_lists() -> None:
    focus = task_focus([{"role": "user", "content": TASK}])
    text = block(sinks(30))
    got = kept_fields(text, focus, names=True)
    task_cells = kept_fields(text, focus)  # without `names` (a long session): the task's only
    assert got[:len(task_cells)] == task_cells
    named = got[len(task_cells):]
    # the task says "bucket": the paths carrying it as a part come first (`focus_parts`,
    # bench/README.md "Toolathlon recall, part eleven"), in order
    assert named[:3] == [f"logging.example.com/projects/p1/buckets/bucket-{i:02d}"
                         for i in range(3)]
    assert sum(len(c) + 2 for c in named) <= max(KEPT_CHARS, len(sinks(30)) // 8)
    assert "sink_29_alerts" not in named  # the bound cuts the rest
    assert not any("severity" in c or "Found" in c for c in named)  # not a naming line


async def test_an_aged_text_listing_masked_by_the_engine_names_its_buckets(
    engine: ContextEngine,
) -> None:
    messages = reading_session(TASK, [block(sinks(30))] + [block(
        "\n".join(f"Student {k}-{j} scored within the usual range this term."
                  for j in range(20))) for k in range(1, 36)], "list_log_sinks")
    fits = await fit_each_call(engine, messages, TOOLS, "t-mtext", "masked-text-records")
    sent = fits[-1].body["messages"]
    first = next(m["content"] for m in sent if m.get("tool_call_id") == "call_000")
    assert first.startswith("[ctxgate: omitted ")  # masked whole
    assert "logging.example.com/projects/p1/buckets/bucket-00" in first
    assert "logging.example.com/projects/p1/buckets/bucket-01" in first
    assert len(first) < len(messages[3]["content"]) // 2
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up
