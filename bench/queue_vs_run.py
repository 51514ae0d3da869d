"""A queue's lost values against the same task's own run: which of them the run keeps.

A task queue (`bench/toolathlon.py`, `-queue` folders) is its tasks' runs joined in one
session; the same runs are a folder of their own. Each call of a queue's task is the run's
call at the same offset from the task's start, so a value the queue loses there that the
run keeps is lost to the queue (earlier tasks' residue, a step share earned on earlier
tasks, the budget), and one the run loses too is the engine's whatever the queue.

Replays a split's queue sessions and, for each of their tasks, the task's run (a fresh
session each, one engine for all, the shipped config) and prints each value a queue call
lost, whether the current task's messages hold it (an earlier task's value is in no run's
history), its fate in the queue and the run's at its call (`run kept` or `run LOST <fate>`),
then the points of recall lost (as `bench.recall_fates` counts them) split by task and run.

`python -m bench.queue_vs_run --corpora /tmp/toolathlon --corpus
toolathlon-deepseek-v3.2-exp-queue --split holdout`
"""

from __future__ import annotations

import argparse
import asyncio
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from bench import corpora
from bench.corpora import Session
from bench.corpus_run import TENANT, request
from bench.recall_fates import fate, mildest
from bench.recall_misses import missing
from bench.recall_seen import _key, run_starts
from bench.yardstick import call_ends, haystack, needed_values, searchable_text
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.replay import engine_for
from gateway.observability.droplog import DropEvent
from gateway.settings import Settings


def task_runs(queue: Session, runs: Sequence[Session]) -> list[tuple[int, int, Session]]:
    """Each task of `queue` as (first message index, end index, its run): the run whose
    messages after its system prompt are the queue's from that index on."""
    starts = run_starts(queue, runs)
    out = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(queue.messages)
        keys = [_key(m) for m in queue.messages[start:end]]
        run = next(r for r in runs if [_key(m) for m in _body(r)] == keys)
        out.append((start, end, run))
    return out


def _body(run: Session) -> list[dict[str, object]]:
    return run.messages[1:] if run.messages and run.messages[0].get("role") == "system" \
        else run.messages


async def lost_fates(engine: ContextEngine, session: Session, tag: str
                     ) -> dict[int, tuple[int, dict[str, str]]]:
    """Per call (by the index of the message it answers) with needed values: how many, and
    each lost value's fate (`recall_fates.fate`, the mildest of its carriers')."""
    out: dict[int, tuple[int, dict[str, str]]] = {}
    headers = {"x-ctxgate-session-id": f"{tag}:{session.id}"}
    for k, end in enumerate(call_ends(session.messages)):
        body = request(session, end)
        fitted = await engine.fit(body, CallContext(tenant=TENANT, trace_id=f"{tag}{k}",
                                                    headers=headers))
        needed = needed_values(session.messages[end], body["messages"])
        if not needed:
            continue
        by_message: dict[int, list[DropEvent]] = defaultdict(list)
        for event in fitted.drops:
            if event.message_index is not None:
                by_message[event.message_index].append(event)
        fates = {}
        for value in missing(needed, fitted.body["messages"]):
            carriers = [i for i, m in enumerate(body["messages"])
                        if m.get("role") != "system" and value in searchable_text(m)]
            fates[value] = mildest([fate(by_message[i]) for i in carriers])
        out[end] = (len(needed), fates)
    return out


async def run(root: Path, name: str, split: str) -> dict[str, float]:
    queues = [s for s in corpora.load(name, root) if split in ("all", s.split)]
    runs = corpora.load(name.removesuffix("-queue"), root)
    with engine_for(Settings()) as engine:
        points: dict[str, float] = defaultdict(float)
        calls = 0
        for queue in queues:
            lost = await lost_fates(engine, queue, "q")
            calls += len(lost)
            for start, end, task in task_runs(queue, runs):
                offset = start - (len(task.messages) - len(_body(task)))
                alone = await lost_fates(engine, task, "r")
                for at, (needed, fates) in sorted(lost.items()):
                    if not start <= at < end:
                        continue
                    also = alone.get(at - offset, (0, {}))[1]
                    seen = haystack(queue.messages[start:at])
                    for value, where in fates.items():
                        # an earlier task's value is not in the run's history at all
                        side = "current task" if value in seen else "earlier task"
                        alike = f"run LOST {also[value]}" if value in also else "run kept"
                        print(f"{queue.id} task {task.id} call@{at}: {side}, queue {where}, "
                              f"{alike}: {value[:60]!r}")
                        kept = "run loses it too" if value in also else "run keeps it"
                        points[f"{side} | {kept}"] += 100 / needed
    return {key: p / max(calls, 1) for key, p in points.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, required=True)
    parser.add_argument("--corpus", required=True, metavar="NAME", help="a -queue folder")
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="all")
    args = parser.parse_args()
    points = asyncio.run(run(args.corpora, args.corpus, args.split))
    print(f"# {args.corpus} ({args.split}): points of recall lost, by task and run")
    for key, p in sorted(points.items(), key=lambda kv: -kv[1]):
        print(f"{key} | {p:.3f}")
    print(f"total | {sum(points.values()):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
