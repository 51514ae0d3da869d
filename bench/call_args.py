"""What rewriting old tool-call arguments adds on top of the engine (gateway/context/calls.py).

Replays each corpus through the engine as `bench/replay.py` does and rewrites the forwarded
calls' tool-call arguments afterwards: repeats of an earlier call's arguments as pointers
(`repeated_calls`; the engine does this itself with `cluster.on_arrival`, at 120
characters: the rows at 40 show what a lower threshold adds), on top of which long string
values of calls at least A turns old are cut (`cut_arguments`, values a later call of the
same request repeats kept), or those of calls whose tool result the engine sends rewritten.
Measured with the yardstick: late reduction, recall (all calls), cost saved @0.1 with
prompt caching, and the share of calls whose forwarded serialization extends the previous
call's (the yardstick's view of prefix stability). Cuts lose the first copy the pointers
name: recall falls to 68-85% on intercode, so the engine does not cut.

    .venv/bin/python -m bench.call_args [--corpus NAME ...] [--split tune|holdout|all]
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import corpora
from bench.baselines import mask_keep
from bench.corpus_run import TENANT, request
from bench.yardstick import (
    billed,
    cached_chars,
    call_chars,
    call_ends,
    late_calls,
    needed_values,
    recall,
    serialized,
    text_content,
)
from gateway.context.calls import cut_arguments, repeated_calls
from gateway.context.engine import CallContext
from gateway.context.replay import build_engine
from gateway.settings import Settings

Message = Mapping[str, Any]
RATE = 0.1


def with_arguments(msg: Message, new: Mapping[int, str]) -> Message:
    calls = [
        {**c, "function": {**c["function"], "arguments": new[k]}} if k in new else c
        for k, c in enumerate(msg.get("tool_calls") or ())
    ]
    return {**msg, "tool_calls": calls}


def rewrite(messages: Sequence[Message], min_chars: int, cut_age: int | None,
            cut_chars: int = 80) -> list[Message]:
    """The forwarded messages with repeated arguments as pointers and, when `cut_age` is
    given, long values of calls that old cut (values a later call uses kept)."""
    new = repeated_calls(messages, min_chars)
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if cut_age is not None:
        for n, i in enumerate(turns[: max(len(turns) - cut_age, 0)]):
            later = {c["function"].get("arguments", "") for j in turns[n + 1:]
                     for c in messages[j].get("tool_calls") or ()}
            for k, call in enumerate(messages[i].get("tool_calls") or ()):
                if (i, k) in new:
                    continue
                raw = call["function"].get("arguments", "")
                keep = {s for s in later if len(s) < 2000}  # whole argument strings reused
                cut = None if raw in keep else cut_arguments(raw, cut_chars)
                if cut is not None:
                    new[(i, k)] = cut
    by_message: dict[int, dict[int, str]] = {}
    for (i, k), text in new.items():
        by_message.setdefault(i, {})[k] = text
    return [with_arguments(m, by_message[i]) if i in by_message else m
            for i, m in enumerate(messages)]


VARIANTS: dict[str, tuple[int, int | None] | None] = {
    "ctxgate": None,
    "+repeats >=40": (40, None),
    "+repeats >=40, cut age>=5": (40, 5),
    "+repeats >=40, cut age>=3": (40, 3),
}
DIGESTED = {"ctxgate (engine)": 0, "engine + cut when output rewritten >80": 80,
            "engine + cut when output rewritten >200": 200}


def cut_digested(messages: Sequence[Message], max_chars: int) -> list[Message]:
    """Long values of calls whose tool result the engine sends rewritten, cut."""
    rewritten = {m.get("tool_call_id") for m in messages if (m.get("role") == "tool"
                 and text_content(m.get("content")).startswith(("[ctxgate", "Old env")))
                 or (m.get("role") == "tool" and "[omitted text mentions" in
                     text_content(m.get("content")))}
    out = []
    for m in messages:
        new = {}
        for k, c in enumerate(m.get("tool_calls") or ()):
            if c.get("id") in rewritten and max_chars:
                cut = cut_arguments(c["function"].get("arguments", ""), max_chars)
                if cut is not None:
                    new[k] = cut
        out.append(with_arguments(m, new) if new else m)
    return out


async def measure(name: str, sessions: list[corpora.Session], split: str) -> dict[str, Any]:
    engine = build_engine(Settings())
    methods = [*VARIANTS, *DIGESTED, "keep-1", "none"]
    late = {m: [0.0, 0] for m in methods}
    rec = {m: [0.0, 0] for m in methods}
    cost = dict.fromkeys(methods, 0.0)
    stable = dict.fromkeys(methods, 0)
    calls = 0
    for session in sessions:
        ends = call_ends(session.messages)
        is_late = late_calls(len(ends))
        headers = {"x-ctxgate-session-id": f"{name}:{session.id}"}
        previous: dict[str, list[str] | None] = dict.fromkeys(methods)
        for k, end in enumerate(ends):
            body = request(session, end)
            fitted = await engine.fit(body, CallContext(tenant=TENANT, trace_id=f"a{k}",
                                                        headers=headers))
            if split != "all" and session.split != split:
                continue
            prefix, forwarded = body["messages"], fitted.body["messages"]
            needed = needed_values(session.messages[end], prefix)
            total = call_chars(prefix)
            calls += 1
            for m in methods:
                v = VARIANTS.get(m)
                out = (prefix if m == "none" else mask_keep(prefix, 1) if m == "keep-1"
                       else cut_digested(forwarded, DIGESTED[m]) if m in DIGESTED
                       else forwarded if v is None else rewrite(forwarded, *v))
                r = recall(needed, out)
                if r is not None:
                    rec[m][0] += r
                    rec[m][1] += 1
                if is_late[k] and total:
                    late[m][0] += 1 - call_chars(out) / total
                    late[m][1] += 1
                ser = serialized(out)
                cached = cached_chars(previous[m], ser)
                cost[m] += billed(sum(len(s) for s in ser), cached, RATE)
                if previous[m] is not None and cached >= sum(len(s) for s in previous[m]):
                    stable[m] += 1
                previous[m] = ser
    if engine.embedder is not None:
        engine.embedder.close()
    return {m: {"late": 100 * late[m][0] / max(late[m][1], 1),
                "recall": 100 * rec[m][0] / max(rec[m][1], 1),
                "cost": 100 * (1 - cost[m] / cost["none"]) if cost["none"] else 0.0,
                "extends": 100 * stable[m] / max(calls, 1)} for m in methods}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=corpora.CORPORA)
    parser.add_argument("--corpus", action="append",
                        choices=(*corpora.JSONL_CORPORA, "swe-agent"))
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="tune")
    args = parser.parse_args()
    print("| corpus | method | late reduction | recall | cost saved @0.1 | extends previous |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.corpus or (*corpora.JSONL_CORPORA, "swe-agent"):
        result = asyncio.run(measure(name, corpora.load(name, args.corpora), args.split))
        for m, f in result.items():
            print(f"| {name} | {m} | {f['late']:.1f}% | {f['recall']:.1f}% | {f['cost']:.1f}% "
                  f"| {f['extends']:.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
