"""Which needed values the engine's calls miss, and what became of the messages that carried
them: the recall detail behind the issue-7 yardstick's figure.

For every call of a replayed corpus whose recall is below 1, prints each missing value, the
earlier messages it occurred in (index, role, a window around the value) and what the engine
forwarded in their place (the start of the forwarded message at the same position, when the
call kept the message count; otherwise the whole forwarded text is searched for a line of it).

`python -m bench.recall_misses --corpora ../shared/corpora --corpus swe-agent --split holdout`
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import corpora
from bench.corpora import CORPORA, CORPUS_NAMES, Session
from bench.corpus_run import TENANT, request
from bench.yardstick import call_ends, haystack, needed_values, searchable_text
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.replay import engine_for
from gateway.settings import Settings

WINDOW = 80


def _window(text: str, value: str) -> str:
    at = text.find(value)
    return text[max(0, at - WINDOW): at + len(value) + WINDOW].replace("\n", "⏎")


def missing(needed: set[str], forwarded: Sequence[Mapping[str, Any]]) -> list[str]:
    """The needed values that no forwarded message carries."""
    text = haystack(forwarded)
    return sorted(v for v in needed if v not in text)


def describe(
    value: str, sent: Sequence[Mapping[str, Any]], forwarded: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Where `value` was in the sent call and what stands there in the forwarded one."""
    lines = []
    for i, m in enumerate(sent):
        text = searchable_text(m)
        if m.get("role") == "system" or value not in text:
            continue
        lines.append(f"    sent[{i}] {m.get('role')} ({len(text)} ch): …{_window(text, value)}…")
        if len(forwarded) == len(sent):
            out = searchable_text(forwarded[i])
            lines.append(f"    fwd[{i}] ({len(out)} ch): {out[:300].replace(chr(10), '⏎')}")
    return lines


@dataclass
class Call:
    """One replayed call: its index among the session's calls, the message it ends before,
    the messages sent and forwarded, the needed values and those no forwarded message carries."""

    k: int
    end: int
    sent: list[dict[str, Any]]
    forwarded: list[dict[str, Any]]
    needed: set[str]
    lost: list[str]


async def calls(engine: ContextEngine, session: Session, corpus: str) -> AsyncIterator[Call]:
    """Every call of a session fitted by `engine`, in order (the yardstick's replay)."""
    headers = {"x-ctxgate-session-id": f"{corpus}:{session.id}"}
    for k, end in enumerate(call_ends(session.messages)):
        body = request(session, end)
        fitted = await engine.fit(body, CallContext(tenant=TENANT, trace_id=f"m{k}",
                                                    headers=headers))
        forwarded = fitted.body["messages"]
        needed = needed_values(session.messages[end], body["messages"])
        yield Call(k, end, body["messages"], forwarded, needed, missing(needed, forwarded))


async def misses(
    engine: ContextEngine, session: Session, corpus: str, recalls: list[float]
) -> list[str]:
    """The report lines of one session's calls that miss a value; `recalls` gets every
    call's recall (calls that need nothing are left out, as in the yardstick)."""
    report = []
    n = len(call_ends(session.messages))
    async for call in calls(engine, session, corpus):
        k, needed, lost = call.k, call.needed, call.lost
        if needed:
            recalls.append(1 - len(lost) / len(needed))
        if not lost:
            continue
        report.append(f"{session.id} call {k}/{n}: {len(lost)}/{len(needed)} missing")
        for value in lost:
            report.append(f"  {value!r}")
            report += describe(value, call.sent, call.forwarded)
    return report


async def run(groups: dict[str, list[Session]]) -> None:
    with engine_for(Settings()) as engine:
        for name, sessions in groups.items():
            recalls: list[float] = []
            for session in sessions:
                for line in await misses(engine, session, name, recalls):
                    print(line)
            mean = sum(recalls) / len(recalls) if recalls else 1.0
            print(f"# {name}: {len(recalls)} calls need values, recall {100 * mean:.2f}%, "
                  f"{sum(r < 1 for r in recalls)} miss some")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=CORPORA)
    parser.add_argument("--corpus", action="append", metavar="NAME",
                        help=f"{', '.join(CORPUS_NAMES[:-1])}, or a JSONL folder under --corpora")
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="all")
    args = parser.parse_args()
    groups = {}
    for name in args.corpus or CORPUS_NAMES[:-1]:
        group = corpora.load(name, args.corpora)
        groups[name] = [s for s in group if args.split in ("all", s.split)]
    asyncio.run(run(groups))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
