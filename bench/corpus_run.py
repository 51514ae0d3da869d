"""One corpus through the engine and the baselines, measured with the issue-7 yardstick.

`replay_corpus` replays each session call by call as a live session (the engine keeps its
per-session state between calls) and measures, on the same calls, no gateway and masking
keep-K. `budget_calls` sends sampled calls as the first call of a new session under a budget
of 80% and 60% of their own size, against the plain fit. Both return per-call records;
`bench/figures.py` turns them into the reported figures.

A session's calls are `bench.corpora.session_calls`: the prefixes of one growing chat, or,
for a session recorded per call, each call's own message list as the client sent it (same
session key, in order). Each method's cached prefix is the one it shares with its own
previous call: no gateway pays the client's own edits of its earlier turns too.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from bench.baselines import mask_keep, plain_fit
from bench.corpora import Session, session_calls
from bench.wire_convert import CONVERTERS
from bench.yardstick import (
    cached_chars,
    call_chars,
    haystack,
    late_calls,
    needed_values,
    needed_with_system_results,
    recall,
    reduction,
    serialized,
)
from gateway.context.engine import CallContext, ContextEngine, FittedCall
from gateway.context.items import parse_request
from gateway.context.replay import WIRE_FORMATS, engine_for, fit_as
from gateway.errors import ContextBudgetExceeded
from gateway.settings import Settings
from gateway.wire.view import unmarked

MASK_KEEPS = (1, 2, 3, 5, 10)
BUDGET_FRACTIONS = (0.8, 0.6)
TENANT = "bench"


def request(session: Session, end: int) -> dict[str, Any]:
    return call_request(session, session.messages[:end])


def call_request(session: Session, messages: list[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": messages}
    if session.tools:
        body["tools"] = session.tools
    return body


async def late_fits(name: str, sessions: Sequence[Session], split: str = "all",
                    ) -> AsyncIterator[tuple[list[dict[str, Any]], FittedCall, int]]:
    """Every late call (`late_calls`) of `split`'s sessions with at least one character:
    the messages sent, the engine's fitted call and their characters. Every call of every
    session is fitted, in order, so that a late one meets the session state a client's
    would have left; one engine (shipped config) for all, closed at the end."""
    with engine_for(Settings()) as engine:
        for session in sessions:
            calls = session_calls(session)
            late = late_calls(len(calls))
            headers = {"x-ctxgate-session-id": f"{name}:{session.id}"}
            for k, (sent, _) in enumerate(calls):
                body = call_request(session, sent)
                fitted = await engine.fit(body, CallContext(tenant=TENANT, trace_id=f"l{k}",
                                                            headers=headers))
                total = call_chars(body["messages"])
                if late[k] and total and split in ("all", session.split):
                    yield body["messages"], fitted, total


def _method_figures(
    prefix: Sequence[Mapping[str, Any]],
    forwarded: Sequence[Mapping[str, Any]],
    needed: set[str],
    previous: list[str] | None,
) -> tuple[dict[str, Any], list[str]]:
    ser = serialized(forwarded)
    figures = {
        "reduction": reduction(prefix, forwarded),
        "recall": recall(needed, forwarded),
        "size": sum(len(s) for s in ser),
        "cached": cached_chars(previous, ser),
    }
    return figures, ser


async def fit_in_format(
    engine: ContextEngine, body: dict[str, Any], call: CallContext, wire_format: str
) -> tuple[FittedCall, list[dict[str, Any]], list[dict[str, Any]]]:
    """The chat call `body` sent in `wire_format` (converted, fitted through its adapter,
    rendered back): the fit, and the sent and forwarded requests read as chat messages."""
    if wire_format == "chat":
        fitted = await engine.fit(body, call)
        return fitted, body["messages"], fitted.body["messages"]
    wire = WIRE_FORMATS[wire_format]
    sent = CONVERTERS[wire_format](body)
    fitted, forwarded = await fit_as(engine, wire, sent, call)
    return (fitted, unmarked(wire.view(sent).body["messages"]),
            unmarked(wire.view(forwarded).body["messages"]))


def first_change(previous: Sequence[Mapping[str, Any]],
                 current: Sequence[Mapping[str, Any]]) -> int | None:
    """The index of the first message of `previous` that `current` does not repeat, None
    when `current` starts with all of `previous`."""
    for i, message in enumerate(previous):
        if i >= len(current) or current[i] != message:
            return i
    return None


def breaks_before(previous_sent: Sequence[Mapping[str, Any]],
                  sent: Sequence[Mapping[str, Any]],
                  previous_forwarded: Sequence[Mapping[str, Any]],
                  forwarded: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the forwarded request changes a message of the previous forwarded one before
    the first message the client itself changed in its own request (none: the client's
    request repeats its previous one, so any change of the forwarded prefix counts). Message
    indexes are compared as they are: a message the engine left out moves its break earlier
    (counted against the engine)."""
    engine = first_change(previous_forwarded, forwarded)
    client = first_change(previous_sent, sent)
    return engine is not None and (client is None or engine < client)


