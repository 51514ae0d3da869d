"""Replay benchmark for the context engine (see bench/README.md, "Context engine replay").

Replays every SWE-agent trajectory of the corpus call by call as a live session with the
shipped configuration, plus long synthetic sessions, and compares in the same run with no
management and with observation masking (observations older than the last K replaced by a
one-line placeholder). Per call: tokens saved, and recall — the share of the values the
agent's next action used (identifiers, paths, numbers in its command / tool-call arguments)
that appear in an earlier message and are still present in what was forwarded.

    .venv/bin/python bench/replay.py [--corpus DIR] [--synthetic N] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.context.engine import CallContext
from gateway.context.items import content_text, parse_request
from gateway.context.replay import build_engine, openai_message
from gateway.settings import Settings

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "swe-agent"
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


def sessions_from_corpus(
    corpus: Path,
) -> list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]:
    out = []
    for path in sorted(corpus.glob("*.traj")):
        raw = orjson.loads(path.read_bytes())["history"]
        out.append((path.stem[:60], [openai_message(m) for m in raw], raw))
    return out


def synthetic_session(
    seed: int, turns: int = 100
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """A long tool-using coding session: file views, test logs, greps, JSON; ~1.2k tokens a turn."""
    rng = random.Random(seed)
    files = [f"src/pkg_{seed}/module_{k}.py" for k in range(12)]
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": "You are an autonomous programmer working in a repository "
            "through tools. Use the tools to read, edit and test code. " * 8,
        },
        {
            "role": "user",
            "content": f"Fix issue #{4000 + seed}: `compute_total` in {files[0]} "
            f"returns wrong totals when `discount_rate` is negative. Reproduce, fix, test.",
        },
    ]
    raw: list[dict[str, Any]] = list(messages)
    seen_funcs: list[str] = []
    lead: tuple[str, int] | None = None  # (file, line) the latest grep hit or error points at
    for t in range(turns):
        kind = t % 4
        f = rng.choice(files)
        if kind == 0:
            # Follow the lead of the last grep or failing test, as an agent does.
            f, target = lead if lead else (f, rng.randint(1, 400))
            start = max(target - 20, 1)
            name, args = "open_file", {"path": f, "line": target}
            lines = []
            for n in range(start, start + 60):
                if n % 9 == 0:
                    fn = f"helper_{seed}_{t}_{n}"
                    seen_funcs.append(fn)
                    lines.append(f"{n}:def {fn}(value, rate={rng.random():.3f}):")
                else:
                    lines.append(
                        f"{n}:    result_{n % 7} = value * {rng.randint(2, 999)} + "
                        f"offset_{rng.randint(0, 50)}  # adjust {rng.choice('abc')}"
                    )
            out = f"[File: /repo/{f} ({start + 200} lines total)]\n" + "\n".join(lines)
        elif kind == 1:
            # A function seen a few views ago: the value comes from older context.
            target_fn = seen_funcs[-rng.randint(1, min(len(seen_funcs), 12))] if seen_funcs else "x"
            name, args = "bash", {"command": f"grep -n {target_fn} -r src/"}
            hits = [(rng.choice(files), rng.randint(1, 600)) for _ in range(8)]
            lead = hits[0]
            out = "\n".join(
                [f"{hf}:{hl}:    {target_fn}(x, rate)" for hf, hl in hits]
                + [
                    f"src/noise_{k}.py:{rng.randint(1, 900)}: unrelated_call_{k}()"
                    for k in range(30)
                ]
            )
        elif kind == 2:
            name, args = "bash", {"command": f"python -m pytest tests/test_{t}.py -x -q"}
            log = [
                f"2024-05-0{1 + t % 9} 10:{t % 60:02d}:{k % 60:02d} INFO collected case_{k}"
                for k in range(50)
            ]
            err_at = rng.randint(10, 40)
            err_line = rng.randint(1, 500)
            log[err_at] = (
                f"2024-05-01 10:00:{err_at:02d} ERROR test_case_{t}_{err_at} failed: "
                f"AssertionError: expected {rng.randint(100, 999)} got "
                f"{rng.randint(100, 999)} at {f}:{err_line}"
            )
            if rng.random() < 0.5:
                lead = (f, err_line)
            out = "\n".join(log) + f"\n=== 1 failed, {rng.randint(20, 90)} passed in 1.2s ==="
        else:
            name, args = "bash", {"command": f"cat build/report_{t}.json"}
            out = orjson.dumps(
                {
                    "run": t,
                    "status": "ok",
                    "items": [
                        {
                            "id": f"item-{t}-{k}",
                            "score": rng.randint(0, 1000),
                            "path": rng.choice(files),
                        }
                        for k in range(25)
                    ],
                }
            ).decode()
        call_id = f"call_{seed}_{t}"
        assistant = {
            "role": "assistant",
            "content": f"Step {t}: next I will run {name} on {f}.",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": orjson.dumps(args).decode()},
                }
            ],
        }
        tool = {"role": "tool", "tool_call_id": call_id, "content": out}
        messages += [assistant, tool]
        raw += [assistant, tool]
    messages.append({"role": "assistant", "content": "Done."})
    raw.append(messages[-1])
    return f"synthetic-{seed}", messages, raw


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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--synthetic", type=int, default=3, help="long synthetic sessions")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = Settings()
    report: dict[str, Any] = {}
    if args.corpus.exists():
        report["corpus"] = asyncio.run(run(sessions_from_corpus(args.corpus), settings))
        print_report("SWE-agent corpus", report["corpus"])
    else:
        print(f"corpus {args.corpus} not found: skipped")
    if args.synthetic:
        long = [synthetic_session(seed) for seed in range(args.synthetic)]
        report["synthetic"] = asyncio.run(run(long, settings))
        print_report("Long synthetic sessions (100 calls each)", report["synthetic"])
        for s in report["synthetic"]["sessions"]:
            print(
                f"  {s['session']}: median ms first third {s['ms_first_third']}, "
                f"last third {s['ms_last_third']}"
            )
    if args.json:
        args.json.write_text(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
