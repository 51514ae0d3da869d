"""`ctxgate replay FILE`: run a recorded session through the context pipeline, no upstream.

FILE is a JSON list of requests (Chat Completions, Responses or Messages, each read
through its wire adapter as the gateway's route would), one message list (each prefix that
ends before an assistant turn is one call), or a SWE-agent `.traj` file (its `history`). A
request's format is told by its shape (`format_of`) unless `--format` names it. Sessions
live in a throwaway in-memory store (no Redis needed, nothing persists), so replays are
repeatable. Prints per call: tokens before and after, each drop with stage and reason, the
time spent.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import typer

from gateway.context.engine import CallContext, ContextEngine, FittedCall
from gateway.context.session import MemorySessionStore
from gateway.errors import ContextBudgetExceeded
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from gateway.wire.chat import ChatCompletions
from gateway.wire.messages import Messages
from gateway.wire.responses import Responses
from gateway.wire.view import WireFormat

WIRE_FORMATS: dict[str, WireFormat] = {
    "chat": ChatCompletions(), "responses": Responses(), "messages": Messages()}
ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})

_KEEP = ("role", "content", "name", "tool_calls", "tool_call_id")


def openai_message(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded message in OpenAI's shape (SWE-agent adds keys and `tool_call_ids`)."""
    msg = {k: raw[k] for k in _KEEP if k in raw and raw[k] is not None}
    if raw.get("role") == "tool" and "tool_call_id" not in msg and raw.get("tool_call_ids"):
        msg["tool_call_id"] = raw["tool_call_ids"][0]
    if msg.get("role") == "assistant" and not msg.get("tool_calls"):
        msg.pop("tool_calls", None)
    msg.setdefault("content", "")
    return msg


def calls_from_messages(messages: list[dict[str, Any]], model: str | None) -> list[dict[str, Any]]:
    calls = []
    for i, msg in enumerate(messages):
        if msg.get("role") == "assistant" and i > 0:
            body: dict[str, Any] = {"messages": messages[:i]}
            if model:
                body["model"] = model
            calls.append(body)
    return calls


def format_of(body: Mapping[str, Any]) -> str:
    """`responses`, `messages` or `chat`, by the request's shape. A Messages request with
    no system prompt and only string contents reads as chat, and fits the same."""
    if "input" in body and "messages" not in body:
        return "responses"
    if "system" in body or any(
        isinstance(m, Mapping) and isinstance(m.get("content"), list) and any(
            isinstance(b, Mapping) and b.get("type") in ANTHROPIC_BLOCKS
            for b in m["content"])
        for m in body.get("messages") or ()
    ):
        return "messages"
    return "chat"


def load_calls(path: Path, model: str | None = None) -> list[dict[str, Any]]:
    data = orjson.loads(path.read_bytes())
    if isinstance(data, dict) and isinstance(data.get("history"), list):
        return calls_from_messages([openai_message(m) for m in data["history"]], model)
    if isinstance(data, dict) and ("messages" in data or "input" in data):
        return [data]
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        if all("messages" in x or "input" in x for x in data):
            return list(data)
        if all("role" in x for x in data):
            return calls_from_messages([openai_message(m) for m in data], model)
    raise ValueError(f"{path}: not a list of requests, a message list or a .traj file")


def build_engine(settings: Settings, *, with_embedder: bool = True) -> ContextEngine:
    embedder = None
    if with_embedder:
        from gateway.embeddings import Embedder

        embedder = Embedder(settings.embed_model)
    return ContextEngine(
        settings,
        None,
        Metrics(),
        DropLog("/dev/null", "none", None),
        embedder,
        sessions=MemorySessionStore(),
    )



@contextmanager
def engine_for(settings: Settings, *, with_embedder: bool = True) -> Iterator[ContextEngine]:
    """`build_engine` for the span of a `with` block: its embedder's worker is closed after."""
    engine = build_engine(settings, with_embedder=with_embedder)
    try:
        yield engine
    finally:
        if engine.embedder is not None:
            engine.embedder.close()


