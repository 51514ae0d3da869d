"""Which of the engine's mechanisms took each value a call lost: a split's lost recall by fate.

Replays a split as `bench.recall_misses` does and keeps each call's drop events. A lost value
may have been in several earlier messages; it was lost once the last of them lost it, so it
is put down to the mildest fate among them (`MILDEST_FIRST`): sent as a repeat's pointer, as a
digest, as a placeholder (a mask batch, a finished task's mask), folded into a gateway note,
or dropped (the budget's cut). On a queue corpus the value is also classed as the current
run's or an earlier run's (`bench.recall_seen`), as a whole token of a carrier or only inside
a longer one (`whole_token`: `pods` in `AirPods`, `closed` in `in_closed_grading_period`:
the yardstick matches substrings, so such a value was needed but not read there), a whole
one whose bare form the call still forwards (`bare_kept`: `1998.` lost, `1998` sent — the
yardstick's text token keeps a sentence's full stop, so the form was lost, not the value), and by
the class budget's part: a carrier cut by it (`carrier cut`: a `history_cap` or
`over_budget` event on one of the value's messages), the budget cutting other messages of
that call (`call cut`), or no cut.
Per class it prints the points of the yardstick's recall lost (mean over the calls with
needed values of lost / needed).

`python -m bench.recall_fates --corpora /tmp/toolathlon --corpus
toolathlon-claude-4.5-sonnet-queue --split tune`. The fold is the last fate an old exchange
meets: with `fold_from_turns` off in a copy of the config (`CTXGATE_CONFIG`), the same run
shows what the folded messages had become before.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import re
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
from gateway.context.replay import engine_for
from gateway.observability.droplog import DropEvent
from gateway.settings import Settings

MILDEST_FIRST = ("sent", "pointer", "digest", "placeholder", "folded", "dropped")
BUDGET_REASONS = frozenset({"history_cap", "over_budget"})
_WORD = re.compile(r"[A-Za-z0-9_]")


def whole_token(value: str, text: str) -> bool:
    """Whether `value` occurs in `text` not flanked by a letter, digit or underscore that
    would make it part of a longer token (its own first and last characters may be anything)."""
    start = text.find(value)
    while start >= 0:
        end = start + len(value)
        before = text[start - 1] if start else ""
        after = text[end] if end < len(text) else ""
        if not (_WORD.match(before) and _WORD.match(value[0])) and not (
                _WORD.match(after) and _WORD.match(value[-1])):
            return True
        start = text.find(value, start + 1)
    return False


_CLOSING = ".:,;"


def bare_kept(value: str, forwarded: str) -> bool:
    """Whether `value` differs from its bare form (without a closing `.`, `:`, `,` or `;` and
    a leading `./`) and that bare form is in the forwarded text: the agent typed `1998.` at
    a sentence's end or `./x.py`, and the call still carries `1998` or `x.py`."""
    bare = value.rstrip(_CLOSING).removeprefix("./")
    return bare != value and len(bare) >= 2 and bare in forwarded


def token_class(value: str, carriers: Sequence[str], forwarded: str) -> str:
    """`inside` when every carrier holds `value` only inside a longer token, `bare kept` when
    the call forwards its bare form (`bare_kept`), `whole` otherwise: only these last ones are
    values the call lost as the agent read them."""
    if not any(whole_token(value, text) for text in carriers):
        return "inside"
    return "bare kept" if bare_kept(value, forwarded) else "whole"


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


async def run(root: Path, name: str, split: str) -> dict[tuple[str, str, str, str], float]:
    sessions = [s for s in corpora.load(name, root) if split in ("all", s.split)]
    runs = corpora.load(name.removesuffix("-queue"), root) if name.endswith("-queue") else []
    with engine_for(Settings()) as engine:
        points: dict[tuple[str, str, str, str], float] = defaultdict(float)
        calls = 0
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
                forwarded = haystack(fitted.body["messages"])
                seen = haystack(session.messages[starts[bisect.bisect_right(starts, end) - 1]:end])
                by_message: dict[int, list[DropEvent]] = defaultdict(list)
                for event in fitted.drops:
                    if event.message_index is not None:
                        by_message[event.message_index].append(event)
                cut = any(e.reason in BUDGET_REASONS for e in fitted.drops)
                for value in lost:
                    carriers = [i for i, m in enumerate(body["messages"])
                                if m.get("role") != "system" and value in searchable_text(m)]
                    where = mildest([fate(by_message[i]) for i in carriers])
                    side = "current run" if value in seen else "earlier run"
                    token = token_class(value, [searchable_text(body["messages"][i])
                                                for i in carriers], forwarded)
                    budget = ("carrier cut" if any(e.reason in BUDGET_REASONS for i in carriers
                                                   for e in by_message[i])
                              else "call cut" if cut else "no cut")
                    print(f"{session.id} call {k}: {side}, {where}, {token}, {budget}: "
                          f"{value[:80]!r}")
                    points[(where, side, token, budget)] += 100 / len(needed)
    return {key: p / max(calls, 1) for key, p in points.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, required=True)
    parser.add_argument("--corpus", required=True, metavar="NAME")
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="all")
    args = parser.parse_args()
    points = asyncio.run(run(args.corpora, args.corpus, args.split))
    print(f"# {args.corpus} ({args.split}): points of recall lost, by fate, run, token "
          f"and budget")
    for (where, side, token, budget), p in sorted(points.items(), key=lambda kv: -kv[1]):
        print(f"{where} | {side} | {token} | {budget} | {p:.3f}")
    print(f"total | | {sum(points.values()):.3f}")
    whole = sum(p for key, p in points.items() if key[2] == "whole")
    print(f"of it values read whole and kept in no form | | {whole:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
