"""A long session through the engine: every call's drops are rebuilt exactly from the
decisions-form drop log, and that log grows with the decisions, not with the history."""

from __future__ import annotations

import asyncio
from pathlib import Path

import jsonschema
import orjson
import pytest

from gateway.context.engine import CallContext, ContextEngine, FittedCall
from gateway.context.replay import calls_from_messages
from gateway.context.session import MemorySessionStore
from gateway.observability.droplog import SCHEMA, DropEvent, DropLog
from gateway.observability.metrics import Metrics
from gateway.observability.reconstruct import reconstruct
from gateway.settings import Settings
from tests.sessions import synthetic_session

CONFIG = Path(__file__).resolve().parents[2] / "config" / "gateway.yaml"


def _fit_session(path: Path, form: str, turns: int, budget: int) -> list[FittedCall]:
    _, messages, _ = synthetic_session(7, turns=turns)
    calls = calls_from_messages(messages, "gpt-4o-mini")
    log = DropLog(str(path), "hash", Metrics(), form)  # type: ignore[arg-type]
    engine = ContextEngine(Settings(config=CONFIG), None, Metrics(), log, None,
                           sessions=MemorySessionStore())
    headers = {"x-ctxgate-session-id": "s1", "x-ctxgate-budget-tokens": str(budget),
               "x-ctxgate-task-class": "coding_agent"}

    async def run() -> list[FittedCall]:
        return [await engine.fit(body, CallContext("t1", f"trace-{n}", headers))
                for n, body in enumerate(calls)]

    fitted = asyncio.run(run())
    log.close()
    return fitted


def _key(d: DropEvent | dict[str, object]) -> tuple[object, ...]:
    if isinstance(d, DropEvent):
        return (d.item_id, d.stage, d.action, d.reason, d.kind, d.message_index,
                d.tokens_before, d.tokens_after, d.kept_as)
    return tuple(d[k] for k in ("item_id", "stage", "action", "reason", "kind",
                                "message_index", "tokens_before", "tokens_after", "kept_as"))


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[FittedCall], list[dict]]:
    path = tmp_path_factory.mktemp("droplog") / "drops.jsonl"
    fitted = _fit_session(path, "decisions", turns=150, budget=12000)
    return fitted, [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_every_call_is_reconstructed_exactly(replayed: tuple[list[FittedCall], list[dict]]
                                             ) -> None:
    fitted, lines = replayed
    validator = jsonschema.Draft202012Validator(orjson.loads(SCHEMA.read_bytes()))
    for line in lines:
        validator.validate(line)
    rebuilt = list(reconstruct(lines))
    assert [c.trace_id for c in rebuilt] == [f.trace_id for f in fitted]
    assert sum(len(f.drops) for f in fitted) > 1000  # the session is compacted, and long
    for call, fit in zip(rebuilt, fitted, strict=True):
        assert sorted(map(_key, call.drops)) == sorted(map(_key, fit.drops)), call.trace_id
        assert call.balanced
        assert sum(d.tokens_saved for d in fit.drops) == fit.tokens_before - fit.tokens_after
        assert call.call["dropped_items"] == len(fit.drops)


def test_lines_grow_with_decisions_not_history(replayed: tuple[list[FittedCall], list[dict]]
                                               ) -> None:
    fitted, lines = replayed
    calls = [line for line in lines if line["event"] == "context.call"]
    decisions = [line for line in lines if line["event"] == "context.decision"]
    assert len(calls) == len(fitted)
    # Each decision once: no (item, step) is logged twice by one process.
    assert len({(d["item_id"], d["step"]) for d in decisions}) == len(decisions)
    assert sum(c["new_decisions"] for c in calls) == len(decisions)
    assert len(decisions) < sum(len(f.drops) for f in fitted) / 5
    # Lines per call: its new decisions, then its call line.
    run = 0
    for line in lines:
        if line["event"] == "context.decision":
            run += 1
        else:
            assert line["new_decisions"] == run
            run = 0


def test_items_form_logs_every_item_of_every_call(tmp_path: Path) -> None:
    path = tmp_path / "drops.jsonl"
    fitted = _fit_session(path, "items", turns=30, budget=8000)
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert {line["event"] for line in lines} == {"context.drop"}
    validator = jsonschema.Draft202012Validator(orjson.loads(SCHEMA.read_bytes()))
    for line in lines:
        validator.validate(line)
    assert len(lines) == sum(len(f.drops) for f in fitted) > 0


def test_a_call_that_no_longer_sends_a_decided_item_excludes_it(tmp_path: Path) -> None:
    path = tmp_path / "drops.jsonl"
    log = DropLog(str(path), "none", None)
    kept = DropEvent("compress", "compress", "aged", "a", "tool_result", 2, 100, 10, step=1)
    gone = DropEvent("select", "drop", "recency", "b", "assistant", 3, 50, 0, step=1)
    redo = DropEvent("compress", "mask", "aged", "a", "tool_result", 2, 100, 5, step=2)
    for trace, events in (("c1", [kept, gone]), ("c2", [kept]), ("c3", [redo, gone])):
        log.write_call(events, trace_id=trace, session_id="s", tenant="t", task_class="x",
                       tokens=(1000, 1000 - sum(e.tokens_saved for e in events), 0))
    log.close()
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    calls = {c.trace_id: c for c in reconstruct(lines)}
    assert calls["c2"].call["excluded"] == ["b"]
    assert [d["item_id"] for d in calls["c2"].drops] == ["a"]
    assert [(d["item_id"], d["step"]) for d in calls["c3"].drops] == [("a", 2), ("b", 1)]
    assert all(c.balanced for c in calls.values())
    assert len(lines) == (2 + 1) + (0 + 1) + (1 + 1)  # decisions new on the call, its line
