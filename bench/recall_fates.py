"""Which of the engine's mechanisms took each value a call lost: a split's lost recall by fate.

Replays a split as `bench.recall_misses` does and keeps each call's drop events. A lost value
may have been in several earlier messages; it was lost once the last of them lost it, so it
is put down to the mildest fate among them (`MILDEST_FIRST`): sent as a repeat's pointer, as a
digest, as a placeholder (a mask batch, a finished task's mask), folded into a gateway note,
or dropped (the budget's cut). On a queue corpus the value is also classed as the current
run's or an earlier run's (`bench.recall_seen`). Per fate and run it prints the points of the
yardstick's recall lost (mean over the calls with needed values of lost / needed).

`python -m bench.recall_fates --corpora /tmp/toolathlon --corpus
toolathlon-claude-4.5-sonnet-queue --split tune`. The fold is the last fate an old exchange
meets: with `fold_from_turns` off in a copy of the config (`CTXGATE_CONFIG`), the same run
shows what the folded messages had become before.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from bench import corpora
from bench.corpus_run import TENANT, request
from bench.recall_misses import missing
from bench.recall_seen import run_starts
from bench.yardstick import call_ends, haystack, needed_values, searchable_text
from gateway.context.engine import CallContext
from gateway.context.fold import FOLD_REASON, TURNS_REASON
from gateway.context.replay import build_engine
from gateway.observability.droplog import DropEvent
from gateway.settings import Settings

MILDEST_FIRST = ("sent", "pointer", "digest", "placeholder", "folded", "dropped")


def fate(events: Sequence[DropEvent]) -> str:
    """What became of one sent message, from its items' drop events: the severest of them
    (`sent` when none: the value's text went as sent, or the yardstick could not see it)."""
    names = set()
    for e in events:
        if e.reason in (FOLD_REASON, TURNS_REASON):
            names.add("folded")
        elif e.action == "mask":
            names.add("placeholder")
        elif e.action == "dedup":
            names.add("pointer")
        elif e.action == "drop":
            names.add("dropped")
        else:
            names.add("digest")
    return max(names, key=MILDEST_FIRST.index, default="sent")


def mildest(fates: Sequence[str]) -> str:
    """The fate a value lost in all these messages is put down to: the mildest of theirs."""
    return min(fates, key=MILDEST_FIRST.index, default="sent")


async def run(root: Path, name: str, split: str) -> dict[tuple[str, str], float]:
    sessions = [s for s in corpora.load(name, root) if split in ("all", s.split)]
    runs = corpora.load(name.removesuffix("-queue"), root) if name.endswith("-queue") else []
    engine = build_engine(Settings())
    points: dict[tuple[str, str], float] = defaultdict(float)
    calls = 0
    try:
        for session in sessions:
            starts = run_starts(session, runs) if runs else [0]
            headers = {"x-ctxgate-session-id": f"{name}:{session.id}"}
            for k, end in enumerate(call_ends(session.messages)):
                body = request(session, end)
                fitted = await engine.fit(body, CallContext(tenant=TENANT, trace_id=f"f{k}",
                                                            headers=headers))
                needed = needed_values(session.messages[end], body["messages"])
                if not needed:
                    continue
                calls += 1
                lost = missing(needed, fitted.body["messages"])
                if not lost:
                    continue
                seen = haystack(session.messages[starts[bisect.bisect_right(starts, end) - 1]:end])
                by_message: dict[int, list[DropEvent]] = defaultdict(list)
                for event in fitted.drops:
                    if event.message_index is not None:
                        by_message[event.message_index].append(event)
                for value in lost:
                    where = mildest([fate(by_message[i]) for i, m in enumerate(body["messages"])
                                     if m.get("role") != "system"
                                     and value in searchable_text(m)])
                    side = "current run" if value in seen else "earlier run"
                    print(f"{session.id} call {k}: {side}, {where}: {value[:80]!r}")
                    points[(where, side)] += 100 / len(needed)
    finally:
        if engine.embedder is not None:
            engine.embedder.close()
    return {key: p / max(calls, 1) for key, p in points.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, required=True)
    parser.add_argument("--corpus", required=True, metavar="NAME")
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="all")
    args = parser.parse_args()
    points = asyncio.run(run(args.corpora, args.corpus, args.split))
    print(f"# {args.corpus} ({args.split}): points of recall lost, by fate and run")
    for (where, side), p in sorted(points.items(), key=lambda kv: -kv[1]):
        print(f"{where} | {side} | {p:.3f}")
    print(f"total | | {sum(points.values()):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
