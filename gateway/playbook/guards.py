"""Pollution guards: what may become a bullet.

A bullet is advice to the agent about its task. Content that addresses the gateway, tries
to override the system prompt or to change who the model is, or is simply too long, is
refused (and drop-logged by the caller) before it reaches the merge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.playbook.bullet import Bullet

_INSTRUCTION_ATTACKS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(ignore|disregard|forget|override)\b.{0,40}\b(previous|prior|above|earlier|all|"
        r"system|developer)\b.{0,20}\b(instructions?|prompts?|rules?|messages?)",
        r"\b(system|developer) (prompt|message|instructions?)\b",
        r"\byou are now\b|\bact as\b|\bnew persona\b|\bjailbreak",
        r"\bctxgate\b|\bthe gateway\b|\bx-ctxgate-|\badmin[ _-]?key\b|/admin/",
        r"\b(playbook|bullet)s?\b.{0,30}\b(delete|remove|rewrite|replace|disable)",
        r"\b(delete|remove|rewrite|replace|disable)\b.{0,30}\b(playbook|bullet)s?\b",
        r"<\|[a-z_]+\|>|</?(system|ctxgate-playbook)>|^\s*#{1,3}\s*system\b",
        r"\b(api[_ -]?key|password|secret|token)\s*[:=]\s*\S{8,}",
    )
)


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str = ""


def check_content(content: str, max_chars: int) -> Verdict:
    """Whether `content` may be stored as a bullet; the reason names the guard that refused."""
    text = content.strip()
    if not text:
        return Verdict(False, "empty")
    if len(text) > max_chars:
        return Verdict(False, "too_long")
    if "\n## " in text or text.startswith("## "):
        return Verdict(False, "instruction_injection")  # would forge a section heading
    for pattern in _INSTRUCTION_ATTACKS:
        if pattern.search(text):
            return Verdict(False, "instruction_injection")
    return Verdict(True)


def refused_bullets(bullets: Iterable[Bullet], max_chars: int) -> list[tuple[str, str]]:
    """(id, reason) for every bullet a guard refuses: imports pass the same guards as the
    Curator's operations, and an import with any refusal is rejected whole, never trimmed."""
    verdicts = ((b.id, check_content(b.content, max_chars)) for b in bullets)
    return [(bullet_id, v.reason) for bullet_id, v in verdicts if not v.ok]
