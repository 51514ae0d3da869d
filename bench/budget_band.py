"""The budget-mode calls that land out of the band, one line each (issue 7: at 80% of a call
the forwarded size within [70%, 80%]), with what the plain fit does on the same call.

Samples calls as `bench/replay.py`'s budget mode does (`bench.corpus_run.budget_calls`) and
lists those whose pinned content leaves 10 points of room but whose forwarded size is out of
[budget − 10 points, budget], or whose recall is under the plain fit's.

    python -m bench.budget_band [--corpora DIR] [--corpus NAME ...] [--per-split 60]
        [--budget 0.8 --budget 0.6 ...]  (default: 80% and 60%, as `bench/replay.py`)
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import corpora
from bench.corpus_run import BUDGET_FRACTIONS, budget_calls
from gateway.context.replay import engine_for
from gateway.settings import Settings


def misses(
    record: dict[str, Any], fractions: Sequence[float] = BUDGET_FRACTIONS
) -> list[str]:
    """One line per budget of `record` (a `budget_call` record) that misses the target."""
    out = []
    for fraction in fractions:
        c = record[str(fraction)]
        size, plain = c["engine"]["size"], c["plain"]
        if not c["slack10"]:
            continue
        in_band = size is not None and fraction - 0.1 - 1e-9 <= size <= fraction + 1e-9
        under = record["needed"] and (c["engine"]["recall"] or 0) < (plain["recall"] or 0)
        if not in_band or under:
            out.append(
                f"{record['session']} at {fraction:.0%}: {record['tokens']} tokens, pinned "
                f"{record['pinned'] / record['tokens']:.1%}, sent {size or 0:.1%} (plain "
                f"{plain['size'] or 0:.1%}), recall {c['engine']['recall']} (plain "
                f"{plain['recall']})"
            )
    return out


def summary(records: list[dict[str, Any]], fraction: float) -> str:
    """In band, mean recall (engine / plain fit, calls with needed values) and refusals at
    one budget, over the calls with 10 points of room."""
    rows = [(r, r[str(fraction)]) for r in records if r[str(fraction)]["slack10"]]
    band = sum(
        c["engine"]["size"] is not None
        and fraction - 0.1 - 1e-9 <= c["engine"]["size"] <= fraction + 1e-9
        for _, c in rows
    )
    needed = [c for r, c in rows if r["needed"]]
    engine = sum(c["engine"]["recall"] or 0 for c in needed) / max(len(needed), 1)
    plain = sum(c["plain"]["recall"] or 0 for c in needed) / max(len(needed), 1)
    refused = sum(bool(c["engine"]["refused"]) for _, c in rows)
    return (
        f"   {fraction:.0%}: in band {band}/{len(rows)}, recall {engine:.1%} (plain fit "
        f"{plain:.1%}, {len(needed)} calls), refused {refused}"
    )


async def run(
    names: list[str], root: Path, per_split: int, fractions: Sequence[float]
) -> None:
    with engine_for(Settings()) as engine:
        for name in names:
            records = await budget_calls(
                engine, corpora.load(name, root), corpus=name, per_split=per_split,
                fractions=fractions,
            )
            lines = [line for r in records for line in misses(r, fractions)]
            room = sum(r[str(f)]["slack10"] for r in records for f in fractions)
            print(f"## {name}: {len(lines)} of {room} calls × budgets with 10 points of room")
            print("\n".join(lines))
            for fraction in fractions:
                print(summary(records, fraction))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=corpora.CORPORA)
    parser.add_argument("--corpus", action="append", metavar="NAME",
                        help="swe-agent, webchorearena, agentdojo, intercode, or a folder "
                        "under --corpora holding a sessions.jsonl (a converted corpus)")
    parser.add_argument("--per-split", type=int, default=60, help="calls sampled a split")
    parser.add_argument("--budget", action="append", type=float, dest="budgets",
                        help="a budget as a fraction of the call (repeatable; default 0.8, 0.6)")
    args = parser.parse_args()
    asyncio.run(run(args.corpus or ["swe-agent", *corpora.JSONL_CORPORA], args.corpora,
                    args.per_split, tuple(args.budgets or BUDGET_FRACTIONS)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
