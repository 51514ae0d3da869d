"""The engine's cost @0.1 against masking keep-1, split into what is forwarded and what is
re-sent, by the phase of the session each call falls in (issue 7's cost target).

A call's cost is `F - (1 - rate) P` (F: characters forwarded, P: those repeating the previous
forwarded call from its start, `yardstick.cached_chars`), so the engine's cost less keep-1's is

    rate × Σ (F_engine − F_keep1)                 what is forwarded (the size term)
  + (1 − rate) × Σ (fresh_engine − fresh_keep1)   what is billed in full (the re-send term)

with fresh = F − P. Calls are classed: a session's first call, calls before its first
prefix change (`early`), the calls that change the engine's prefix (`step`) and the calls
after the first step that only append (`append`). Each step's re-send (the characters the
last call forwarded from its first change on, sent again in full) is also tabled by how
many of the client's assistant turns lie after its first change. Figures are points of
no gateway's cost @0.1 (the client's own calls billed the same way), as `bench.replay`'s.

    .venv/bin/python -m bench.cost_terms --corpora DIR --corpus NAME [--split tune]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import corpora
from bench.baselines import mask_keep
from bench.corpus_run import request
from bench.yardstick import cached_chars, call_ends, serialized
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.replay import engine_for
from gateway.settings import Settings

RATE = 0.1
PHASES = ("first", "early", "step", "append")
DEPTHS = ((1, 3), (4, 7), (8, 16), (17, None))  # assistant turns after a step's first change


@dataclass(frozen=True, slots=True)
class Call:
    """One call's characters: the client's, the engine's and keep-1's (forwarded, cached)."""

    phase: str
    client: int
    client_cached: int
    engine: int
    engine_cached: int
    keep: int
    keep_cached: int
    resent: int = 0  # a step's re-send: what the last call forwarded from its first change on
    depth: int = 0  # a step's client assistant turns from its first change on

    def size(self) -> float:
        return RATE * (self.engine - self.keep)

    def fresh(self) -> float:
        return (1 - RATE) * ((self.engine - self.engine_cached) - (self.keep - self.keep_cached))


def billed(size: int, cached: int) -> float:
    return size - (1 - RATE) * cached


async def session_calls(engine: ContextEngine, session: corpora.Session) -> list[Call]:
    """Every call of `session` through the engine and keep-1, classed by phase."""
    headers = {"x-ctxgate-session-id": f"cost-terms:{session.id}"}
    calls: list[Call] = []
    last: dict[str, list[str]] = {}
    stepped = False
    for k, end in enumerate(call_ends(session.messages)):
        body = request(session, end)
        fitted = await engine.fit(body, CallContext("bench", f"terms-{k}", headers))
        messages = body["messages"]
        now = {"client": serialized(messages), "engine": serialized(fitted.body["messages"]),
               "keep": serialized(mask_keep(messages, 1))}
        cached = {name: cached_chars(last.get(name), ser) for name, ser in now.items()}
        sizes = {name: sum(map(len, ser)) for name, ser in now.items()}
        before = last.get("engine")
        phase, resent, depth = "first", 0, 0
        if before is not None:
            broke = cached["engine"] < sum(map(len, before))
            stepped = stepped or broke
            phase = "step" if broke else "append" if stepped else "early"
            if broke:
                resent = sum(map(len, before)) - cached["engine"]
                at = next(i for i, (a, b) in enumerate(zip(before, now["engine"], strict=False))
                          if a != b)
                plan = [i for i, _ in fitted.plan] if fitted.plan else list(range(len(messages)))
                first = plan[at] if at < len(plan) else len(messages)
                depth = sum(1 for m in messages[first:] if m.get("role") == "assistant")
        calls.append(Call(phase, sizes["client"], cached["client"], sizes["engine"],
                          cached["engine"], sizes["keep"], cached["keep"], resent, depth))
        last = now
    return calls


def terms(calls: Sequence[Call]) -> dict[str, Any]:
    """The gap's terms in points of no gateway's cost @0.1: per phase (calls, size,
    re-send), per step depth (steps, re-send billed), and the totals."""
    base = sum(billed(c.client, c.client_cached) for c in calls)
    pts = (lambda x: 100 * x / base) if base else (lambda x: 0.0)
    phases: dict[str, list[float]] = {p: [0, 0.0, 0.0] for p in PHASES}
    for c in calls:
        row = phases[c.phase]
        row[0] += 1
        row[1] += pts(c.size())
        row[2] += pts(c.fresh())
    depths: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for c in calls:
        if c.phase == "step":
            lo, hi = next((lo, hi) for lo, hi in DEPTHS if hi is None or c.depth <= hi)
            row = depths[f"{lo}+" if hi is None else f"{lo}-{hi}"]
            row[0] += 1
            row[1] += pts((1 - RATE) * c.resent)
    engine = sum(billed(c.engine, c.engine_cached) for c in calls)
    keep = sum(billed(c.keep, c.keep_cached) for c in calls)
    return {"phases": phases, "depths": dict(depths),
            "engine_saved": pts(base - engine), "keep_saved": pts(base - keep),
            "gap": pts(engine - keep)}


def print_terms(name: str, split: str, sessions: int, t: dict[str, Any]) -> None:
    print(f"### {name} ({split}, {sessions} sessions): cost @{RATE} saved, engine "
          f"{t['engine_saved']:.1f} · keep-1 {t['keep_saved']:.1f}: gap {t['gap']:+.2f} points\n")
    print("| calls | n | size term | re-send term | gap |\n|---|---|---|---|---|")
    for phase, (n, size, fresh) in t["phases"].items():
        print(f"| {phase} | {n:.0f} | {size:+.2f} | {fresh:+.2f} | {size + fresh:+.2f} |")
    print("\n| step's first change, assistant turns back | steps | re-send billed |\n|---|---|---|")
    for depth, (n, resent) in t["depths"].items():
        print(f"| {depth} | {n:.0f} | {resent:.2f} |")
    print()


async def run(names: Sequence[str], root: Path, split: str) -> None:
    with engine_for(Settings()) as engine:
        for name in names:
            sessions = [s for s in corpora.load(name, root) if split in ("all", s.split)]
            calls = [c for s in sessions for c in await session_calls(engine, s)]
            print_terms(name, split, len(sessions), terms(calls))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=corpora.CORPORA)
    parser.add_argument("--corpus", action="append", required=True)
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="tune")
    args = parser.parse_args()
    asyncio.run(run(args.corpus, args.corpora, args.split))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
