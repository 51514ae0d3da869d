"""The recorded sessions the replay runs on: the shared corpora (read in place from
`../shared/corpora/`, never copied into the repository) and synthetic long sessions.

Every session is put in a *tune* or a *holdout* half by a hash of its id, so that settings
tuned on one half can be checked on the other.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gateway.context.replay import openai_message
from tests.sessions import synthetic_session as tests_synthetic_session

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


def extra_jsonl(root: Path) -> list[str]:
    """Folders under `root` in the JSONL format that are not among the shared corpora (a
    corpus converted outside the repository, e.g. by `bench/taubench.py`)."""
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/sessions.jsonl")
                  if p.parent.name not in CORPUS_NAMES)


def load(name: str, root: Path = CORPORA, *, synthetic: int = 3, turns: int = 100) -> list[Session]:
    if name == "swe-agent":
        return swe_agent(root)
    if name in JSONL_CORPORA or (name != "synthetic" and (root / name / "sessions.jsonl").exists()):
        return jsonl(name, root)
    if name == "synthetic":
        return [synthetic_session(seed, turns) for seed in range(synthetic)]
    raise ValueError(f"unknown corpus {name!r}")


def synthetic_session(seed: int, turns: int = 100) -> Session:
    """The long synthetic coding session the tests use too (`tests/sessions.py`)."""
    _, messages, _ = tests_synthetic_session(seed, turns)
    suffix = "" if turns == 100 else f"-{turns}"
    return Session(f"synthetic-{seed}{suffix}", messages, raw=messages)
