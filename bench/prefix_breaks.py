"""Which calls of a replayed corpus break the cached prefix, and what broke it: the detail
behind the issue-7 yardstick's "prefix stable".

The yardstick counts a call (not a session's first) as prefix stable when its forwarded
messages start with the previous call's forwarded messages (`bench/corpus_run.py`). For every
call that does not, this lists the first forwarded message that differs, the drop events new
to this call on messages the previous call already sent (`stage:action:reason`: what
rewrote an earlier part of the request), whether the session's aging-step count rose (a step
against `max_step_share`; a counted run's tail rewrite does not raise it) and the calls
since the session's previous break. The summary counts the breaks by cause.

A session recorded per call (`bench/corpora.py`) is replayed as its calls were sent: a break
is then also where the client changed its own earlier turns (`bench/figures.py`'s "prefix
stable up to the client's break" leaves those out).

`python -m bench.prefix_breaks --corpora /tmp/gen51 --corpus mint-gpt [--split tune]
[--json OUT]`; `--corpus synthetic` replays the replay's synthetic sessions (3 × 100 calls
and one of 300).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import corpora
from bench.corpora import CORPORA, Session, session_calls
from bench.corpus_run import TENANT, call_request
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.replay import engine_for
from gateway.observability.droplog import DropEvent
from gateway.settings import Settings

# a drop event as a break compares it: the same decision on the same item, same size
Event = tuple[str, str, str, str, int, int | None]


@dataclass(frozen=True)
class Break:
    session: str
    split: str
    call: int  # the call's position in its session (0: the first)
    calls: int  # the session's calls
    first: int  # the first forwarded message that differs from the previous call's
    causes: tuple[str, ...]  # `stage:action:reason` new on messages the previous call sent
    counted: bool  # the session's aging-step count rose on this call
    since: int | None  # calls since the session's previous break (None: its first)


def first_change(previous: Sequence[Mapping[str, Any]],
                 forwarded: Sequence[Mapping[str, Any]]) -> int | None:
    """The index of the first message of `previous` that `forwarded` does not repeat, None
    when `forwarded` starts with all of `previous` (the call is prefix stable)."""
    for i, message in enumerate(previous):
        if i >= len(forwarded) or forwarded[i] != message:
            return i
    return None


def events(drops: Sequence[DropEvent]) -> set[Event]:
    return {(d.stage, d.action, d.reason, d.item_id, d.tokens_after, d.message_index)
            for d in drops}


def new_causes(before: set[Event], after: set[Event], sent: int) -> tuple[str, ...]:
    """The `stage:action:reason` of the events in `after` not in `before` on the first `sent`
    messages of the client's request (those the previous call sent too), sorted."""
    return tuple(sorted({f"{e[0]}:{e[1]}:{e[2]}" for e in after - before
                         if e[5] is not None and e[5] < sent}))


async def session_breaks(engine: ContextEngine, session: Session, corpus: str,
                         ) -> tuple[int, list[Break]]:
    """The session replayed call by call as a live session: its calls after the first and
    the breaks among them."""
    calls = session_calls(session)
    call = CallContext(tenant=TENANT, trace_id=corpus,
                       headers={"x-ctxgate-session-id": f"{corpus}:{session.id}"})
    previous: list[Any] | None = None
    before: set[Event] = set()
    steps = 0
    last_break: int | None = None
    breaks = []
    for k, (sent, _) in enumerate(calls):
        fitted = await engine.fit(call_request(session, sent), call)
        forwarded = fitted.body["messages"]
        after = events(fitted.drops)
        now = (await engine.sessions.load(TENANT, fitted.session_id)).steps
        first = None if previous is None else first_change(previous, forwarded)
        if first is not None:
            breaks.append(Break(session.id, session.split, k, len(calls), first,
                                new_causes(before, after, len(calls[k - 1][0])), now > steps,
                                None if last_break is None else k - last_break))
            last_break = k
        previous, before, steps = list(forwarded), after, now
    return max(0, len(calls) - 1), breaks


def load(corpus: str, root: Path) -> list[Session]:
    if corpus == "synthetic":  # as `bench/replay.py` replays them
        return ([corpora.synthetic_session(seed) for seed in range(3)]
                + [corpora.synthetic_session(0, 300)])
    return corpora.load(corpus, root)


def summary(corpus: str, calls: Mapping[str, int], breaks: Sequence[Break]) -> list[str]:
    """Lines: prefix stable per split, then the breaks by cause and by whether counted."""
    lines = []
    for split in sorted(calls):
        n = sum(1 for b in breaks if b.split == split)
        share = 100 * (1 - n / calls[split]) if calls[split] else 100.0
        lines.append(f"{corpus} {split}: {calls[split]} calls after a session's first, "
                     f"{n} breaks, prefix stable {share:.2f}%")
    by_cause = Counter((" + ".join(b.causes) or "(no new event)", b.counted) for b in breaks)
    for (cause, counted), n in by_cause.most_common():
        lines.append(f"  {n:6d}  {'step' if counted else 'no step'}  {cause}")
    gaps = Counter(min(b.since, 10) for b in breaks if b.since is not None)
    lines.append("  calls since the session's previous break (10: 10 or more): "
                 + ", ".join(f"{gap}: {n}" for gap, n in sorted(gaps.items())))
    return lines


async def run(corpus: str, root: Path, split: str) -> tuple[dict[str, int], list[Break]]:
    with engine_for(Settings()) as engine:
        calls: Counter[str] = Counter()
        breaks: list[Break] = []
        for session in load(corpus, root):
            if split not in ("all", session.split):
                continue
            n, found = await session_breaks(engine, session, corpus)
            calls[session.split] += n
            breaks += found
    return dict(calls), breaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=CORPORA)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="all")
    parser.add_argument("--json", type=Path, help="every break, one object each")
    args = parser.parse_args()
    calls, breaks = asyncio.run(run(args.corpus, args.corpora, args.split))
    print("\n".join(summary(args.corpus, calls, breaks)))
    if args.json:
        args.json.write_text(json.dumps([asdict(b) for b in breaks]))


if __name__ == "__main__":
    main()
