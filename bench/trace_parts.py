"""What a fitted call's trace costs to build, call by call, on the 300-call synthetic session
(issue 7: per-call time grows with the new content only), in one process so that the two
ways are timed side by side on the same fitted calls:

- the explainer's account cut into pieces afresh (`split_account(account_of(...))`: every
  piece built, serialised and hashed) against `AccountPieces.of` (a session's pieces
  remembered: only those whose sources changed are built);
- the trace's messages kept: within 48,000 characters of JSON (`keep_recent` without the
  Reflector's budget) against only those the Reflector's transcript can show (24,000).

Usage:

    python -m bench.trace_parts [--turns 300] [--edge 20] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import orjson

from gateway.context.engine import CallContext
from gateway.context.replay import build_engine, calls_from_messages
from gateway.learner.traces import keep_recent
from gateway.observability.explain import AccountPieces, account_of, split_account
from gateway.settings import Settings
from gateway.wire.view import unmarked
from tests.sessions import synthetic_session

MODEL = "gpt-4o-mini"


def _best_us(work: Any, repeat: int) -> float:
    """The fastest of `repeat` runs of `work()`, in microseconds."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best * 1e6


async def main(args: argparse.Namespace) -> dict[str, Any]:
    engine = build_engine(Settings())
    calls = calls_from_messages(synthetic_session(args.seed, args.turns)[1], MODEL)
    pieces = AccountPieces()
    rows: list[tuple[float, float, int, int]] = []
    for n, body in enumerate(calls):
        fitted = await engine.fit(body, CallContext("bench", f"tr-{n}",
                                                    {"x-ctxgate-session-id": "s"}))
        afresh = _best_us(lambda f=fitted: split_account(account_of(f, f.budget_source)),
                          args.repeat)
        # remembered: the previous call's pieces are in the memo; re-splitting the same call
        # after the first run measures the same (every piece's sources the same objects),
        # so time the first run only, against the previous call's memo
        started = time.perf_counter()
        pieces.of(fitted, fitted.budget_source)
        remembered = (time.perf_counter() - started) * 1e6
        messages = unmarked(fitted.body["messages"])
        rows.append((afresh, remembered, len(orjson.dumps(keep_recent(messages, 48_000))),
                     len(orjson.dumps(keep_recent(messages, 48_000, 24_000)))))
    edge = args.edge

    def summary(part: list[tuple[float, float, int, int]]) -> dict[str, float]:
        return {"account afresh us (median)": round(statistics.median(r[0] for r in part), 1),
                "account remembered us (median)": round(
                    statistics.median(r[1] for r in part), 1),
                "trace messages bytes, 48,000 JSON": round(statistics.mean(r[2] for r in part)),
                "trace messages bytes, Reflector's 24,000": round(
                    statistics.mean(r[3] for r in part))}

    return {"calls": len(rows), "first": summary(rows[:edge]), "last": summary(rows[-edge:])}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--edge", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    print(orjson.dumps(asyncio.run(main(parser.parse_args())),
                       option=orjson.OPT_INDENT_2).decode())
