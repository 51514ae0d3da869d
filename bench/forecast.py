"""Budgets that adjust themselves, replayed (issue 12): a task class starts loose (or too
tight), its sessions are replayed call by call through the engine, each call's live
fidelity signal (the issue-7 yardstick's needed values, and those of them the engine
forwarded) goes to the evidence store, and the real controller judges the evidence between
sessions and moves the class's caps in Redis (an embedded `redis-server`).

    python -m bench.forecast --split tune            # tune the policy on this half
    python -m bench.forecast --split holdout         # then report the other half apart
    python -m bench.forecast --fixed 1,0.5,0.25      # the landscape: a scale held fixed

Per session it prints the scale in force, the recall of its calls (needed values found in
what was forwarded, pooled), the reduction of its late calls (tokens sent against the
client's) and any move. Refetch is not measured here (the controller sees no tool-call
repeats: recall alone moves it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.corpora import CORPORA, Session, load
from bench.corpus_run import request
from bench.yardstick import call_ends, late_calls, needed_values, recall
from gateway.context.adjust import ClassForecasts, ForecastController
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.evidence import EvidenceStore
from gateway.context.fidelity import CallSignals
from gateway.context.session import MemorySessionStore
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from gateway.store.embedded import EmbeddedRedis

# Where each scenario starts: the class's YAML caps, before any move (`--task-class`'s own
# settings otherwise). `loose`: aging only past 8,000 verbatim tokens, history cap 80,000;
# `tight`: aging past 100 tokens, a history cap of 3,000.
SCENARIOS: dict[str, dict[str, Any]] = {
    "loose": {"budget": {"history": 80_000, "knowledge": 16_000},
              "compaction": {"verbatim_tokens_high": 8_000, "verbatim_tokens_low": 0}},
    "tight": {"budget": {"history": 400, "knowledge": 200},
              "compaction": {"verbatim_tokens_high": 50, "verbatim_tokens_low": 0},
              "stages": {"compress": {"mask_after_turns": 1}}},
}
POLICY = {"adjust": True, "recall_target": 0.98, "hysteresis": 0.01, "min_evidence_calls": 140,
          "step": 0.25, "min_scale": 0.05, "max_scale": 10.0}


@dataclass
class Bench:
    engine: ContextEngine
    controller: ForecastController
    task_class: str


def settings_for(task_class: str, start: dict[str, Any], policy: dict[str, Any]) -> Settings:
    """The shipped settings with `task_class` starting at `start`, adjusted by `policy`."""
    settings = Settings()
    classes = dict(settings.task_classes)
    spec = {**_merged(classes[task_class], start), "forecast": policy}
    classes[task_class] = spec
    return settings.model_copy(update={"task_classes": classes, "forecast_adjust": True})


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        out[key] = _merged(old, value) if isinstance(old, dict) and isinstance(value, dict) \
            else value
    return out


def build(settings: Settings, redis: Any, task_class: str, embedder: Embedder) -> Bench:
    forecasts = ClassForecasts(redis, ttl_s=0)  # every call sees the latest move
    engine = ContextEngine(settings, None, Metrics(), DropLog("/dev/null", "none", None),
                           embedder, sessions=MemorySessionStore(), class_forecasts=forecasts)
    controller = ForecastController(engine.classes, EvidenceStore(redis), forecasts)
    return Bench(engine, controller, task_class)


async def replay(bench: Bench, session: Session, tag: str) -> dict[str, Any]:
    """One session call by call; each call's signals recorded as a managed call's."""
    ends = call_ends(session.messages)
    late = late_calls(len(ends))
    headers = {"x-ctxgate-session-id": f"{tag}:{session.id}",
               "x-ctxgate-task-class": bench.task_class}
    needed_total = found_total = sent = forwarded = 0
    for k, end in enumerate(ends):
        body = request(session, end)
        fitted = await bench.engine.fit(body, CallContext("bench", f"{tag}-{k}", headers))
        assistant = session.messages[end]
        needed = needed_values(assistant, body["messages"])
        share = recall(needed, fitted.body["messages"])
        found = round((share or 0.0) * len(needed))
        needed_total, found_total = needed_total + len(needed), found_total + found
        if late[k]:
            sent, forwarded = sent + fitted.tokens_before, forwarded + fitted.tokens_after
        await bench.controller.evidence.record(CallSignals(
            bench.task_class, "managed", len(needed), found,
            len(assistant.get("tool_calls") or []), 0))
    return {"session": session.id, "calls": len(ends), "needed": needed_total,
            "found": found_total, "late_sent": sent, "late_forwarded": forwarded}


async def run_scenario(bench: Bench, sessions: Sequence[Session], passes: int,
                       fixed: float | None = None) -> list[dict[str, Any]]:
    """Every session `passes` times; the controller judges after each (unless `fixed`)."""
    forecasts = bench.controller.forecasts
    rows = []
    for p in range(passes):
        for session in sessions:
            scale = await forecasts.scale(bench.task_class) or 1.0
            row = await replay(bench, session, f"p{p}-{scale}")
            await bench.controller.evidence.flush()
            judged = [] if fixed is not None else await bench.controller.run_once()
            row.update(scale=scale, moves=[(j.action, j.scale_to) for j in judged if j.moved])
            rows.append(row)
            print(_row_text(p, row), file=sys.stderr)
    return rows


def _row_text(p: int, row: dict[str, Any]) -> str:
    rec = row["found"] / row["needed"] if row["needed"] else float("nan")
    red = 1 - row["late_forwarded"] / row["late_sent"] if row["late_sent"] else 0.0
    return (f"pass {p} {row['session'][:40]:40} scale {row['scale']:<7g} recall {rec:6.1%} "
            f"late reduction {red:6.1%} {row['moves'] or ''}")


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    needed = sum(r["needed"] for r in rows)
    sent = sum(r["late_sent"] for r in rows)
    return {"sessions": len(rows), "calls": sum(r["calls"] for r in rows),
            "recall": sum(r["found"] for r in rows) / needed if needed else None,
            "late_reduction": 1 - sum(r["late_forwarded"] for r in rows) / sent if sent else None,
            "scale_first": rows[0]["scale"] if rows else None,
            "scale_last": rows[-1]["scale"] if rows else None}


def report(scenario: str, rows: Sequence[dict[str, Any]], per_pass: int) -> dict[str, Any]:
    passes = [rows[i:i + per_pass] for i in range(0, len(rows), per_pass)]
    out = {"scenario": scenario, "passes": [summary(p) for p in passes],
           "moves": [m for r in rows for m in r["moves"]], "rows": list(rows)}
    print(f"\n## {scenario}: {len(out['moves'])} moves, scale "
          f"{rows[0]['scale']:g} -> {rows[-1]['scale']:g} (then {_next(rows)})")
    print("| pass | sessions | calls | scale at start | recall | late-call reduction |")
    print("|---|---|---|---|---|---|")
    for p, s in enumerate(out["passes"]):
        print(f"| {p} | {s['sessions']} | {s['calls']} | {s['scale_first']:g} | "
              f"{_pct(s['recall'])} | {_pct(s['late_reduction'])} |")
    return out


def _next(rows: Sequence[dict[str, Any]]) -> str:
    moves = rows[-1]["moves"]
    return f"{moves[-1][1]:g}" if moves else "no move"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    import redis.asyncio as aioredis

    from gateway.store import keys

    sessions = load(args.corpus, args.corpora)
    if args.split != "all":
        sessions = [s for s in sessions if s.split == args.split]
    sessions = sessions[: args.max_sessions] if args.max_sessions else sessions
    print(f"{args.corpus} ({args.split}): {len(sessions)} sessions, "
          f"{sum(len(call_ends(s.messages)) for s in sessions)} calls a pass", file=sys.stderr)
    server = EmbeddedRedis(Path(tempfile.mkdtemp(prefix="bench-forecast-"))).start()
    redis = aioredis.Redis.from_url(server.url)
    embedder = Embedder(Settings().embed_model)
    results: dict[str, Any] = {"corpus": args.corpus, "split": args.split, "policy": POLICY}
    try:
        runs = [(f"fixed {x:g}", args.start, x) for x in args.fixed] if args.fixed else [
            (name, name, None) for name in args.scenario]
        for label, start, fixed in runs:
            await redis.flushdb()
            settings = settings_for(args.task_class, SCENARIOS[start], POLICY)
            bench = build(settings, redis, args.task_class, embedder)
            if fixed is not None:
                await redis.hset(keys.class_forecast(args.task_class), "scale", repr(fixed))
            passes = 1 if fixed is not None else args.passes
            rows = await run_scenario(bench, sessions, passes, fixed)
            results[label] = report(label, rows, len(sessions))
    finally:
        await redis.aclose()
        server.stop()
        embedder.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=CORPORA)
    parser.add_argument("--corpus", default="swe-agent")
    parser.add_argument("--task-class", default="coding_agent")
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="tune")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--passes", type=int, default=6, help="times the sessions are replayed")
    parser.add_argument("--max-sessions", type=int)
    parser.add_argument("--fixed", type=lambda s: [float(x) for x in s.split(",")],
                        help="scales held fixed (no controller), from --start")
    parser.add_argument("--start", choices=sorted(SCENARIOS), default="loose")
    parser.add_argument("--min-evidence", type=int, default=POLICY["min_evidence_calls"],
                        help="calls per judged batch")
    parser.add_argument("--step", type=float, default=POLICY["step"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    POLICY.update(min_evidence_calls=args.min_evidence, step=args.step)
    args.scenario = args.scenario or sorted(SCENARIOS)
    results = asyncio.run(main_async(args))
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
