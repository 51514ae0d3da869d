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
from gateway.context.replay import openai_message
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
