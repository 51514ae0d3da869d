"""Reflector and Curator: from one judged step to a small list of playbook operations.

The Reflector (an LLM call, a few rounds at most) diagnoses the step and tags the bullets the
agent was shown; the Curator (an LLM call) turns the reflection into ADD / UPDATE / REMOVE /
TAG operations. The tags become TAG operations here, in code. Every operation gets an id
derived from the episode key, so the same delta merged twice applies once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.learner import prompts, schemas
from gateway.learner.llm import LearnerLLM
from gateway.learner.signals import Signal
from gateway.learner.transcript import transcript
from gateway.playbook.bullet import Bullet, Operation
from gateway.playbook.render import render_sections


@dataclass(frozen=True, slots=True)
class Episode:
    """One judged step: what the agent saw and did, and how it went."""

    key: str  # idempotency key of this delta, e.g. "{trace_id}:implicit"
    tenant: str
    task_class: str
    session_id: str
    trace_id: str
    messages: list[dict[str, Any]]  # the step, the agent's answer included
    shown: list[str]  # injected bullet ids
    cited: list[str]
    signal: Signal


def tag_operations(episode: Episode, tags: list[dict[str, Any]]) -> list[Operation]:
    shown = set(episode.shown)
    ops = []
    for tag in tags:
        bullet_id, kind = str(tag.get("id")), tag.get("tag")
        if bullet_id in shown and kind in ("helpful", "harmful"):
            ops.append(Operation(
                "TAG", f"{episode.key}:tag:{bullet_id}", id=bullet_id,
                helpful=int(kind == "helpful"), harmful=int(kind == "harmful"),
                sources=(episode.trace_id,),
            ))
    return ops


def curator_operations(episode: Episode, raw_ops: list[dict[str, Any]]) -> list[Operation]:
    ops = []
    for index, raw in enumerate(raw_ops):
        op_id = f"{episode.key}:op:{index}"
        kind = raw["type"]
        if kind == "ADD":
            ops.append(Operation("ADD", op_id, section=raw["section"], content=raw["content"],
                                 sources=(episode.trace_id,)))
        elif kind == "UPDATE":
            ops.append(Operation("UPDATE", op_id, id=raw["id"], content=raw["content"],
                                 sources=(episode.trace_id,)))
        elif kind == "REMOVE":
            ops.append(Operation("REMOVE", op_id, id=raw["id"]))
        elif kind == "TAG":
            ops.append(Operation("TAG", op_id, id=raw["id"], helpful=int(raw["helpful"]),
                                 harmful=int(raw["harmful"]), sources=(episode.trace_id,)))
    return ops


class ReflectorCurator:
    """Runs the two learner calls for an episode and returns the operations to merge."""

    def __init__(
        self, llm: LearnerLLM, reflector_model: str, curator_model: str, *,
        rounds: int = 1, max_trace_chars: int = 24_000, max_bullet_chars: int = 400,
    ) -> None:
        self._llm = llm
        self._reflector_model = reflector_model
        self._curator_model = curator_model
        self._rounds = rounds
        self._max_trace_chars = max_trace_chars
        self._max_bullet_chars = max_bullet_chars

    async def reflect(self, episode: Episode, playbook: Sequence[Bullet]) -> dict[str, Any]:
        shown = [b for b in playbook if b.id in set(episode.shown)]
        signal = episode.signal
        reflection: dict[str, Any] = {}
        for round_no in range(1, self._rounds + 1):
            previous = "" if round_no == 1 else prompts.REFLECTOR_AGAIN.format(
                round=round_no - 1, reflection=orjson.dumps(reflection).decode())
            detail = signal.detail or "-"
            if signal.score is not None:
                detail += f"\nSCORE: {signal.score}"
            user = prompts.REFLECTOR_USER.format(
                source=signal.source, outcome=signal.outcome, detail=detail,
                ground_truth=f"GROUND TRUTH: {signal.ground_truth}\n" if signal.ground_truth
                else "",
                shown=render_sections(shown) or "(none)",
                cited=", ".join(episode.cited) or "(none)",
                transcript=transcript(episode.messages, self._max_trace_chars),
                previous=previous,
            )
            reflection = await self._llm.complete_json(
                self._reflector_model, prompts.REFLECTOR_SYSTEM, user, "reflection",
                schemas.REFLECTION)
        return reflection

    async def curate(
        self, episode: Episode, playbook: Sequence[Bullet], version: int,
        reflection: dict[str, Any],
    ) -> list[dict[str, Any]]:
        body = dict(reflection)
        body.pop("bullet_tags", None)
        user = prompts.CURATOR_USER.format(
            version=version, playbook=render_sections(playbook) or "(empty)",
            outcome=episode.signal.outcome, reflection=orjson.dumps(body).decode(),
        )
        system = prompts.CURATOR_SYSTEM.format(max_chars=self._max_bullet_chars)
        answer = await self._llm.complete_json(
            self._curator_model, system, user, "curation", schemas.CURATION)
        return list(answer["operations"])

    async def operations(
        self, episode: Episode, playbook: Sequence[Bullet], version: int
    ) -> list[Operation]:
        reflection = await self.reflect(episode, playbook)
        raw_ops = await self.curate(episode, playbook, version, reflection)
        return tag_operations(episode, reflection["bullet_tags"]) + curator_operations(
            episode, raw_ops)
