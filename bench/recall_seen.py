"""A queue corpus's recall counting only what the recorded agent saw: a supplementary figure
beside the issue-7 yardstick's recall, not a change of it.

A queue is separate recorded runs joined one after another (`bench.chat_corpus.join_queues`,
nothing added), so a value the agent of a later run typed can occur earlier in the joined
session only in an earlier run, which that agent never had in its context. The yardstick
counts such a value as needed (its characters occur earlier); this module splits each call's
needed values into those that occur in the *current run* (from its first message up to the
call) and those that occur only before it (*earlier-run* values), and reports per split:

- the yardstick's recall (mean over calls with needed values, as `bench.recall_misses`);
- the *current-run recall*: the same mean counting only the current run's values (calls with
  none left out);
- the points of the yardstick's recall lost on earlier-run values and on current-run values
  (mean over the yardstick's calls of lost / needed; the two add up to 100 − recall).

Run boundaries come from the runs folder beside the queue folder (the queue's name without
`-queue`): each run's messages after its system prompt are found, in order, in the queue
session (`run_starts`). That is the queue builder's own cut, read back exactly; the engine's
task boundary (a user message after a final answer) cannot stand in for it, since a
customer-service run has a user message after every answer.

`python -m bench.recall_seen --corpora /tmp/toolathlon --corpus toolathlon-claude-4.5-sonnet-queue`
(`--misses` also lists the current-run values each call misses, as `bench.recall_misses` does).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import corpora
from bench.corpora import Session
from bench.recall_misses import Call, calls, describe
from bench.yardstick import haystack, text_content
from gateway.context.replay import engine_for
from gateway.settings import Settings

SPLITS = ("tune", "holdout")


def _key(message: dict[str, Any]) -> str:
    """A message as the queue builder copies it: tool-call ids may be renamed (`CallIds`),
    so a call reads as its function only, and a tool message as its content."""
    calls_ = [c.get("function") for c in message.get("tool_calls") or ()]
    return json.dumps([message.get("role"), text_content(message.get("content")), calls_],
                      sort_keys=True)


def run_starts(queue: Session, runs: Sequence[Session]) -> list[int]:
    """Indexes of the queue session's messages at which each joined run starts: at each
    position, the run whose messages after its system prompt follow there, or its whole
    messages with the system prompt as a user turn (a queue without a system message whose
    runs each had their own, `bench.dacode`); the longest, should two match. Raises
    ValueError where no run of `runs` matches."""
    by_first: dict[str, list[list[str]]] = {}
    for run in runs:
        head, *rest = run.messages
        bodies = ([rest, [{**head, "role": "user"}, *rest]] if head.get("role") == "system"
                  else [run.messages])
        for body in bodies:
            keys = [_key(m) for m in body]
            by_first.setdefault(keys[0], []).append(keys)
    msgs = queue.messages
    keys = [_key(m) for m in msgs]
    at = 1 if msgs and msgs[0].get("role") == "system" else 0
    starts = []
    while at < len(msgs):
        fits = [r for r in by_first.get(keys[at], ()) if keys[at:at + len(r)] == r]
        if not fits:
            raise ValueError(f"{queue.id}: no run starts at message {at}")
        starts.append(at)
        at += max(len(r) for r in fits)
    return starts


@dataclass
class CallSplit:
    """One call's needed values split by where they occur, and how many of each were lost."""

    split: str
    needed: int
    lost: int
    current: int  # needed values that occur in the current run
    current_lost: int


@dataclass
class Figures:
    calls: int
    recall: float
    current_calls: int
    current_recall: float
    earlier_points: float
    current_points: float


def figures(records: Sequence[CallSplit]) -> Figures:
    """The yardstick's recall, the current-run recall and the points of the yardstick's
    recall lost on earlier-run and on current-run values (percent)."""
    needy = [r for r in records if r.needed]
    current = [r for r in needy if r.current]

    def mean(values: list[float], empty: float) -> float:
        return 100 * sum(values) / len(values) if values else empty

    return Figures(
        calls=len(needy),
        recall=mean([1 - r.lost / r.needed for r in needy], 100.0),
        current_calls=len(current),
        current_recall=mean([1 - r.current_lost / r.current for r in current], 100.0),
        earlier_points=mean([(r.lost - r.current_lost) / r.needed for r in needy], 0.0),
        current_points=mean([r.current_lost / r.needed for r in needy], 0.0),
    )


def split_call(session: Session, starts: Sequence[int], call: Call
                ) -> tuple[int, list[str], CallSplit]:
    """The start of the run a call belongs to, the current-run values it lost, and its
    record: a needed value is the current run's when it occurs in the run's messages before
    the call (from the run's first message, its task statement)."""
    start = starts[bisect.bisect_right(starts, call.end) - 1]
    seen = haystack(session.messages[start:call.end])
    current = {v for v in call.needed if v in seen}
    lost_current = [v for v in call.lost if v in current]
    return start, lost_current, CallSplit(session.split, len(call.needed), len(call.lost),
                                          len(current), len(lost_current))


async def replay(name: str, sessions: Sequence[Session], runs: Sequence[Session],
                 split: str, show: bool) -> list[CallSplit]:
    """Every call of `sessions` (those of `split`, or all) through one engine on the shipped
    config, split by run; with `show`, each current-run value a call misses is printed."""
    with engine_for(Settings()) as engine:
        out = []
        for session in sessions:
            if split not in ("all", session.split):
                continue
            starts = run_starts(session, runs)
            async for call in calls(engine, session, name):
                start, lost_current, record = split_call(session, starts, call)
                out.append(record)
                if show and lost_current:
                    print(f"{session.id} call {call.k} (run from message {start}): "
                          f"{len(lost_current)}/{record.current} current-run values missing")
                    for value in lost_current:
                        print(f"  {value!r}")
                        for line in describe(value, call.sent, call.forwarded):
                            print(line)
    return out


def table(name: str, records: Sequence[CallSplit]) -> list[str]:
    lines = [f"# {name}: split | calls | yardstick recall | current-run calls | "
             "current-run recall | points lost: earlier-run / current-run"]
    for split in (*SPLITS, "all"):
        picked = [r for r in records if split in ("all", r.split)]
        if not picked:
            continue
        f = figures(picked)
        lines.append(f"{split} | {f.calls} | {f.recall:.2f} | {f.current_calls} | "
                     f"{f.current_recall:.2f} | {f.earlier_points:.2f} / {f.current_points:.2f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, required=True)
    parser.add_argument("--corpus", required=True, metavar="NAME",
                        help="a queue folder under --corpora (its runs folder beside it)")
    parser.add_argument("--split", choices=("all", *SPLITS), default="all")
    parser.add_argument("--misses", action="store_true",
                        help="list each current-run value a call misses")
    args = parser.parse_args()
    queue = corpora.load(args.corpus, args.corpora)
    runs = corpora.load(args.corpus.removesuffix("-queue"), args.corpora)
    records = asyncio.run(replay(args.corpus, queue, runs, args.split, args.misses))
    print("\n".join(table(args.corpus, records)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
