"""Replay benchmark for the context engine (see bench/README.md, "Context engine replay").

Replays every session of every corpus in `../shared/corpora/` (SWE-agent, web browsing,
tool-using assistant, SQL/bash) and synthetic long sessions call by call as live sessions
through the engine (shipped config, no playbook), and measures in the same run no gateway
and masking keep-K with the yardstick of issue 7 (`bench/yardstick.py`): late-call
reduction, recall of the values the next action used, cost with prompt-cache pricing; then
sampled calls under budgets of 80% and 60% of their size against a plain fit; every figure
for the tune half, the holdout half and both. The earlier figures (token sums, values of the
next command, SWE-agent and 3 synthetic sessions) follow, unchanged.

    .venv/bin/python bench/replay.py [--corpus NAME ...] [--max-sessions N]
        [--split all|tune|holdout] [--budget-calls N] [--no-legacy] [--json OUT]
        [--format chat|responses|messages]

`--timing` measures only time per call on long synthetic sessions, first 20 calls against
the last 20 (`bench/timing.py`): the engine alone, with `--gateway` also a real gateway, and
with `--against DIR` another checkout's code in the same run, rounds interleaved.

    .venv/bin/python bench/replay.py --timing [--against DIR] [--gateway] [--rounds N]
        [--turns N] [--seeds N] [--web N] [--queue DIR/NAME ...] [--longest N] [--json OUT]
        [--wire chat|responses|messages ...]

A session recorded per call (a JSONL `calls` list, `bench/corpora.py`) is replayed call by
call as the client sent each call; `--prefix-replay` replays the prefixes of its `messages`
instead (one growing chat, as before).

`--format` sends each corpus call in that wire format (converted by `bench/wire_convert.py`,
fitted through the format's adapter as its route does, the forwarded request read back as
chat messages for the yardstick); budget mode and the earlier figures stay in chat form.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import corpora
from bench.corpora import CORPORA, CORPUS_NAMES, Session
from bench.corpus_run import budget_calls, replay_corpus
from bench.figures import corpus_figures, print_tables
from bench.timing import print_timing, run_timing
from bench.yardstick import call_ends
from gateway.context.engine import CallContext
from gateway.context.items import content_text, parse_request
from gateway.context.replay import build_engine
from gateway.settings import Settings

_VALUE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]*[A-Za-z0-9_]")
MASK_KEEPS = (10, 3, 2, 1)


def values(text: str) -> set[str]:
    return {v for v in _VALUE.findall(text) if len(v) >= 2}


def forwarded_values(messages: list[dict[str, Any]]) -> set[str]:
    out: set[str] = set()
    for msg in messages:
        out |= values(content_text(msg.get("content")))
        for call in msg.get("tool_calls") or ():
            out |= values(str(call.get("function", {}).get("arguments", "")))
    return out


def action_values(raw: dict[str, Any]) -> set[str]:
    """Values the agent's next action used: its command and tool-call arguments."""
    out = values(str(raw.get("action") or ""))
    for call in raw.get("tool_calls") or ():
        out |= values(str(call.get("function", {}).get("arguments", "")))
    if not out:  # text-format agents: the last fenced block is the command
        blocks = re.findall(r"```(?:\w+)?\n(.*?)```", content_text(raw.get("content")), re.DOTALL)
        if blocks:
            out = values(blocks[-1])
    return out


def is_observation(messages: list[dict[str, Any]], i: int) -> bool:
    msg = messages[i]
    if msg.get("role") == "tool":
        return True
    return msg.get("role") == "user" and any(m.get("role") == "assistant" for m in messages[:i])