async def replay_session(
    engine: ContextEngine, session: Session, *, corpus: str, wire_format: str = "chat",
    system_results: bool = False,
) -> list[dict[str, Any]]:
    """Per call: the session's position, the needed values and each method's figures
    (`system_results`: mid-chat system messages count as sources, not the issue's rule)."""
    needed_of = needed_with_system_results if system_results else needed_values
    calls = session_calls(session)
    late = late_calls(len(calls))
    headers = {"x-ctxgate-session-id": f"{corpus}:{session.id}"}
    previous: dict[str, list[str] | None] = {}
    last_forwarded: list[Mapping[str, Any]] | None = None
    last_sent: list[Mapping[str, Any]] | None = None
    records = []
    for k, (sent_messages, reply) in enumerate(calls):
        body = call_request(session, sent_messages)
        start = time.perf_counter()
        fitted, prefix, forwarded = await fit_in_format(
            engine, body, CallContext(tenant=TENANT, trace_id=f"{corpus}-{k}", headers=headers),
            wire_format,
        )
        seconds = time.perf_counter() - start
        needed = needed_of(reply, prefix)
        methods: dict[str, Any] = {}
        candidates = {"none": prefix, "ctxgate": forwarded}
        candidates.update({f"keep-{n}": mask_keep(prefix, n) for n in MASK_KEEPS})
        for name, sent in candidates.items():
            methods[name], previous[name] = _method_figures(
                prefix, sent, needed, previous.get(name)
            )
        dropped = sum(d.tokens_before - d.tokens_after for d in fitted.drops)
        records.append(
            {
                "session": session.id,
                "split": session.split,
                "call": k,
                "calls": len(calls),
                "late": late[k],
                "needed": len(needed),
                "methods": methods,
                "engine": {
                    "class": fitted.task_class,
                    "ms": 1000 * seconds,
                    "tokens_before": fitted.tokens_before,
                    "tokens_after": fitted.tokens_after,
                    "droplog_ok": dropped == fitted.tokens_before - fitted.tokens_after,
                    "extends_previous": None
                    if last_forwarded is None
                    else list(forwarded[: len(last_forwarded)]) == last_forwarded,
                    # the client's own request repeats its previous one (always, for the
                    # prefixes of one chat; not where it edited an earlier turn)
                    "client_extends_previous": None
                    if last_sent is None
                    else list(prefix[: len(last_sent)]) == last_sent,
                    "breaks_before_client": None
                    if last_sent is None or last_forwarded is None
                    else breaks_before(last_sent, prefix, last_forwarded, forwarded),
                    "engine_prefix_stable": fitted.prefix_stable,
                },
            }
        )
        last_forwarded = list(forwarded)
        last_sent = list(prefix)
    return records


async def replay_corpus(
    engine: ContextEngine, sessions: Sequence[Session], *, corpus: str,
    wire_format: str = "chat", system_results: bool = False,
) -> list[dict[str, Any]]:
    records = []
    for session in sessions:
        records += await replay_session(engine, session, corpus=corpus,
                                        wire_format=wire_format,
                                        system_results=system_results)
    return records


