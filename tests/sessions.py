"""Synthetic agent sessions for tests: long tool-using coding sessions, made from a seed.

The same generator as the replay benchmark's synthetic sessions (bench/), kept here so that
tests depend on nothing under bench/.
"""

from __future__ import annotations

import json
import random
from typing import Any

import orjson


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


def sql_session(question: str, outputs: list[str], command: str = "SELECT {k}"
                ) -> list[dict[str, Any]]:
    """An SQL agent's session (intercode's shape): one `execute_sql` exchange per output,
    the k-th sending `command` with `{k}` filled in."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You query a MySQL database with execute_sql."},
        {"role": "user", "content": question},
    ]
    for k, out in enumerate(outputs):
        arguments = json.dumps({"command": command.format(k=k)})
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{k}", "type": "function",
             "function": {"name": "execute_sql", "arguments": arguments}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": out})
    return messages
