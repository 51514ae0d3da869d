"""Issue 12: the live recall the engine computes from its session record agrees with the
offline yardstick's recall (`bench/replay.py`'s: the needed values of the turn after a call,
searched in the messages the engine forwarded for that call) on replayed corpus sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.needed import needed_values, recall
from gateway.context.replay import WIRE_FORMATS, fit_as, openai_message
from gateway.errors import ContextBudgetExceeded

CORPORA = Path(__file__).resolve().parents[3] / "shared" / "corpora"
SESSIONS_PER_CORPUS = 2
MAX_CALLS = 40  # the first calls of each session: enough to cross compaction marks


def corpus_sessions() -> list[tuple[str, list[dict[str, Any]], Any]]:
    """A few sessions of each shared corpus: (id, messages, tools)."""
    out: list[tuple[str, list[dict[str, Any]], Any]] = []
    for path in sorted((CORPORA / "swe-agent").glob("*.traj"))[:SESSIONS_PER_CORPUS]:
        history = orjson.loads(path.read_bytes())["history"]
        out.append((f"swe-agent/{path.stem}", [openai_message(m) for m in history], None))
    for name in ("webchorearena", "agentdojo", "intercode"):
        lines = (CORPORA / name / "sessions.jsonl").read_bytes().splitlines()
        sessions = [orjson.loads(line) for line in lines if line.strip()]
        for s in sessions[:SESSIONS_PER_CORPUS]:
            out.append((s["id"], s["messages"], s.get("tools") or None))
    return out


async def _replay(engine: ContextEngine, sid: str, messages: list[dict[str, Any]], tools: Any,
                  budget: str | None) -> list[tuple[int, int, int, int]]:
    """Per call after the first: (live needed, live found, offline needed, offline found)
    of the turn that answered the call before it."""
    headers = {"x-ctxgate-session-id": f"{sid}:{budget}"}
    if budget is not None:
        headers["x-ctxgate-budget-tokens"] = budget
    ends = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
    rows = []
    previous: tuple[int, list[dict[str, Any]]] | None = None
    for k, end in enumerate(ends[:MAX_CALLS]):
        body: dict[str, Any] = {"messages": messages[:end]}
        if tools:
            body["tools"] = tools
        try:
            fitted = await engine.fit(body, CallContext("agree", f"{sid}-{k}", headers))
        except ContextBudgetExceeded:  # refused: nothing forwarded, nothing to compare next
            previous = None
            continue
        if previous is not None:
            last_end, forwarded = previous
            needed = needed_values(messages[last_end], messages[:last_end])
            found = round((recall(needed, forwarded) or 0.0) * len(needed))
            live = fitted.signals
            assert live is not None and live.mode == "managed"
            rows.append((live.needed, live.found, len(needed), found))
        previous = end, fitted.body["messages"]
    return rows


@pytest.mark.skipif(not CORPORA.is_dir(), reason="../shared/corpora is absent")
async def test_live_recall_agrees_with_the_yardstick(engine: ContextEngine) -> None:
    rows: list[tuple[int, int, int, int]] = []
    for sid, messages, tools in corpus_sessions():
        for budget in (None, "6000"):  # the shipped caps, and a budget that digests more
            rows += await _replay(engine, sid, messages, tools, budget)
    live_needed, live_found, needed, found = (sum(col) for col in zip(*rows, strict=True))
    assert needed > 100 and found < needed  # values were needed, and some were lost
    live, offline = live_found / live_needed, found / needed
    print(f"\nlive recall {live:.4f} offline {offline:.4f} over {len(rows)} turns, "
          f"{needed} needed values")
    assert abs(live - offline) <= 0.01
    per_turn = [(r[0], r[1]) == (r[2], r[3]) for r in rows]
    assert sum(per_turn) / len(per_turn) >= 0.99


def _chat_session(turns: int) -> list[dict[str, Any]]:
    """A tool-using session with bulky results; each turn reads another file."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Find where the retry limit is set."}]
    for t in range(turns):
        args = orjson.dumps({"path": f"src/mod_{t}.py"}).decode()
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{t}", "type": "function",
             "function": {"name": "read_file", "arguments": args}}]})
        body = "\n".join(f"LIMIT_{t}_{i} = {1000 + i}  # line {i} of mod_{t}" for i in range(80))
        messages.append({"role": "tool", "tool_call_id": f"call_{t}", "content": body})
    return messages


def _as_responses(messages: list[dict[str, Any]]) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for m in messages[1:]:
        if m["role"] == "user":
            items.append({"role": "user", "content": m["content"]})
        elif m["role"] == "assistant":
            items += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
        else:
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"],
                          "output": m["content"]})
    return {"model": "gpt-4o-mini", "instructions": messages[0]["content"], "input": items}


def _as_messages(messages: list[dict[str, Any]]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for m in messages[1:]:
        if m["role"] == "user":
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "assistant":
            out.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                 "input": orjson.loads(c["function"]["arguments"])} for c in m["tool_calls"]]})
        else:
            out.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": m["tool_call_id"],
                 "content": m["content"]}]})
    return {"model": "claude-sonnet-4", "max_tokens": 512, "system": messages[0]["content"],
            "messages": out}


@pytest.mark.parametrize("wire_format", ["chat", "responses", "messages"])
async def test_the_signals_are_the_same_in_every_wire_format(
    engine: ContextEngine, wire_format: str
) -> None:
    """A session whose late turns re-read a file it read early, under a budget that digests
    old results: the signals are the chat signals whatever the format."""
    session = _chat_session(10)
    reread = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_again", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "src/mod_0.py"}'}}]}
    session += [reread, {"role": "tool", "tool_call_id": "call_again", "content": "again"},
                {"role": "assistant", "content": "Found it."}]  # the call carrying the re-read
    convert = {"chat": lambda m: {"model": "gpt-4o-mini", "messages": m},
               "responses": _as_responses, "messages": _as_messages}[wire_format]
    wire = WIRE_FORMATS[wire_format]
    headers = {"x-ctxgate-session-id": f"wire-{wire_format}",
               "x-ctxgate-budget-tokens": "4000"}
    signals = []
    for k, end in enumerate(i for i, m in enumerate(session) if m["role"] == "assistant"):
        fitted, _ = await fit_as(engine, wire, convert(session[:end]),
                                 CallContext("wire", f"{wire_format}-{k}", headers))
        signals.append(fitted.signals)
    last = signals[-1]
    assert last is not None and last.mode == "managed"
    # the re-read of src/mod_0.py: the path is still in the earlier call's arguments (old
    # exchanges are aged into digests, not dropped), its result was digested: a refetch
    assert (last.needed, last.found, last.tool_calls, last.refetches, last.repeats) == (
        1, 1, 1, 1, 1)
    assert all(s is not None and (s.needed, s.refetches) == (0, 0) for s in signals[1:-1])