def sample_calls(sessions: Sequence[Session], per_split: int) -> list[tuple[Session, int]]:
    """Up to `per_split` calls of each half, deterministic and spread over session positions:
    all calls ordered by relative position in their session (ties by a hash), then evenly
    spaced picks. A call is `(session, k)`: the k-th of `session_calls(session)`."""
    out: list[tuple[Session, int]] = []
    if per_split <= 0:
        return out
    for split in ("tune", "holdout"):
        calls = []
        for s in sessions:
            if s.split != split:
                continue
            n = len(session_calls(s))
            for k in range(n):
                tie = hashlib.blake2b(f"{s.id}:{k}".encode(), digest_size=4).hexdigest()
                calls.append(((k + 1) / n, tie, s, k))
        calls.sort(key=lambda c: (c[0], c[1]))
        if len(calls) > per_split:
            step = len(calls) / per_split
            calls = [calls[int(step * j + step / 2)] for j in range(per_split)]
        out += [(c[2], c[3]) for c in calls]
    return out


def _message_tokens(
    engine: ContextEngine, body: Mapping[str, Any], encoding: str, memo: dict[Any, Any]
) -> tuple[int, list[int], int]:
    """The engine's count of a call: base tokens, tokens per message, pinned tokens."""
    parsed = parse_request(body, engine.counter, encoding, memo)
    sizes = [0] * len(body["messages"])
    pinned = parsed.base_tokens
    for item in parsed.items:
        sizes[item.message_index] += item.tokens
        pinned += item.tokens if item.pinned else 0
    return parsed.base_tokens, sizes, pinned


async def budget_call(
    engine: ContextEngine,
    session: Session,
    k: int,
    *,
    corpus: str,
    memo: dict[Any, Any],
    fractions: Sequence[float] = BUDGET_FRACTIONS,
) -> dict[str, Any]:
    """Call k of the session under budgets of each fraction of its size, as a new session's
    first call."""
    sent, reply = session_calls(session)[k]
    body = call_request(session, sent)
    prefix = body["messages"]
    end = len(prefix)  # its position in the chat, for a session of prefixes
    needed = needed_values(reply, prefix)
    encoding = engine.models.lookup(body.get("model")).encoding
    base, sizes, pinned = _message_tokens(engine, body, encoding, memo)
    tokens = base + sum(sizes)
    masked = {**body, "messages": mask_keep(prefix, 0)}
    _, placeholder_sizes, _ = _message_tokens(engine, masked, encoding, memo)
    record: dict[str, Any] = {
        "session": session.id,
        "split": session.split,
        "tokens": tokens,
        "pinned": pinned,
        "needed": len(needed),
    }
    for fraction in fractions:
        budget = int(fraction * tokens)
        headers = {
            "x-ctxgate-session-id": f"budget:{corpus}:{session.id}:{end}:{fraction}",
            "x-ctxgate-budget-tokens": str(max(budget, 1)),
        }
        engine_out: dict[str, Any]
        try:
            fitted = await engine.fit(
                body, CallContext(tenant=TENANT, trace_id=f"budget-{end}", headers=headers)
            )
            engine_out = {
                "size": fitted.tokens_after / tokens,
                "recall": recall(needed, fitted.body["messages"]),
                "refused": False,
            }
        except ContextBudgetExceeded:
            engine_out = {"size": None, "recall": None, "refused": True}
        fit = plain_fit(prefix, budget, base, sizes, placeholder_sizes)
        if fit is None:
            plain = {"size": None, "recall": None, "refused": True}
        else:
            fit_base, fit_sizes, _ = _message_tokens(
                engine, {**body, "messages": fit}, encoding, memo
            )
            plain = {
                "size": (fit_base + sum(fit_sizes)) / tokens,
                "recall": recall(needed, haystack(fit)),
                "refused": False,
            }
        record[str(fraction)] = {
            "budget": budget,
            "slack": pinned < budget,
            "slack10": pinned <= budget - 0.1 * tokens,
            "engine": engine_out,
            "plain": plain,
        }
    return record


async def budget_calls(
    engine: ContextEngine,
    sessions: Sequence[Session],
    *,
    corpus: str,
    per_split: int,
    fractions: Sequence[float] = BUDGET_FRACTIONS,
) -> list[dict[str, Any]]:
    memo: dict[Any, Any] = {}
    return [
        await budget_call(engine, s, k, corpus=corpus, memo=memo, fractions=fractions)
        for s, k in sample_calls(sessions, per_split)
    ]
