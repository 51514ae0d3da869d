"""The recorded sessions the replay runs on: the shared corpora (read in place from
`../shared/corpora/`, never copied into the repository) and synthetic long sessions.

Every session is put in a *tune* or a *holdout* half by a hash of its id, so that settings
tuned on one half can be checked on the other.

A session's *calls* (`session_calls`): by default each prefix of its `messages` that ends right
before an assistant message, answered by that message (one growing chat). A JSONL session may
instead carry `calls`, each `{"messages": [...], "reply": {...}}`: the message list that call
sent, as the client sent it (a client that edits or removes its earlier turns sends lists that
are not prefixes of one another), and the assistant message that answered it; then its calls
are those, in order (*per-call* mode; `per_call=False` on loading ignores them and replays the
prefixes of `messages`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.yardstick import call_ends
from gateway.context.replay import openai_message
from tests.sessions import synthetic_session as tests_synthetic_session

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
JSONL_CORPORA = ("webchorearena", "agentdojo", "intercode")
CORPUS_NAMES = ("swe-agent", *JSONL_CORPORA, "synthetic")
SPLITS = ("tune", "holdout")
Call = tuple[list[dict[str, Any]], dict[str, Any]]  # the messages a call sent, its reply


def split_of(session_id: str) -> str:
    """`tune` or `holdout`, fixed by the session id alone."""
    return SPLITS[hashlib.blake2b(session_id.encode(), digest_size=8).digest()[0] & 1]


@dataclass
class Session:
    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    raw: list[dict[str, Any]] = field(default_factory=list)  # as recorded (legacy figures)
    calls: list[Call] | None = None  # per-call message lists as sent (module docstring)

    @property
    def split(self) -> str:
        return split_of(self.id)


def swe_agent(root: Path = CORPORA) -> list[Session]:
    out = []
    for path in sorted((root / "swe-agent").glob("*.traj")):
        raw = orjson.loads(path.read_bytes())["history"]
        out.append(Session(f"swe-agent/{path.stem}", [openai_message(m) for m in raw], raw=raw))
    return out


def session_calls(session: Session) -> list[Call]:
    """The session's calls in order: `(messages sent, reply)` (module docstring)."""
    if session.calls is not None:
        return session.calls
    return [(session.messages[:end], session.messages[end]) for end in call_ends(session.messages)]


def jsonl(name: str, root: Path = CORPORA, *, per_call: bool = True) -> list[Session]:
    out = []
    for line in (root / name / "sessions.jsonl").read_bytes().splitlines():
        if line.strip():
            s = orjson.loads(line)
            calls = [(c["messages"], c["reply"]) for c in s["calls"]] \
                if per_call and s.get("calls") is not None else None
            out.append(Session(s["id"], s["messages"], s.get("tools") or None, raw=s["messages"],
                               calls=calls))
    return out


def extra_jsonl(root: Path) -> list[str]:
    """Folders under `root` in the JSONL format that are not among the shared corpora (a
    corpus converted outside the repository, e.g. by `bench/taubench.py`)."""
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/sessions.jsonl")
                  if p.parent.name not in CORPUS_NAMES)


def load(name: str, root: Path = CORPORA, *, synthetic: int = 3, turns: int = 100,
         per_call: bool = True) -> list[Session]:
    if name == "swe-agent":
        return swe_agent(root)
    if name in JSONL_CORPORA or (name != "synthetic" and (root / name / "sessions.jsonl").exists()):
        return jsonl(name, root, per_call=per_call)
    if name == "synthetic":
        return [synthetic_session(seed, turns) for seed in range(synthetic)]
    raise ValueError(f"unknown corpus {name!r}")


def synthetic_session(seed: int, turns: int = 100) -> Session:
    """The long synthetic coding session the tests use too (`tests/sessions.py`)."""
    _, messages, _ = tests_synthetic_session(seed, turns)
    suffix = "" if turns == 100 else f"-{turns}"
    return Session(f"synthetic-{seed}{suffix}", messages, raw=messages)
