"""Bullets and the operations that change them (the ACE delta format).

A bullet is one lesson: `[id] helpful=h harmful=k :: content` under a `## SECTION` heading.
Ids are `{section-slug}-{n:05d}`, numbered per slug, so two sections that share a slug share
a counter and ids never collide.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import orjson

Status = Literal["active", "pending"]
OpType = Literal["ADD", "UPDATE", "REMOVE", "TAG", "FOLD", "STATUS"]

# Short slugs for the sections our prompts suggest; any other section gets a derived slug.
_KNOWN_SLUGS = {
    "strategies_and_hard_rules": "str",
    "common_mistakes": "err",
    "common_mistakes_to_avoid": "err",
    "tool_usage": "tool",
    "verification": "ver",
    "problem_solving_heuristics": "prob",
    "code_snippets_and_templates": "code",
    "others": "misc",
}
_LINE = re.compile(r"^\[([^\]]+)\]\s*helpful=(\d+)\s*harmful=(\d+)\s*::\s*(.*)$")


def normalise_section(section: str) -> str:
    """`Common Mistakes` -> `common_mistakes`; empty -> `others`."""
    clean = section.strip().lower().replace("&", "and")
    clean = re.sub(r"[^a-z0-9]+", "_", clean).strip("_")[:40].rstrip("_")
    return clean or "others"


def section_slug(section: str) -> str:
    name = normalise_section(section)
    if name in _KNOWN_SLUGS:
        return _KNOWN_SLUGS[name]
    words = [w for w in name.split("_") if w not in {"and", "of", "to", "the", "for"}]
    return ("".join(w[0] for w in words) if len(words) > 1 else name[:6]) or "misc"


@dataclass(frozen=True, slots=True)
class Bullet:
    id: str
    section: str
    content: str
    helpful: int = 0
    harmful: int = 0
    status: Status = "active"
    sources: tuple[str, ...] = ()
    created_at: float = 0.0
    updated_at: float = 0.0

    def line(self) -> str:
        return f"[{self.id}] helpful={self.helpful} harmful={self.harmful} :: {self.content}"

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["sources"] = list(self.sources)
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Bullet:
        sources = record.get("sources") or []
        if isinstance(sources, dict):  # Lua's cjson encodes an empty array as {}
            sources = []
        return cls(
            id=str(record["id"]),
            section=str(record.get("section") or "others"),
            content=str(record.get("content") or ""),
            helpful=int(record.get("helpful") or 0),
            harmful=int(record.get("harmful") or 0),
            status="pending" if record.get("status") == "pending" else "active",
            sources=tuple(str(s) for s in sources),
            created_at=float(record.get("created_at") or 0.0),
            updated_at=float(record.get("updated_at") or 0.0),
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> Bullet:
        return cls.from_dict(orjson.loads(raw))


def parse_line(line: str) -> tuple[str, int, int, str] | None:
    """`[id] helpful=h harmful=k :: content` -> (id, h, k, content)."""
    match = _LINE.match(line.strip())
    if not match:
        return None
    return match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)


def score(bullet: Bullet, now: float, half_life_days: float) -> float:
    """helpful − harmful, with recency decay: what pruning keeps the highest of."""
    age_days = max(now - (bullet.updated_at or bullet.created_at), 0.0) / 86400.0
    decay = math.pow(0.5, age_days / half_life_days) if half_life_days > 0 else 1.0
    return (bullet.helpful - bullet.harmful + 1) * decay


@dataclass(frozen=True, slots=True)
class Operation:
    """One delta. `op_id` makes it idempotent: a second delivery of the same id is skipped."""

    type: OpType
    op_id: str
    id: str = ""  # the bullet an UPDATE/REMOVE/TAG/FOLD acts on
    section: str = ""
    content: str = ""
    helpful: int = 0
    harmful: int = 0
    into: str = ""  # FOLD: the bullet that absorbs `id`
    status: Status = "active"  # ADD/STATUS: pending while a class reviews new bullets by hand
    sources: tuple[str, ...] = field(default=())

    def to_wire(self) -> dict[str, Any]:
        """The form the Lua merge reads (ADD carries its slug; sections are normalised)."""
        wire = asdict(self)
        wire["sources"] = list(self.sources)
        if self.type == "ADD":
            wire["section"] = normalise_section(self.section)
            wire["slug"] = section_slug(self.section)
        return wire


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What one operation did: `applied`, `duplicate` (already merged), or `missing`."""

    op: Operation
    outcome: Literal["applied", "duplicate", "missing"]
    bullet_id: str
