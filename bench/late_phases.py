"""Where a call's CPU time goes on a long session, early against late (issue 7: per-call
time grows with the new content only): the engine alone (`gateway.context.replay`) fits one
synthetic session call by call, and the CPU time of each phase (parse, the session's
decisions applied, each stage, render, drop events, the prefix, the fidelity signals, the
drop log) is summed per call, for calls between compaction steps and step calls apart,
among calls 5-64 and the last 60 (`--edge`).

    python -m bench.late_phases [--turns 300] [--seed 0]
    python -m bench.late_phases --corpora /tmp/tau2 --corpus tau2-retail-gpt-4.1-queue \
        [--session 0] [--edge 60] [--step gateway.context.stages.base:decide ...]
    PYTHONPATH=OTHER python bench/late_phases.py   # another checkout's engine (OTHER)

Each phase is timed by wrapping the function the engine calls (a phase nested in another
counts in both); the wrappers cost a few microseconds a call, so read the phases against
each other and early against late, not as absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
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


def _wrap_named(spent: dict[str, float], names: list[str]) -> None:
    """`module:attr` or `module:Class.attr`, each timed (a missing one is left out)."""
    import importlib

    for name in names:
        module_name, _, path = name.partition(":")
        owner: Any = importlib.import_module(module_name)
        *parents, attr = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent, None)
        if owner is None or not hasattr(owner, attr):
            continue
        original = getattr(owner, attr)
        timed = _timed(spent, path, original)
        setattr(owner, attr, timed)
        for module in list(sys.modules.values()):  # imported by name, or in a table
            if not getattr(module, "__name__", "").startswith(("gateway.", "bench.")):
                continue
            for key, value in list(vars(module).items()):
                if value is original:
                    setattr(module, key, timed)
                elif isinstance(value, dict) and original in value.values():
                    value.update({k: timed for k, v in value.items() if v is original})


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


def _session_calls(args: argparse.Namespace) -> list[dict[str, Any]]:
    from gateway.context.replay import calls_from_messages
    from tests.sessions import synthetic_session

    if args.corpus is None:
        return calls_from_messages(synthetic_session(args.seed, args.turns)[1], "gpt-4o-mini")
    from pathlib import Path

    from bench.corpora import load

    session = load(args.corpus, Path(args.corpora))[args.session]
    calls = calls_from_messages(session.messages, "gpt-4o-mini")
    return [{**body, "tools": session.tools} for body in calls] if session.tools else calls


async def run(args: argparse.Namespace) -> dict[tuple[str, str], dict[str, float]]:
    from gateway.context.engine import CallContext
    from gateway.context.replay import build_engine
    from gateway.settings import Settings

    spent: dict[str, float] = defaultdict(float)
    _wrap(spent)
    _wrap_named(spent, args.step)
    engine = build_engine(Settings())
    assert engine.embedder is not None
    await engine.embedder.embed(["warm up"])
    gc.collect()
    gc.freeze()
    calls = _session_calls(args)
    edge = args.edge
    out: dict[tuple[str, str], dict[str, float]] = {}
    previous: list[Any] | None = None
    for n, body in enumerate(calls):
        spent.clear()
        start = time.process_time()
        fitted = await engine.fit(body, CallContext("bench", f"c{n}", {
            "x-ctxgate-session-id": f"late-{args.seed}"}))
        total = time.process_time() - start
        forwarded = fitted.body["messages"]
        between = previous is not None and forwarded[: len(previous)] == previous
        previous = list(forwarded)
        when = "early" if 5 <= n < 5 + edge else "late" if n >= len(calls) - edge else None
        if when is None:
            continue
        for kind in ("between steps" if between else "step", "all calls"):
            row = out.setdefault((when, kind), defaultdict(float))
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
    parser.add_argument("--corpora", default="../shared/corpora")
    parser.add_argument("--corpus", help="a corpus's session instead of the synthetic one")
    parser.add_argument("--session", type=int, default=0, help="which of the corpus's")
    parser.add_argument("--edge", type=int, default=60, help="calls early (from the 6th) "
                        "and late (the last)")
    parser.add_argument("--step", action="append", default=[],
                        help="another function to time, as module:Class.function")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    for (when, kind), row in sorted(report.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        calls = row.pop("calls")
        phases = sorted(row.items(), key=lambda kv: -kv[1])
        shown = ", ".join(f"{name} {1000 * s / calls:.2f}" for name, s in phases
                          if 1000 * s / calls >= 0.05)
        print(f"{kind}, {when} ({int(calls)} calls), CPU ms per call: {shown}")


if __name__ == "__main__":
    main()
