"""Where a call's CPU time goes on a long session, early against late (issue 7: per-call
time grows with the new content only): the engine alone (`gateway.context.replay`) fits one
synthetic session call by call, and the CPU time of each phase (parse, the session's
decisions applied, each stage, render, drop events, the prefix, the fidelity signals, the
drop log) is summed per call, for calls between compaction steps and step calls apart,
among calls 5-64 and the last 60.

    python -m bench.late_phases [--turns 300] [--seed 0]
    PYTHONPATH=OTHER python bench/late_phases.py   # another checkout's engine (OTHER)

Each phase is timed by wrapping the function the engine calls (a phase nested in another
counts in both); the wrappers cost a few microseconds a call, so read the phases against
each other and early against late, not as absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

ENGINE_PHASES = ("parse_request", "_apply_remembered", "render_messages", "drop_events",
                 "reapply", "reapply_changed", "observe", "materialize", "materialize_picked",
                 "step_horizon", "arrival_duplicates", "repeated_calls", "_stamp_step",
                 "lagging_tokens", "_render")
PREFIX_PHASES = ("build", "extend", "reuse", "parsed", "applied")
DROPLOG_PHASES = ("write_call", "_decided")


def _timed(spent: dict[str, float], label: str, f: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            spent[label] += time.process_time() - start
    return timed


def _wrap(spent: dict[str, float]) -> None:
    import gateway.context.engine as engine_module
    from gateway.context.engine import ContextEngine
    from gateway.context.prefix import Prefix
    from gateway.observability.droplog import DropLog

    for name in ENGINE_PHASES:  # what a checkout does not call is not timed
        target = engine_module if hasattr(engine_module, name) else ContextEngine
        if hasattr(target, name):
            setattr(target, name, _timed(spent, name, getattr(target, name)))
    for name in PREFIX_PHASES:
        if hasattr(Prefix, name):
            setattr(Prefix, name, _timed(spent, f"prefix.{name}", getattr(Prefix, name)))
    import gateway.context.stages.select as select
    from gateway.context.session import MemorySessionStore

    MemorySessionStore.save = _timed(spent, "session.save",  # type: ignore[method-assign]
                                     MemorySessionStore.save)
    select._last_blocks = _timed(spent, "select._last_blocks", select._last_blocks)
    for name in DROPLOG_PHASES:
        if hasattr(DropLog, name):
            setattr(DropLog, name, _timed(spent, f"droplog.{name}", getattr(DropLog, name)))


async def run(turns: int, seed: int) -> dict[tuple[str, str], dict[str, float]]:
    from gateway.context.engine import CallContext
    from gateway.context.replay import build_engine, calls_from_messages
    from gateway.settings import Settings
    from tests.sessions import synthetic_session

    spent: dict[str, float] = defaultdict(float)
    _wrap(spent)
    engine = build_engine(Settings())
    assert engine.embedder is not None
    await engine.embedder.embed(["warm up"])
    gc.collect()
    gc.freeze()
    calls = calls_from_messages(synthetic_session(seed, turns)[1], "gpt-4o-mini")
    out: dict[tuple[str, str], dict[str, float]] = {}
    previous: list[Any] | None = None
    for n, body in enumerate(calls):
        spent.clear()
        start = time.process_time()
        fitted = await engine.fit(body, CallContext("bench", f"c{n}", {
            "x-ctxgate-session-id": f"late-{seed}"}))
        total = time.process_time() - start
        forwarded = fitted.body["messages"]
        between = previous is not None and forwarded[: len(previous)] == previous
        previous = list(forwarded)
        when = "early" if 5 <= n < 65 else "late" if n >= len(calls) - 60 else None
        if when is None:
            continue
        row = out.setdefault((when, "between steps" if between else "step"), defaultdict(float))
        row["calls"] += 1
        row["total"] += total
        for phase, seconds in spent.items():
            row[phase] += seconds
        for stage, seconds in fitted.stage_seconds.items():
            if stage in ("select", "rerank", "cluster", "compress"):
                row[f"stage {stage}"] += seconds
    engine.embedder.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    report = asyncio.run(run(args.turns, args.seed))
    for (when, kind), row in sorted(report.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        calls = row.pop("calls")
        phases = sorted(row.items(), key=lambda kv: -kv[1])
        shown = ", ".join(f"{name} {1000 * s / calls:.2f}" for name, s in phases
                          if 1000 * s / calls >= 0.05)
        print(f"{kind}, {when} ({int(calls)} calls), CPU ms per call: {shown}")


if __name__ == "__main__":
    main()