def mask(messages: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    obs = [i for i in range(len(messages)) if is_observation(messages, i)]
    old = set(obs[:-keep]) if keep else set(obs)
    out = []
    for i, msg in enumerate(messages):
        if i in old:
            lines = content_text(msg.get("content")).count("\n") + 1
            msg = {**msg, "content": f"Old environment output: ({lines} lines omitted)"}
        out.append(msg)
    return out


CACHE_RATES = (0.1, 0.5)  # price of a cached input token relative to a fresh one


class Tally:
    """Tokens, recall, prefix reuse and cache-aware cost of one method over many calls."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.prev: list[dict[str, Any]] | None = None

    def _add(self, key: str, value: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value

    def add(
        self,
        before: int,
        sent: list[dict[str, Any]],
        per_message: list[int],
        used: int,
        kept: int,
        late: bool,
    ) -> None:
        after = sum(per_message) + 3
        shared = 0
        if self.prev is not None:
            while shared < min(len(self.prev), len(sent)) and self.prev[shared] == sent[shared]:
                shared += 1
            self._add("calls_after_first", 1)
            self._add("stable", int(shared == len(self.prev)))
        self.prev = sent
        cached = sum(per_message[:shared])
        for scope in ("all", "late") if late else ("all",):
            self._add(f"before_{scope}", before)
            self._add(f"after_{scope}", after)
            self._add(f"used_{scope}", used)
            self._add(f"kept_{scope}", kept)
            for rate in CACHE_RATES:
                self._add(f"billed{rate}_{scope}", after - cached + rate * cached)

    def end_session(self) -> None:
        self.prev = None

    def row(self, name: str, baseline: Tally) -> dict[str, Any]:
        def pct(a: float, b: float) -> float:
            return round(100 * a / b, 1) if b else 0.0

        s, base = self.sums, baseline.sums
        row: dict[str, Any] = {"method": name}
        for scope in ("all", "late"):
            row[f"saved_{scope}_%"] = pct(
                s[f"before_{scope}"] - s[f"after_{scope}"], s[f"before_{scope}"]
            )
            row[f"recall_{scope}_%"] = pct(s[f"kept_{scope}"], s[f"used_{scope}"])
        for rate in CACHE_RATES:
            key = f"billed{rate}_all"
            row[f"cost_saved_cache{rate}_%"] = pct(base[key] - s[key], base[key])
        row["prefix_stable_%"] = pct(s.get("stable", 0), s.get("calls_after_first", 0))
        return row


def per_message_tokens(
    messages: list[dict[str, Any]], engine: Any, memo: dict[Any, Any]
) -> list[int]:
    items = parse_request({"messages": messages}, engine.counter, "o200k_base", memo).items
    out = [0] * len(messages)
    for item in items:
        out[item.message_index] += item.tokens
    return out


async def run(
    sessions: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]], settings: Settings
) -> dict[str, Any]:
    engine = build_engine(settings)
    assert engine.embedder is not None
    await engine.embedder.embed(["warm up"])
    tallies = {"none": Tally(), **{f"mask-{k}": Tally() for k in MASK_KEEPS}, "ctxgate": Tally()}
    memo: dict[Any, Any] = {}
    times: list[float] = []
    per_session = []
    for n, (name, messages, raw) in enumerate(sessions):
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]
        late_from = len(turns) - len(turns) // 3
        session_times = []
        for k, i in enumerate(turns):
            prefix = messages[:i]
            body = {"messages": prefix}
            used = action_values(raw[i]) & forwarded_values(prefix)
            late = k >= late_from
            before = parse_request(body, engine.counter, "o200k_base", memo).tokens
            tallies["none"].add(
                before, prefix, per_message_tokens(prefix, engine, memo), len(used), len(used), late
            )
            for keep in MASK_KEEPS:
                masked = mask(prefix, keep)
                kept = len(used & forwarded_values(masked))
                tallies[f"mask-{keep}"].add(
                    before, masked, per_message_tokens(masked, engine, memo), len(used), kept, late
                )
            start = time.perf_counter()
            fitted = await engine.fit(
                body,
                CallContext(
                    tenant="bench", trace_id=f"{n}-{k}", headers={"x-ctxgate-session-id": f"s{n}"}
                ),
            )
            spent = time.perf_counter() - start
            times.append(spent)
            session_times.append(spent)
            out = fitted.body["messages"]
            tallies["ctxgate"].add(
                before,
                out,
                per_message_tokens(out, engine, memo),
                len(used),
                len(used & forwarded_values(out)),
                late,
            )
        for tally in tallies.values():
            tally.end_session()
        third = max(len(session_times) // 3, 1)
        per_session.append(
            {
                "session": name,
                "calls": len(turns),
                "ms_first_third": round(1000 * statistics.median(session_times[:third]), 2),
                "ms_last_third": round(1000 * statistics.median(session_times[-third:]), 2),
            }
        )
    engine.embedder.close()
    return {
        "methods": [t.row(name, tallies["none"]) for name, t in tallies.items()],
        "median_ms": round(1000 * statistics.median(times), 2),
        "p90_ms": round(1000 * sorted(times)[int(0.9 * (len(times) - 1))], 2),
        "calls": len(times),
        "sessions": per_session,
    }


def print_report(title: str, result: dict[str, Any]) -> None:
    print(f"\n## {title}: {result['calls']} calls")
    head = (
        "method",
        "saved all",
        "recall all",
        "saved late",
        "recall late",
        "prefix stable",
        "cost saved (cache 0.1)",
        "cost saved (cache 0.5)",
    )
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in result["methods"]:
        cells = [
            r["method"],
            r["saved_all_%"],
            r["recall_all_%"],
            r["saved_late_%"],
            r["recall_late_%"],
            r["prefix_stable_%"],
            r["cost_saved_cache0.1_%"],
            r["cost_saved_cache0.5_%"],
        ]
        print("| " + " | ".join(str(c) if i == 0 else f"{c}%" for i, c in enumerate(cells)) + " |")
    print(f"pipeline time per call: median {result['median_ms']} ms, p90 {result['p90_ms']} ms")


def legacy_sessions(
    sessions: list[Session],
) -> list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]:
    return [(s.id.split("/", 1)[-1][:60], s.messages, s.raw) for s in sessions]


def run_legacy(
    swe: list[Session], long: list[Session], settings: Settings, report: dict[str, Any]
) -> None:
    """The figures of the first replay benchmark (token sums, values from commands only),
    kept so the README's older numbers stay reproducible."""
    print("\n# Earlier figures (token sums; values of the next command)")
    if swe:
        report["corpus"] = asyncio.run(run(legacy_sessions(swe), settings))
        print_report("SWE-agent corpus", report["corpus"])
    if long:
        report["synthetic"] = asyncio.run(run(legacy_sessions(long), settings))
        print_report("Long synthetic sessions (100 calls each)", report["synthetic"])
        for s in report["synthetic"]["sessions"]:
            print(
                f"  {s['session']}: median ms first third {s['ms_first_third']}, "
                f"last third {s['ms_last_third']}"
            )


async def run_corpora(
    sessions: dict[str, list[Session]], settings: Settings, budget_calls_per_corpus: int,
    wire_format: str = "chat", system_results: bool = False,
) -> dict[str, dict[str, Any]]:
    """Per corpus: the per-call records of the live replay and of budget mode."""
    engine = build_engine(settings)  # no playbook source: only the engine is measured
    assert engine.embedder is not None
    await engine.embedder.embed(["warm up"])
    out: dict[str, dict[str, Any]] = {}
    try:
        for name, group in sessions.items():
            start = time.perf_counter()
            records = await replay_corpus(engine, group, corpus=name, wire_format=wire_format,
                                          system_results=system_results)
            mid = time.perf_counter()
            # Budget mode re-embeds every item of a call (rerank under pressure): on the
            # synthetic sessions, 10 sampled calls of the 100-call sessions are enough.
            sampled, per_split = group, budget_calls_per_corpus // 2
            if name == "synthetic":
                sampled = [s for s in group if len(call_ends(s.messages)) < 300]
                per_split = min(per_split, 5)
            budget = await budget_calls(engine, sampled, corpus=name, per_split=per_split)
            print(
                f"{name}: {len(group)} sessions, {len(records)} calls replayed in "
                f"{mid - start:.1f} s, {len(budget)} budget calls in "
                f"{time.perf_counter() - mid:.1f} s",
                file=sys.stderr,
            )
            out[name] = {"calls": records, "budget": budget}
    finally:
        engine.embedder.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=CORPORA, help="root of the corpora")
    parser.add_argument(
        "--corpus", action="append", metavar="NAME",
        help=f"only this corpus (repeatable): {', '.join(CORPUS_NAMES)}, or any folder under "
        "--corpora holding a sessions.jsonl (all such folders are run by default too)",
    )
    parser.add_argument("--max-sessions", type=int, help="first N sessions of each corpus")
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="all")
    parser.add_argument("--synthetic", type=int, default=3, help="synthetic 100-call sessions")
    parser.add_argument("--long", type=int, default=1, help="synthetic 300-call sessions")
    parser.add_argument("--budget-calls", type=int, default=40, help="sampled per corpus")
    parser.add_argument("--no-legacy", action="store_true", help="skip the earlier figures")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--system-results", action="store_true",
                        help="count mid-chat system messages as sources of needed values (a check"
                        " of the yardstick's blind spot, not the issue's rule)")
    parser.add_argument("--format", choices=("chat", "responses", "messages"), default="chat",
                        help="the wire format each corpus call is sent in")
    parser.add_argument("--prefix-replay", action="store_true",
                        help="replay the prefixes of `messages` even where a session has "
                        "per-call `calls`")
    timing = parser.add_argument_group("time per call (--timing)")
    timing.add_argument("--timing", action="store_true", help="only time per call")
    timing.add_argument("--against", type=Path, help="also time this checkout's code")
    timing.add_argument("--gateway", action="store_true", help="also through a real gateway")
    timing.add_argument("--rounds", type=int, default=3)
    timing.add_argument("--turns", type=int, default=300, help="turns of each session")
    timing.add_argument("--seeds", type=int, default=1, help="sessions (one per seed)")
    timing.add_argument("--web", type=int, default=0, help="longest web sessions timed too")
    timing.add_argument("--queue", type=Path, action="append", default=[],
                        help="a corpus folder (JSONL) whose longest sessions are timed too")
    timing.add_argument("--longest", type=int, default=2, help="sessions timed per --queue")
    timing.add_argument("--wire", action="append", choices=("chat", "responses", "messages"),
                        help="with --gateway: its calls sent in this wire format (repeatable;"
                        " chat by default; without chat the engine alone is not timed)")
    timing.add_argument("--bypass", action="store_true",
                        help="with --gateway: its calls sent with x-ctxgate-bypass: true")
    args = parser.parse_args()
    if args.timing:
        trees = [("this", Path(__file__).resolve().parents[1])]
        if args.against:
            trees.append((f"against {args.against.name}", args.against.resolve()))
        kinds = ["engine", "gateway"] if args.gateway else ["engine"]
        wires = args.wire or ["chat"]
        if args.gateway and "chat" not in wires:  # the engine alone has no wire format
            kinds = ["gateway"]
        report = run_timing(trees, kinds, args.rounds, args.turns, args.seeds, args.web,
                            args.corpora, args.queue, args.longest, wires, args.bypass)
        print_timing(report)
        if args.json:
            args.json.write_text(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
        return 0
    settings = Settings()
    sessions: dict[str, list[Session]] = {}
    for name in args.corpus or (*CORPUS_NAMES, *corpora.extra_jsonl(args.corpora)):
        if name == "synthetic":
            group = [corpora.synthetic_session(seed) for seed in range(args.synthetic)]
            group += [corpora.synthetic_session(seed, 300) for seed in range(args.long)]
        elif (args.corpora / name).exists():
            group = corpora.load(name, args.corpora, per_call=not args.prefix_replay)
        else:
            print(f"corpus {args.corpora / name} not found: skipped", file=sys.stderr)
            continue
        sessions[name] = group[: args.max_sessions] if args.max_sessions else group
    records = asyncio.run(run_corpora(sessions, settings, args.budget_calls, args.format,
                                      args.system_results))
    splits = ("all", "tune", "holdout") if args.split == "all" else (args.split,)
    figures = {
        name: {split: corpus_figures(r["calls"], r["budget"], split) for split in splits}
        for name, r in records.items()
    }
    print("# Every corpus, the issue-7 yardstick (engine with the shipped config, no playbook;"
          f" calls in {args.format} form)")
    print_tables(figures, splits)
    report: dict[str, Any] = {"yardstick": figures}
    if not args.no_legacy:
        short = [s for s in sessions.get("synthetic", []) if s.id.endswith(tuple("0123456789"))]
        short = [s for s in short if len(call_ends(s.messages)) == 101]
        run_legacy(sessions.get("swe-agent", []), short, settings, report)
    if args.json:
        args.json.write_text(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
