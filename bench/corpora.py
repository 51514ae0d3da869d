"""The recorded sessions the replay runs on: the shared corpora (read in place from
`../shared/corpora/`, never copied into the repository) and synthetic long sessions.

Every session is put in a *tune* or a *holdout* half by a hash of its id, so that settings
tuned on one half can be checked on the other.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gateway.context.replay import openai_message

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
JSONL_CORPORA = ("webchorearena", "agentdojo", "intercode")
CORPUS_NAMES = ("swe-agent", *JSONL_CORPORA, "synthetic")
SPLITS = ("tune", "holdout")


def split_of(session_id: str) -> str:
    """`tune` or `holdout`, fixed by the session id alone."""
    return SPLITS[hashlib.blake2b(session_id.encode(), digest_size=8).digest()[0] & 1]


@dataclass
class Session:
    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    raw: list[dict[str, Any]] = field(default_factory=list)  # as recorded (legacy figures)

    @property
    def split(self) -> str:
        return split_of(self.id)


def swe_agent(root: Path = CORPORA) -> list[Session]:
    out = []
    for path in sorted((root / "swe-agent").glob("*.traj")):
        raw = orjson.loads(path.read_bytes())["history"]
        out.append(Session(f"swe-agent/{path.stem}", [openai_message(m) for m in raw], raw=raw))
    return out


def jsonl(name: str, root: Path = CORPORA) -> list[Session]:
    out = []
    for line in (root / name / "sessions.jsonl").read_bytes().splitlines():
        if line.strip():
            s = orjson.loads(line)
            out.append(Session(s["id"], s["messages"], s.get("tools") or None, raw=s["messages"]))
    return out


def load(name: str, root: Path = CORPORA, *, synthetic: int = 3, turns: int = 100) -> list[Session]:
    if name == "swe-agent":
        return swe_agent(root)
    if name in JSONL_CORPORA:
        return jsonl(name, root)
    if name == "synthetic":
        return [synthetic_session(seed, turns) for seed in range(synthetic)]
    raise ValueError(f"unknown corpus {name!r}")


def synthetic_session(seed: int, turns: int = 100) -> Session:
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
    messages.append({"role": "assistant", "content": "Done."})
    suffix = "" if turns == 100 else f"-{turns}"
    return Session(f"synthetic-{seed}{suffix}", messages, raw=messages)
