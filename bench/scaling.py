"""How fitting one call scales with its number of messages (issue 10: O(n log n)).

Each request is a chat of N short user messages (`m0` … `mN-1`, as the issue's report), sent
as the first call of a new session through the engine in-process (shipped config, the
embedder on, no playbook): once with no budget header (the `default` class's forecast) and
once with `x-ctxgate-budget-tokens` at 2.5 tokens a message, which forces a compaction step.
Prints the time of `engine.fit` per size; `--json OUT` keeps the figures.

    .venv/bin/python bench/scaling.py [--sizes 1000 10000 ...] [--repeat 1] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.replay import build_engine
from gateway.errors import ContextBudgetExceeded
from gateway.settings import Settings

SIZES = (1_000, 10_000, 20_000, 50_000, 100_000)
TOKENS_PER_MESSAGE_BUDGET = 2.5  # below what a short message costs: a step is forced


def chat(n: int) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": f"m{i}"} for i in range(n)]}


async def fit_seconds(
    engine: ContextEngine, n: int, budget: int | None, run: int
) -> dict[str, Any]:
    headers = {"x-ctxgate-session-id": f"scaling-{n}-{budget}-{run}"}
    if budget is not None:
        headers["x-ctxgate-budget-tokens"] = str(budget)
    body = chat(n)
    start = time.perf_counter()
    try:
        fitted = await engine.fit(body, CallContext("bench", f"scaling-{n}", headers))
        outcome = f"{fitted.tokens_before} -> {fitted.tokens_after} tokens"
    except ContextBudgetExceeded as exc:
        outcome = f"refused: {exc.message}"
    return {"messages": n, "budget": budget, "seconds": time.perf_counter() - start,
            "outcome": outcome}


async def run(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    engine = build_engine(Settings())
    await fit_seconds(engine, 600, None, -1)  # load the encodings and the model once
    await fit_seconds(engine, 600, 1500, -1)
    rows = []
    for n in sizes:
        for budget in (None, int(TOKENS_PER_MESSAGE_BUDGET * n)):
            runs = [await fit_seconds(engine, n, budget, k) for k in range(repeat)]
            best = min(runs, key=lambda r: r["seconds"])
            print(
                f"{n:>7} messages  budget {budget or 'forecast':>8}  "
                f"{best['seconds']:8.3f} s  {best['outcome']}",
                flush=True,
            )
            rows.append(best)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeat", type=int, default=1, help="runs per size, the best kept")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = asyncio.run(run(args.sizes, args.repeat))
    if args.json:
        args.json.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