async def fit_as(
    engine: ContextEngine, wire: WireFormat, body: dict[str, Any], call: CallContext
) -> tuple[FittedCall, dict[str, Any]]:
    """Fit one request as its route does: the wire adapter's view through the engine, and
    the request that would go upstream (`body` itself when the engine changed nothing)."""
    view = wire.view(body)
    fitted = await engine.fit(view.body, call, compact=view.compact)
    return fitted, wire.render(body, view, fitted) if fitted.changed else body


async def replay_calls(
    engine: ContextEngine,
    calls: list[dict[str, Any]],
    *,
    budget_tokens: int | None,
    task_class: str | None,
    session_id: str = "replay",
    wire_format: str | None = None,
) -> list[tuple[FittedCall | str, float]]:
    """Each call fitted in turn as one session; `wire_format` None: each call's own."""
    headers = {"x-ctxgate-session-id": session_id}
    if budget_tokens is not None:
        headers["x-ctxgate-budget-tokens"] = str(budget_tokens)
    if task_class is not None:
        headers["x-ctxgate-task-class"] = task_class
    results: list[tuple[FittedCall | str, float]] = []
    for n, body in enumerate(calls):
        start = time.perf_counter()
        wire = WIRE_FORMATS[wire_format or format_of(body)]
        call = CallContext(tenant="replay", trace_id=f"replay-{n}", headers=headers)
        try:
            fitted: FittedCall | str = (await fit_as(engine, wire, body, call))[0]
        except ContextBudgetExceeded as exc:
            fitted = exc.message
        results.append((fitted, time.perf_counter() - start))
    return results


def _record(n: int, fitted: FittedCall | str, seconds: float) -> dict[str, Any]:
    if isinstance(fitted, str):
        return {"call": n, "error": fitted, "ms": round(seconds * 1000, 3)}
    return {
        "call": n,
        "task_class": fitted.task_class,
        "tokens_before": fitted.tokens_before,
        "tokens_after": fitted.tokens_after,
        "budget": fitted.budget,
        "prefix_stable": fitted.prefix_stable,
        "ms": round(seconds * 1000, 3),
        "drops": [
            {
                "stage": d.stage,
                "action": d.action,
                "reason": d.reason,
                "item_id": d.item_id,
                "kind": d.kind,
                "message_index": d.message_index,
                "tokens_before": d.tokens_before,
                "tokens_after": d.tokens_after,
                "kept_as": d.kept_as,
            }
            for d in fitted.drops
        ],
    }


def _print_text(records: list[dict[str, Any]]) -> None:
    for r in records:
        if "error" in r:
            typer.echo(f"call {r['call']:>3}: REFUSED {r['error']} ({r['ms']:.1f} ms)")
            continue
        saved = r["tokens_before"] - r["tokens_after"]
        share = 100 * saved / max(r["tokens_before"], 1)
        typer.echo(
            f"call {r['call']:>3}: {r['tokens_before']:>7} -> {r['tokens_after']:>7} tokens "
            f"(-{share:4.1f}%), {len(r['drops'])} drops, {r['ms']:.1f} ms, "
            f"class {r['task_class']}, prefix stable: {r['prefix_stable']}"
        )
        for d in r["drops"]:
            kept = f" kept_as={d['kept_as']}" if d["kept_as"] else ""
            typer.echo(
                f"      {d['stage']:<8} {d['action']:<8} {d['reason']:<18} {d['kind']:<11} "
                f"msg {d['message_index']:>3} {d['tokens_before']:>6} -> {d['tokens_after']:<6}"
                f"{kept}"
            )


def replay(
    path: Path,
    *,
    budget_tokens: int | None,
    task_class: str | None,
    as_json: bool,
    settings: Settings,
    wire_format: str | None = None,
) -> int:
    try:
        calls = load_calls(path)
    except (OSError, ValueError, orjson.JSONDecodeError) as exc:
        typer.echo(f"ctxgate replay: {exc}", err=True)
        return 2
    engine = build_engine(settings)
    try:
        results = asyncio.run(
            replay_calls(engine, calls, budget_tokens=budget_tokens, task_class=task_class,
                         wire_format=wire_format)
        )
    finally:
        if engine.embedder is not None:
            engine.embedder.close()
    records = [_record(n, fitted, s) for n, (fitted, s) in enumerate(results)]
    if as_json:
        sys.stdout.write(orjson.dumps(records, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_text(records)
    return 1 if any("error" in r for r in records) else 0
