"""Every call's drops, rebuilt from a drop log in the `decisions` form.

A `context.call` line names the steps in force and the items of those steps that were not
(`excluded`); its drops are its session's `context.decision` lines logged before it at
those steps, for each item the line of its latest step (and of that step, the last line
logged), less the excluded items. They add up to `tokens_before - tokens_after +
playbook_tokens` of the call line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

ITEM_FIELDS = ("stage", "action", "reason", "item_id", "kind", "message_index",
               "tokens_before", "tokens_after", "kept_as", "preview")


@dataclass(frozen=True)
class CallDrops:
    """One call line and the drops it stands for, in message order."""

    call: Mapping[str, Any]
    drops: list[dict[str, Any]]

    @property
    def trace_id(self) -> str:
        return str(self.call["trace_id"])

    @property
    def balanced(self) -> bool:
        """The drops add up to what the call line says the call saved."""
        saved = sum(d["tokens_before"] - d["tokens_after"] for d in self.drops)
        call = self.call
        return bool(saved == call["tokens_before"] - call["tokens_after"] + call["playbook_tokens"])


@dataclass
class _Session:
    lines: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    by_step: dict[int, set[str]] = field(default_factory=dict)


def reconstruct(lines: Iterable[Mapping[str, Any]]) -> Iterator[CallDrops]:
    """The drops of each `context.call` line, in the log's order (other lines skipped)."""
    sessions: dict[tuple[str, str], _Session] = {}
    for line in lines:
        event = line.get("event")
        if event not in ("context.decision", "context.call"):
            continue
        session = sessions.setdefault((line["tenant"], line["session_id"]), _Session())
        if event == "context.decision":
            step, item = int(line["step"]), str(line["item_id"])
            session.lines[(item, step)] = {name: line[name] for name in ITEM_FIELDS} | {
                "step": step}
            session.by_step.setdefault(step, set()).add(item)
            continue
        yield CallDrops(line, _in_force(session, line["steps"], set(line["excluded"])))


def _in_force(session: _Session, steps: list[int], excluded: set[str]) -> list[dict[str, Any]]:
    latest: dict[str, int] = {}
    for step in steps:
        for item in session.by_step.get(step, ()):
            if item not in excluded and latest.get(item, -1) < step:
                latest[item] = step
    drops = [session.lines[(item, step)] for item, step in latest.items()]
    drops.sort(key=lambda d: (d["message_index"] is None, d["message_index"] or 0, d["item_id"]))
    return drops
