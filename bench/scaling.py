"""How fitting one call scales with its number of messages (issue 10: O(n log n)).

Each request is sent as the first call of a new session through the engine in-process
(shipped config, the embedder on, no playbook), in two shapes: `chat`, N short user messages
(`m0` … `mN-1`, as the issue's report; class `default`), and `agent`, N messages of tool calls
and their results (class `coding_agent`: rerank, cluster, select rules). Each once with no
budget header (the class's forecast) and once with `x-ctxgate-budget-tokens` at 2.5 tokens a
message, which forces a compaction step. Prints the time of `engine.fit` per size; `--json
OUT` keeps the figures.

    .venv/bin/python bench/scaling.py [--sizes 1000 10000 ...] [--shapes chat agent]
        [--repeat 1] [--json OUT]
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


def agent(n: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an autonomous programmer."},
        {"role": "user", "content": "Fix the failing test in tests/test_parser.py."},
    ]
    for t in range((n - 3) // 2):
        call = {"id": f"c{t}", "type": "function",
                "function": {"name": "bash", "arguments": f'{{"cmd": "cat src/m{t}.py"}}'}}
        messages.append({"role": "assistant", "content": f"Step {t}.", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{t}", "content": f"def f{t}(): ..."})
    messages.append({"role": "user", "content": "Go on."})
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    return {"model": "gpt-4o", "messages": messages, "tools": tools}


SHAPES = {"chat": (chat, "default"), "agent": (agent, "coding_agent")}


async def fit_seconds(
    engine: ContextEngine, n: int, budget: int | None, run: int, shape: str = "chat"
) -> dict[str, Any]:
    make, cls = SHAPES[shape]
    headers = {"x-ctxgate-session-id": f"scaling-{shape}-{n}-{budget}-{run}",
               "x-ctxgate-task-class": cls}
    if budget is not None:
        headers["x-ctxgate-budget-tokens"] = str(budget)
    body = make(n)
    start = time.perf_counter()
    try:
        fitted = await engine.fit(body, CallContext("bench", f"scaling-{n}", headers))
        outcome = f"{fitted.tokens_before} -> {fitted.tokens_after} tokens"
    except ContextBudgetExceeded as exc:
        outcome = f"refused: {exc.message}"
    return {"shape": shape, "messages": n, "budget": budget,
            "seconds": time.perf_counter() - start, "outcome": outcome}


async def run(sizes: list[int], shapes: list[str], repeat: int) -> list[dict[str, Any]]:
    engine = build_engine(Settings())
    assert engine.embedder is not None
    await engine.embedder.embed(["warm up"])  # load the model once, before any timing
    for shape in shapes:  # and the encodings
        await fit_seconds(engine, 600, None, -1, shape)
        await fit_seconds(engine, 600, 1500, -1, shape)
    rows = []
    for shape in shapes:
        for n in sizes:
            for budget in (None, int(TOKENS_PER_MESSAGE_BUDGET * n)):
                runs = [await fit_seconds(engine, n, budget, k, shape) for k in range(repeat)]
                best = min(runs, key=lambda r: r["seconds"])
                print(
                    f"{shape:>5} {n:>7} messages  budget {budget or 'forecast':>8}  "
                    f"{best['seconds']:8.3f} s  {best['outcome']}",
                    flush=True,
                )
                rows.append(best)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--repeat", type=int, default=1, help="runs per size, the best kept")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = asyncio.run(run(args.sizes, args.shapes, args.repeat))
    if args.json:
        args.json.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
