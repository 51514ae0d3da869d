"""A text content block's digest names the records it lists one a line, as a masked block
does (`summarize._with_records` with `_naming_cells(…, lines=True)`): a listing's
`Destination: logging.googleapis.com/…/buckets/exam_log-…` is one value longer than the
value list's 80 characters, so a digest of the listing had it nowhere, and the agent copied
it whole into a call many steps later. A shorter block (under RECORD_MIN_PAYLOAD) names its
links and e-mail addresses whole: an e-mail's `send them to … at myersj@mcp.com`, which the
value list ranks as the plain word `myersj` and cuts."""

from __future__ import annotations

import orjson

from gateway.context.engine import ContextEngine
from gateway.context.summarize import RECORD_MIN_PAYLOAD, envelope, summarize
from tests.context.sessions import drops_add_up, fit_each_call, reading_session

BUCKETS = ["exam_log-b711e7743e03", "abtesting_logging-953504bb2550", "trading_log-cc616b9e7c85"]
SINKS = [
    (name, f"logging.googleapis.com/projects/acme-prod-4471/locations/global/buckets/"
           f"{BUCKETS[n % len(BUCKETS)]}")
    for n, name in enumerate(["ab_test_completion", "abtest_conclusion_sink",
                              "academic_critical_warnings", "academic_warning_sink",
                              "critical_drop_sink", "critical_student_alerts",
                              "fraud_investigation_sink", "my_academic_sink",
                              "temp_critical_alert_sink", "weekly_digest_sink",
                              "audit_trail_sink", "retention_sink"])
]
LISTING = f"Found {len(SINKS)} log sinks:\n" + "".join(
    f"- {name}\n  Destination: {dest}\n"
    f'  Filter: severity="CRITICAL" AND jsonPayload.alert_type="PERFORMANCE_DROP_{n}"\n'
    for n, (name, dest) in enumerate(SINKS))
EMAIL = (
    "Email ID: 1\nSubject: Re: PhD Application - Submission Guidelines\nFrom: kaiming@mcp.com\n"
    "To: mary.castillo@mcp.com\nDate: Mon, 8 Sep 2025 17:42:44 +0800\n\nText Content:\n"
    "Dear Mary, thank you for your interest in our PhD program. If you are interested, please "
    "compile your materials as follows and send them to our admissions team at "
    "myersj@mcp.com:\n\n" + "".join(
        f"├── 0{i}_Section_{i}/\n│   ├── Document_{i}_A.pdf\n│   └── Document_{i}_B.pdf\n"
        for i in range(1, 9))
    + "\nUse English file names (no special characters or spaces). Ensure all documents are "
    "in PDF format. Compress the entire folder into a ZIP file and send it as an attachment."
    "\n\nBest regards,\nkaiming\n")
TOOLS = [{"type": "function", "function": {"name": "call_tool", "parameters": {"type": "object"}}}]


def block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text}).decode()


def test_a_text_blocks_digest_names_the_destinations_it_lists() -> None:
    text = block(LISTING)
    assert envelope(text) == LISTING and len(LISTING) >= RECORD_MIN_PAYLOAD
    out = summarize(text, "tool_result", 3)
    assert len(out) < len(text) * 0.7
    records = next(line for line in out.splitlines() if line.startswith("[records:"))
    for _, destination in SINKS[:len(BUCKETS)]:  # each destination whole, as the agent types it
        assert destination in records


def test_a_short_blocks_digest_names_its_addresses() -> None:
    text = block(EMAIL)
    assert len(EMAIL) < RECORD_MIN_PAYLOAD
    out = summarize(text, "tool_result", 3)
    assert len(out) < len(text) * 0.7
    assert "myersj@mcp.com" in out  # the address the agent writes to next


def test_a_text_that_is_no_content_block_is_digested_as_before() -> None:
    out = summarize(EMAIL, "tool_result", 3)  # the same text, no block around it
    assert "[records:" not in out


async def test_an_agent_creates_a_sink_to_a_destination_it_listed(engine: ContextEngine) -> None:
    listing = block(LISTING)
    messages = reading_session(
        "Route the critical academic warnings to the exam log.", [listing] + [block("\n".join(
            f"Row {k}-{i}: score {k * 7 + i} recorded" for i in range(60))) for k in range(1, 16)],
        "call_tool", say="Next.", key="step", closing="Creating the sink.")
    fits = await fit_each_call(engine, messages, TOOLS, "t-txtrec", "textrecords")
    last = fits[-1].body["messages"]
    out = str(next(m["content"] for m in last if m.get("tool_call_id") == "call_000"))
    assert len(out) < len(listing) * 0.7  # digested
    assert SINKS[0][1] in out  # the exam log's destination, whole
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up
