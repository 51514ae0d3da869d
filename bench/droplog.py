"""Drop-log size per call, old form against new, and the explainer's latency (issue 11).

1. A 300-call synthetic session (tests/sessions.py) replayed through the context engine
   twice, with `drop_log_form` `items` (a line per item per call) and `decisions` (each
   decision once, a line per call): lines and bytes per call over the first and the last
   20 calls; and a check that `reconstruct` rebuilds every call's drops from the new form.
2. The same session through a real gateway (embedded Redis, scripted upstream):
   `GET /admin/traces/{id}` timed for the first, middle and last calls.

    .venv/bin/python bench/droplog.py [--turns 300] [--budget 12000] [--skip-gateway]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.timing import gateway_stack
from gateway.context.engine import CallContext, ContextEngine, FittedCall
from gateway.context.replay import calls_from_messages
from gateway.context.session import MemorySessionStore
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.observability.reconstruct import reconstruct
from gateway.settings import Settings
from tests.sessions import synthetic_session

CONFIG = Path(__file__).resolve().parents[1] / "config" / "gateway.yaml"
EDGE = 20


def session_calls(turns: int) -> list[dict[str, Any]]:
    _, messages, _ = synthetic_session(1, turns=turns)
    return calls_from_messages(messages, "gpt-4o-mini")


def headers(budget: int, session: str) -> dict[str, str]:
    return {"x-ctxgate-session-id": session, "x-ctxgate-budget-tokens": str(budget),
            "x-ctxgate-task-class": "coding_agent"}


def replay(calls: list[dict[str, Any]], path: Path, form: str, budget: int) -> list[FittedCall]:
    log = DropLog(str(path), "hash", None, form)  # type: ignore[arg-type]
    engine = ContextEngine(Settings(config=CONFIG), None, Metrics(), log, None,
                           sessions=MemorySessionStore())

    async def run() -> list[FittedCall]:
        return [await engine.fit(body, CallContext("bench", f"call-{n}", headers(budget, "s")))
                for n, body in enumerate(calls)]

    try:
        return asyncio.run(run())
    finally:
        log.close()


def per_call(path: Path, n_calls: int) -> tuple[list[int], list[int]]:
    lines, size = Counter[str](), Counter[str]()
    for raw in path.read_bytes().splitlines():
        trace = orjson.loads(raw)["trace_id"]
        lines[trace] += 1
        size[trace] += len(raw) + 1
    ids = [f"call-{n}" for n in range(n_calls)]
    return [lines[i] for i in ids], [size[i] for i in ids]


def drop_log_figures(turns: int, budget: int) -> list[tuple[str, Any]]:
    calls = session_calls(turns)
    rows: list[tuple[str, Any]] = [("calls", len(calls))]
    with tempfile.TemporaryDirectory() as tmp:
        figures = {}
        for form in ("items", "decisions"):
            path = Path(tmp) / f"{form}.jsonl"
            fitted = replay(calls, path, form, budget)
            lines, size = per_call(path, len(calls))
            figures[form] = (lines, size, path.stat().st_size)
            if form == "decisions":
                logged = [orjson.loads(raw) for raw in path.read_bytes().splitlines()]
                rebuilt = {c.trace_id: c for c in reconstruct(logged)}
                exact = all(
                    sorted(d["item_id"] for d in rebuilt[f.trace_id].drops)
                    == sorted(d.item_id for d in f.drops) and rebuilt[f.trace_id].balanced
                    for f in fitted)
                rows.append(("decisions: every call reconstructed exactly", exact))
            rows.append((f"{form}: drops over the session", sum(len(f.drops) for f in fitted)))
        for form, (lines, size, total) in figures.items():
            rows += [
                (f"{form}: lines/call, first {EDGE}", statistics.mean(lines[:EDGE])),
                (f"{form}: lines/call, last {EDGE}", statistics.mean(lines[-EDGE:])),
                (f"{form}: bytes/call, first {EDGE}", statistics.mean(size[:EDGE])),
                (f"{form}: bytes/call, last {EDGE}", statistics.mean(size[-EDGE:])),
                (f"{form}: max lines in one call", max(lines)),
                (f"{form}: lines, whole session", sum(lines)),
                (f"{form}: bytes, whole session", total),
            ]
    return rows


def explainer_figures(turns: int, budget: int) -> list[tuple[str, Any]]:
    calls = session_calls(turns)
    key, session = "sk-bench-explain-00000000", uuid.uuid4().hex
    with tempfile.TemporaryDirectory() as tmp, gateway_stack(Path(tmp)) as gateway:
        traces = []
        with httpx.Client(timeout=60) as client:
            for body in calls:
                response = client.post(
                    f"{gateway.base_url}/chat/completions", json=body,
                    headers={"authorization": f"Bearer {key}", **headers(budget, session)})
                response.raise_for_status()
                traces.append(response.headers["x-ctxgate-trace-id"])
            admin = {"authorization": f"Bearer {gateway.admin_key}"}
            rows: list[tuple[str, Any]] = []
            for label, n in (("first", 0), ("middle", len(calls) // 2), ("last", len(calls) - 1)):
                url = f"{gateway.url}/admin/traces/{traces[n]}"
                deadline = time.monotonic() + 10
                while client.get(url, headers=admin).status_code != 200:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"no account of call {n}")
                    time.sleep(0.05)
                seconds = []
                for _ in range(30):
                    start = time.perf_counter()
                    response = client.get(url, headers=admin)
                    seconds.append(time.perf_counter() - start)
                seconds.sort()
                explained = response.json()
                rows += [
                    (f"explain {label} call ({len(explained['messages'])} messages): "
                     "median ms", 1000 * statistics.median(seconds)),
                    (f"explain {label} call: p95 ms", 1000 * seconds[int(len(seconds) * .95)]),
                    (f"explain {label} call: response bytes", len(response.content)),
                ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--budget", type=int, default=12000)
    parser.add_argument("--skip-gateway", action="store_true")
    args = parser.parse_args()
    rows = drop_log_figures(args.turns, args.budget)
    if not args.skip_gateway:
        rows += explainer_figures(args.turns, args.budget)
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        shown = f"{value:,.1f}" if isinstance(value, float) else str(value)
        print(f"{name:<{width}}  {shown:>12}")


if __name__ == "__main__":
    main()
