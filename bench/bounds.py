"""What no policy can beat at a given prefix stability: two idealised policies, priced with the
issue-7 yardstick (`bench/yardstick.py`) on the shared corpora, beside masking keep-1.

- *oracle*: knows each session in advance and places its prefix changes (steps) where they
  save most, at most ⌊share × (calls − 1)⌋ per session (prefix stable on ≥ 1 − share of the
  calls after the first). A step sends the system prompt, the task and the call's last turn
  only — every older message dropped, nothing left of it (no digest, no placeholder); between
  steps a call appends its new messages verbatim. Its cost is a floor for any policy that
  sends each new message as it came and changes its prefix that rarely.
- *kept turns*: the engine's step schedule (a step once `steps + 1 ≤ share × calls`); a step
  empties every tool output and user turn older than the last turn and keeps the assistant
  turns verbatim, as masking keep-1 does (the values an agent re-uses are in its own earlier
  commands: dropping them loses recall). With `--dedup`, a new output that repeats one still
  sent verbatim is a 43-character pointer (`cluster.on_arrival`).

`.venv/bin/python bench/bounds.py [--corpora DIR] [--share 0.2]` (a few seconds).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.baselines import mask_keep, observations
from bench.corpora import CORPORA, JSONL_CORPORA, Session, load
from bench.yardstick import (
    billed,
    cached_chars,
    call_ends,
    late_calls,
    reduction,
    serialized,
    text_content,
)

RATE = 0.1
POINTER = "x" * 43  # `[ctxgate: same content as <16 hex>]`
Message = Mapping[str, Any]


def _last_turn(msgs: Sequence[Message]) -> int:
    last = len(msgs) - 1
    while last > 0 and msgs[last].get("role") == "tool":
        last -= 1
    return last


def _step_kept(msgs: Sequence[Message]) -> list[int]:
    """What an oracle step sends: system, the task (up to the first user turn), last turn."""
    first_user = next((i for i, m in enumerate(msgs) if m.get("role") == "user"), 0)
    last = _last_turn(msgs)
    return [i for i, m in enumerate(msgs)
            if i <= first_user or m.get("role") == "system" or i >= last]


def _plain_cost(session: Session, method: Any) -> float:
    total, previous = 0.0, None
    for end in call_ends(session.messages):
        ser = serialized(method(session.messages[:end]))
        total += billed(sum(map(len, ser)), cached_chars(previous, ser), RATE)
        previous = ser
    return total


def oracle_cost(session: Session, share: float) -> float:
    """The cheapest placement of at most ⌊share × (n − 1)⌋ steps (dynamic programming)."""
    ends = call_ends(session.messages)
    n, ser = len(ends), serialized(session.messages)
    size = [len(s) for s in ser]
    cum = [0, *accumulate(size)]
    kept = [_step_kept(session.messages[:e]) for e in ends]
    kept_size = [sum(size[i] for i in k) for k in kept]

    def sent(j: int, k: int) -> int:  # characters of call k, the last step at call j
        return kept_size[j] + cum[ends[k]] - cum[ends[j]]

    def between(j: int, k: int) -> float:  # calls j+1 .. k-1, each extending the previous
        return sum(RATE * sent(j, x - 1) + sent(j, x) - sent(j, x - 1) for x in range(j + 1, k))

    def step(j: int, k: int) -> float:
        before = [ser[i] for i in kept[j] + list(range(ends[j], ends[k - 1]))]
        return billed(kept_size[k], cached_chars(before, [ser[i] for i in kept[k]]), RATE)

    budget = int(share * (n - 1) + 1e-9)
    inf = float("inf")
    best = [[inf] * (budget + 1) for _ in range(n)]
    best[0][0] = float(kept_size[0])
    for k in range(1, n):
        for j in range(k):
            cost = between(j, k) + step(j, k)
            for used in range(budget):
                if best[j][used] + cost < best[k][used + 1]:
                    best[k][used + 1] = best[j][used] + cost
    return min(best[j][u] + between(j, n) for j in range(n) for u in range(budget + 1))


def _render_new(msgs: Sequence[Message], start: int, obs: set[int], verbatim: set[str],
                dedup: bool, out: list[Message]) -> None:
    """Append msgs[start:] to `out`, repeats of a verbatim output as pointers (`dedup`)."""
    for i in range(start, len(msgs)):
        m, text = msgs[i], text_content(msgs[i].get("content"))
        if dedup and i in obs and len(text) >= 120 and text in verbatim:
            out.append({**m, "content": POINTER})
            continue
        out.append(m)
        if i in obs:
            verbatim.add(text)


def kept_turns(session: Session, share: float, dedup: bool) -> tuple[list[float], float]:
    """Late-call reductions and cost of the *kept turns* policy on one session."""
    ends = call_ends(session.messages)
    late = late_calls(len(ends))
    forwarded: list[Message] = []
    verbatim: set[str] = set()
    steps, cost, previous, reductions = 0, 0.0, None, []
    for k, end in enumerate(ends):
        msgs = session.messages[:end]
        obs = set(observations(msgs))
        if steps + 1 <= share * (k + 1) or not forwarded:
            steps += k > 0
            last = _last_turn(msgs)
            forwarded = [{**m, "content": ""} if i in obs and i < last else m
                         for i, m in enumerate(msgs[:last])]
            verbatim = set()
            _render_new(msgs, last, obs, verbatim, dedup, forwarded)
        else:
            _render_new(msgs, len(forwarded), obs, verbatim, dedup, forwarded)
        ser = serialized(forwarded)
        cost += billed(sum(map(len, ser)), cached_chars(previous, ser), RATE)
        previous = ser
        if late[k]:
            reductions.append(reduction(msgs, forwarded))
    return reductions, cost


def corpus_bounds(sessions: Sequence[Session], share: float) -> dict[str, float]:
    none = sum(_plain_cost(s, list) for s in sessions)
    keep1 = sum(_plain_cost(s, lambda m: mask_keep(m, 1)) for s in sessions)
    late_keep1 = [reduction(s.messages[:e], mask_keep(s.messages[:e], 1))
                  for s in sessions
                  for e, is_late in zip(call_ends(s.messages), late_calls(len(call_ends(
                      s.messages))), strict=True) if is_late]
    out = {"oracle cost": 100 * (1 - sum(oracle_cost(s, share) for s in sessions) / none),
           "keep-1 cost": 100 * (1 - keep1 / none),
           "keep-1 late": 100 * sum(late_keep1) / len(late_keep1)}
    for dedup in (False, True):
        runs = [kept_turns(s, share, dedup) for s in sessions]
        late = [r for reds, _ in runs for r in reds]
        name = "kept turns" + (" + dedup" if dedup else "")
        out[f"{name} late"] = 100 * sum(late) / len(late)
        out[f"{name} cost"] = 100 * (1 - sum(c for _, c in runs) / none)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=CORPORA)
    parser.add_argument("--share", type=float, default=0.2, help="steps per call at most")
    args = parser.parse_args()
    print(f"share of calls that may change the prefix: {args.share}; cost saved @{RATE}")
    for corpus in ("swe-agent", *JSONL_CORPORA):
        figures = corpus_bounds(load(corpus, args.corpora), args.share)
        print(corpus, " | ".join(f"{k} {v:.1f}%" for k, v in figures.items()))


if __name__ == "__main__":
    main()
