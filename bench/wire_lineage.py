"""Messages and Responses bodies fitted from where the session's last call ended, against the
same bodies fitted whole: every corpus call (the sessions of `bench/same_output.py`) rendered
in each wire format (`bench/wire_convert.py`) and sent through the managed routes' fitting
(`gateway.api.fitting.Fitting.prepare`: decode, validate, the chat view, the engine, the
render, the encoding) twice, each with its own engine: once with every body kept by the body
cache (so each call that continues its session's last one is decoded, validated and
translated from where that one ended and hands the engine its lineage), once with no body
kept (each decoded and translated whole, no lineage). The forwarded bytes, tokens before and
after and drop counts must be identical on every call. After each session's calls, four
that do not continue it: its last call with the first item's text edited, its first call
again (a restart), its last call with the system prompt changed, and with a tool added.

    python -m bench.wire_lineage [--corpora DIR] [--quick] [--format responses|messages]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import time
from pathlib import Path
from typing import Any

import orjson

from bench.same_output import CORPORA, _sessions
from bench.wire_convert import CONVERTERS

NEVER = 1 << 62  # a body cache that keeps nothing


def _variants(first: dict[str, Any], last: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Calls that do not continue the session's last one."""
    items = "input" if name == "responses" else "messages"
    edited = copy.deepcopy(last)
    head = edited[items][0] if edited[items] else None
    if isinstance(head, dict) and isinstance(head.get("content"), str):
        head["content"] += " (edited)"
    elif isinstance(head, dict) and isinstance(head.get("content"), list) and head["content"]:
        head["content"][0] = {**head["content"][0], "text": "edited"}
    system = "instructions" if name == "responses" else "system"
    tool = ({"type": "function", "name": "extra_tool", "parameters": {"type": "object"}}
            if name == "responses" else {"name": "extra_tool",
                                         "input_schema": {"type": "object"}})
    return [edited, first, {**last, system: f"{last.get(system) or ''} (changed)"},
            {**last, "tools": [*last.get("tools", []), tool]}]


async def run(corpora: Path, quick: bool, formats: list[str]) -> dict[str, Any]:
    from gateway.api.bodies import BodyCache
    from gateway.api.fitting import Fitting
    from gateway.api.route import Call
    from gateway.auth import Principal
    from gateway.context.replay import build_engine
    from gateway.settings import Settings
    from gateway.wire.messages import Messages
    from gateway.wire.responses import Responses

    wires = {"responses": Responses(), "messages": Messages()}
    settings = Settings()
    engines = [build_engine(settings), build_engine(settings)]
    sessions = _sessions(corpora, quick)
    out: dict[str, Any] = {}
    try:
        for name in formats:
            wire = wires[name]
            proven, whole = (Fitting(engine, engine.metrics, 600.0) for engine in engines)
            proven._bodies[wire.name] = BodyCache(min_bytes=0, name=wire.items)
            whole._bodies[wire.name] = BodyCache(min_bytes=NEVER, name=wire.items)
            calls_n = differ = continued = 0
            started = time.perf_counter()
            corpus = ""
            for session, calls, extra in sessions:
                if session.split(":")[0] != corpus:  # progress, per corpus
                    corpus = session.split(":")[0]
                    print(f"{name} {corpus}: from call {calls_n}, {differ} differ so far, "
                          f"{proven.views.extended} built on", flush=True)
                bodies = [CONVERTERS[name](body) for body in calls]
                if len(bodies) >= 2:
                    bodies += _variants(bodies[0], bodies[-1], name)
                for n, body in enumerate(bodies):
                    raw = orjson.dumps(body)
                    results = []
                    for fitting in (proven, whole):
                        call = Call({"x-ctxgate-session-id": f"{name}:{session}", **extra},
                                    f"{session}-{n}", time.perf_counter(),
                                    Principal("wire-lineage", None))
                        try:
                            prepared = await fitting.prepare(wire, raw, call)
                        except Exception as exc:  # a refusal must be the same both ways
                            results.append(("raised", type(exc).__name__, str(exc)))
                            continue
                        fitted = prepared.fitted
                        results.append((prepared.forward, prepared.task_class,
                                        fitted and (fitted.tokens_before, fitted.tokens_after,
                                                    len(fitted.drops))))
                    calls_n += 1
                    if results[0] != results[1]:
                        differ += 1
                        if differ <= 5:
                            print(f"DIFFER {name} {session} call {n}")
            continued = proven.views.extended
            out[name] = {"calls": calls_n, "differ": differ,
                         "views built on from the last call's": continued,
                         "bodies resumed": proven.bodies_of(wire).resumed,
                         "seconds": round(time.perf_counter() - started, 1)}
            print(name, out[name], flush=True)
    finally:
        for engine in engines:
            if engine.embedder is not None:
                engine.embedder.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=CORPORA)
    parser.add_argument("--quick", action="store_true", help="the synthetic sessions only")
    parser.add_argument("--format", action="append", choices=sorted(CONVERTERS))
    args = parser.parse_args()
    result = asyncio.run(run(args.corpora, args.quick, args.format or sorted(CONVERTERS)))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    raise SystemExit(1 if any(r["differ"] for r in result.values()) else 0)


if __name__ == "__main__":
    main()
