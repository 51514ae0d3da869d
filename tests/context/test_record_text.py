"""A JSON record whose bulk is one text field (a file API's `{"name": …, "path": …,
"content": "<a README>"}`) is digested as that text, with the record's short fields: the
lines carrying the task's terms and the names in them stay, where the JSON digest cut the
text at its head (`summarize.record_text`; bench/README.md, "A JSON record's text field
digested as text")."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.engine import ContextEngine
from gateway.context.session import MemorySessionStore
from gateway.context.summarize import record_text, summarize
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

from .conftest import without_repay
from .sessions import fit_each_call

NAME = "widgetlab0606/Widget-Corpus-Rs"
README = "\n".join([
    "# Widget: a corpus builder", "",
    *(f"Step {k}: run `scripts/stage_{k}.sh --shard shard_{k:03d}` then check out_{k}.jsonl "
      f"with checker_{k}.py ({k * 17} rows each)" for k in range(60)),
    f"The released dataset is {NAME} on the hub; the raw dataset is {NAME}-Raw.",
    *(f"Note {k}: the pipeline writes temp/run_{k} and logs to log_{k}.txt" for k in range(40)),
    "Thanks to everyone who helped.",
])
RECORD = {"content": README, "encoding": "text", "name": "README.md", "path": "README.md",
          "sha": "13f2aff77b16083162e2d09d3c21c92e8c5b2039", "size": len(README),
          "type": "file"}
TASK = "Read the repository README and register the released dataset names it gives."


def block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text}).decode()


def test_a_record_of_one_text_is_digested_as_the_text() -> None:
    record = orjson.dumps(RECORD).decode()
    got = record_text(record)
    assert got is not None
    head, body = got
    assert body == README and '"name":"README.md"' in head and README[:40] not in head
    focus = frozenset({"released", "dataset", "names", "readme", "register"})
    out = summarize(block(record), "tool_result", 3, frozenset(), focus)
    # as a content block carrying the README would be
    assert out == f"{head}\n{summarize(block(README), 'tool_result', 3, frozenset(), focus)}"
    assert NAME in out and len(out) < len(record) // 3
    # a record of short fields, or one whose long field is no text, is a JSON record
    assert record_text(orjson.dumps({**RECORD, "content": "short"}).decode()) is None
    assert record_text(orjson.dumps({**RECORD, "content": "QUJD" * 500}).decode()) is None


def _session(after: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an assistant with tools."},
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c0", "type": "function", "function": {
                "name": "get_file_contents", "arguments": '{"path": "README.md"}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": block(orjson.dumps(RECORD).decode())},
    ]
    for k in range(1, after + 1):
        messages.append({"role": "assistant", "content": f"Checking worker {k}.", "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {
                "name": "check_status", "arguments": f'{{"worker": "w-{k}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": "\n".join(
            f"Worker w-{k} job {i}: queued behind batch {k * 40 + i}" for i in range(40))})
    messages.append({"role": "assistant", "content": "Done."})
    return messages


async def test_an_aged_file_record_keeps_the_names_its_text_gives(
    settings: Settings, embedder: Embedder
) -> None:
    engine = ContextEngine(without_repay(settings), None, Metrics(),
                           DropLog("/dev/null", "none", None), embedder,
                           sessions=MemorySessionStore())
    fits = await fit_each_call(engine, _session(30), [], "t-record", "record-text")
    whole = block(orjson.dumps(RECORD).decode())
    sent = [fit.body["messages"][3]["content"] for fit in fits]
    # the calls that send it digested (after whole, before it is masked)
    digests = [t for t in sent if t != whole and not t.startswith("[ctxgate: omitted")]
    assert digests and all(len(t) < len(whole) // 2 for t in digests)
    assert all(NAME in t for t in digests)
