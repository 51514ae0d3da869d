"""Live fidelity signals against the offline yardstick (issue 12; bench/README.md, "Live
fidelity signals").

Replays corpus sessions call by call through the engine (shipped config, no playbook), as
`bench/replay.py` does, and compares per answered call the live recall the engine computed
from its session record (`gateway/context/fidelity.py`, reported on the next call) with the
yardstick's offline recall of that call (`bench/yardstick.py`: the next turn's needed
values searched in the messages the engine forwarded). The same sessions also go through
`observe_sent` as bypassed calls: their refetch rate is the agents' natural repeat rate.
Also times the signals per call: `observe` inside the engine's fit, and a bypassed call's
whole `observe_sent` (session load and save included).

    .venv/bin/python bench/fidelity.py [--corpus NAME ...] [--max-sessions N]
        [--max-calls N] [--budget-tokens N] [--format chat|responses|messages] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import corpora
from bench.corpora import CORPUS_NAMES, Session
from bench.corpus_run import fit_in_format, request
from bench.yardstick import call_ends, needed_values, recall
from gateway.context import engine as engine_module
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.replay import build_engine
from gateway.errors import ContextBudgetExceeded
from gateway.settings import Settings

CONFIG = Path(__file__).resolve().parents[1] / "config" / "gateway.yaml"


def timed(fn: Callable[..., Any], spent: list[tuple[float, float]]) -> Callable[..., Any]:
    """`fn`, noting each call's (CPU seconds of this thread, wall seconds): on a loaded
    machine the wall clock also counts the time other processes held the CPU."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent.append((time.thread_time() - cpu, time.perf_counter() - wall))
    return wrapper


async def replay(engine: ContextEngine, session: Session, corpus: str, args: argparse.Namespace,
                 sent_s: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """Per answered call: live and offline (needed, found), managed and bypass tool calls
    and refetches."""
    headers = {"x-ctxgate-session-id": f"{corpus}:{session.id}"}
    if args.budget_tokens:
        headers["x-ctxgate-budget-tokens"] = str(args.budget_tokens)
    bypass = {"x-ctxgate-session-id": f"bypass:{corpus}:{session.id}"}
    rows, previous = [], None
    for k, end in enumerate(call_ends(session.messages)[: args.max_calls]):
        body = request(session, end)
        cpu, wall = time.thread_time(), time.perf_counter()
        base = await engine.observe_sent(body, CallContext("bench", f"b{k}", bypass), "bypass")
        sent_s.append((time.thread_time() - cpu, time.perf_counter() - wall))
        try:
            fitted, prefix, forwarded = await fit_in_format(
                engine, body, CallContext("bench", f"{k}", headers), args.format)
        except ContextBudgetExceeded:
            previous = None
            continue
        live = fitted.signals
        if previous is not None and live is not None and base is not None:
            last_end, last_sent, last_forwarded = previous
            needed = needed_values(session.messages[last_end], last_sent)
            found = round((recall(needed, last_forwarded) or 0.0) * len(needed))
            rows.append({"live": (live.needed, live.found), "offline": (len(needed), found),
                         "tool_calls": live.tool_calls, "refetches": live.refetches,
                         "repeats": live.repeats,
                         "bypass_refetches": base.refetches})
        previous = end, prefix, forwarded
    return rows


def summary(corpus: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    def pooled(key: str) -> float | None:
        needed = sum(r[key][0] for r in rows)
        return round(100 * sum(r[key][1] for r in rows) / needed, 2) if needed else None

    def mean(key: str) -> float | None:
        shares = [r[key][1] / r[key][0] for r in rows if r[key][0]]
        return round(100 * statistics.mean(shares), 2) if shares else None

    tool_calls = sum(r["tool_calls"] for r in rows)

    def rate(n: int) -> float | None:
        return round(100 * n / tool_calls, 2) if tool_calls else None

    return {
        "corpus": corpus, "turns": len(rows),
        "needed": sum(r["offline"][0] for r in rows),
        "recall_live_pooled_%": pooled("live"), "recall_offline_pooled_%": pooled("offline"),
        "recall_live_mean_%": mean("live"), "recall_offline_mean_%": mean("offline"),
        "turns_equal_%": round(100 * sum(r["live"] == r["offline"] for r in rows)
                               / max(len(rows), 1), 2),
        "tool_calls": tool_calls,
        "refetch_managed_%": rate(sum(r["refetches"] for r in rows)),
        "repeat_managed_%": rate(sum(r["repeats"] for r in rows)),
        "refetch_bypass_%": rate(sum(r["bypass_refetches"] for r in rows)),
    }


def percentiles(spent: list[tuple[float, float]], name: str) -> dict[str, float]:
    out = {}
    for clock, values in (("cpu", sorted(s[0] for s in spent)),
                          ("wall", sorted(s[1] for s in spent))):
        for q in (0.5, 0.9, 0.99):
            at = values[min(len(values) - 1, int(q * len(values)))] if values else 0.0
            out[f"{name}_{clock}_us_p{round(100 * q)}"] = round(1e6 * at, 1)
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    observe_s: list[tuple[float, float]] = []
    sent_s: list[tuple[float, float]] = []
    engine_module.observe = timed(engine_module.observe, observe_s)  # type: ignore[assignment]
    engine = build_engine(Settings(config=CONFIG))
    assert engine.embedder is not None
    await engine.embedder.embed(["warm up"])
    loaded = {corpus: corpora.load(corpus)[: args.max_sessions] for corpus in args.corpus}
    gc.collect()
    gc.freeze()  # as the gateway does once warm: long-lived objects out of the collector's way
    table = []
    for corpus, sessions in loaded.items():
        rows: list[dict[str, Any]] = []
        for session in sessions:
            rows += await replay(engine, session, corpus, args, sent_s)
        table.append(summary(corpus, rows))
    cost = {"calls": len(observe_s), **percentiles(observe_s, "observe"),
            **percentiles(sent_s, "observe_sent")}
    return {"table": table, "cost": cost}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", nargs="*", default=[c for c in CORPUS_NAMES])
    parser.add_argument("--max-sessions", type=int, default=None)
    parser.add_argument("--max-calls", type=int, default=None)
    parser.add_argument("--budget-tokens", type=int, default=None)
    parser.add_argument("--format", choices=("chat", "responses", "messages"), default="chat")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    head = list(result["table"][0])
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in result["table"]:
        print("| " + " | ".join("" if row[h] is None else str(row[h]) for h in head) + " |")
    print("cost per call:", result["cost"])
    if args.json:
        args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
