"""A corpus through the real gateway, against the engine replay of the same calls.

Starts an embedded Redis, the scripted upstream (`tests/upstream_stub.py`, which records what
it is sent) and `ctxgate serve` with the shipped configuration (`config/gateway.yaml`; the
in-process learner off, as in the replay), then sends every call of every session (each
prefix that ends before an assistant message, with the session's tools) as
`POST /v1/chat/completions` with the session's `x-ctxgate-session-id`. Per session: the
class the gateway answered in `x-ctxgate-task-class`, and the yardstick (`bench/yardstick.py`:
late-call reduction, recall) of what reached the upstream; beside it the same calls fitted
by the engine in this process (`bench/corpus_run.py`, as `bench/replay.py` does), and how
many calls went upstream exactly as the replay forwards them.

    python -m bench.corpus_gateway --corpora /tmp/taubench --corpus taubench-airline-queue \\
        [--max-sessions N] [--model gpt-4o] [--env KEY=VALUE ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench import corpora
from bench.corpora import Session
from bench.corpus_run import TENANT, request
from bench.yardstick import call_ends, late_calls, needed_values, recall, reduction
from gateway.context.engine import CallContext
from gateway.context.replay import build_engine
from gateway.settings import Settings
from gateway.store.embedded import EmbeddedRedis
from tests.harness import Gateway, Upstream, stop


def _figures(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    late = [r[key]["reduction"] for r in rows if r["late"]]
    recalls = [r[key]["recall"] for r in rows if r[key]["recall"] is not None]
    return {"late_reduction_%": round(100 * statistics.fmean(late), 2) if late else 0.0,
            "recall_%": round(100 * statistics.fmean(recalls), 2) if recalls else 100.0}


def _measure(session: Session, end: int, forwarded: list[dict[str, Any]]) -> dict[str, Any]:
    prefix = session.messages[:end]
    needed = needed_values(session.messages[end], prefix)
    return {"reduction": reduction(prefix, forwarded),
            "recall": recall(needed, forwarded) if needed else None}


async def replay_engine(sessions: list[Session], corpus: str) -> dict[str, list[Any]]:
    """Per session, per call: the messages the engine forwards (as `bench/replay.py`)."""
    engine = build_engine(Settings())
    assert engine.embedder is not None
    out: dict[str, list[Any]] = {}
    try:
        for session in sessions:
            headers = {"x-ctxgate-session-id": f"{corpus}:{session.id}"}
            calls = []
            for k, end in enumerate(call_ends(session.messages)):
                fitted = await engine.fit(request(session, end),
                                          CallContext(tenant=TENANT, trace_id=f"{corpus}-{k}",
                                                      headers=headers))
                calls.append((fitted.task_class, fitted.body["messages"]))
            out[session.id] = calls
    finally:
        engine.embedder.close()
    return out


def through_gateway(sessions: list[Session], corpus: str, model: str, workdir: Path,
                    env: dict[str, str] | None = None) -> dict[str, list[Any]]:
    """Per session, per call: the class the gateway answered and the forwarded messages."""
    out: dict[str, list[Any]] = {}
    with contextlib.ExitStack() as stack:
        store = EmbeddedRedis(workdir / "redis").start()
        stack.callback(store.stop)
        upstream = Upstream.start(workdir)
        stack.callback(stop, upstream.process)
        gateway = Gateway.start(workdir / "gateway", {
            "CTXGATE_UPSTREAM_URL": f"{upstream.url}/v1", "CTXGATE_WORKER": "off",
            "CTXGATE_REDIS_URL": f"redis://127.0.0.1:{store.port}/0",
            "CTXGATE_LOG_LEVEL": "warning", **(env or {})}, timeout_s=600)
        stack.callback(stop, gateway.process)
        auth = {"authorization": "Bearer sk-bench-corpus-gateway"}
        with httpx.Client(timeout=120) as client:
            for session in sessions:
                headers = {**auth, "x-ctxgate-session-id": f"{corpus}:{session.id}"}
                calls = []
                for end in call_ends(session.messages):
                    upstream.clear()
                    body = {"model": model, **request(session, end)}
                    response = client.post(f"{gateway.base_url}/chat/completions", json=body,
                                           headers=headers)
                    response.raise_for_status()
                    sent = [orjson.loads(r["body"]) for r in upstream.client_requests()]
                    if len(sent) != 1:
                        raise RuntimeError(f"{len(sent)} upstream requests for one call")
                    calls.append((response.headers.get("x-ctxgate-task-class"),
                                  sent[0]["messages"]))
                out[session.id] = calls
    return out


def compare(sessions: list[Session], gateway: dict[str, list[Any]],
            engine: dict[str, list[Any]]) -> list[dict[str, Any]]:
    rows = []
    for session in sessions:
        ends = call_ends(session.messages)
        late = late_calls(len(ends))
        per_call = []
        for k, end in enumerate(ends):
            per_call.append({
                "late": late[k],
                "gateway": _measure(session, end, gateway[session.id][k][1]),
                "engine": _measure(session, end, engine[session.id][k][1]),
                "same": gateway[session.id][k][1] == engine[session.id][k][1],
            })
        rows.append({
            "session": session.id, "calls": len(ends),
            "gateway_classes": sorted({c for c, _ in gateway[session.id]}),
            "engine_classes": sorted({c for c, _ in engine[session.id]}),
            "gateway": _figures(per_call, "gateway"), "engine": _figures(per_call, "engine"),
            "calls_forwarded_alike": sum(r["same"] for r in per_call),
        })
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=corpora.CORPORA)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--max-sessions", type=int)
    parser.add_argument("--model", default="gpt-4o")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra gateway environment (e.g. CTXGATE_FORECAST_ADJUST=false)")
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    sessions = corpora.load(args.corpus, args.corpora)[: args.max_sessions]
    with tempfile.TemporaryDirectory() as tmp:
        gateway = through_gateway(sessions, args.corpus, args.model, Path(tmp), env)
    engine = asyncio.run(replay_engine(sessions, args.corpus))
    rows = compare(sessions, gateway, engine)
    print("| session | calls | class (gateway) | class (replay) | late reduction gateway / "
          "replay | recall gateway / replay | calls forwarded alike |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        g, e = r["gateway"], r["engine"]
        print(f"| {r['session']} | {r['calls']} | {', '.join(map(str, r['gateway_classes']))} "
              f"| {', '.join(map(str, r['engine_classes']))} | {g['late_reduction_%']} / "
              f"{e['late_reduction_%']}% | {g['recall_%']} / {e['recall_%']}% | "
              f"{r['calls_forwarded_alike']} of {r['calls']} |")
    if args.json:
        args.json.write_text(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
