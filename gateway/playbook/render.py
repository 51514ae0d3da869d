"""Rendering: the delimited playbook block that goes into the system prompt.

`[id] helpful=h harmful=k :: content` lines under `## SECTION` headings, sections in name
order and bullets in id order, so the same bullets always render to the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.playbook.bullet import Bullet
from gateway.playbook.tokens import count_tokens

OPEN = "<ctxgate-playbook>"
CLOSE = "</ctxgate-playbook>"
INSTRUCTION = (
    "PLAYBOOK: lessons learned from earlier runs of this kind of task, with how often each "
    "helped or hurt. Apply the ones that fit the current step. Whenever a bullet informs what "
    "you do, cite its id in square brackets in your reply, for example [{example}]."
)


def section_heading(section: str) -> str:
    return "## " + section.replace("_", " ").upper()


def render_sections(bullets: Sequence[Bullet]) -> str:
    """The playbook body: headings and bullet lines (what the Reflector and export show)."""
    by_section: dict[str, list[Bullet]] = {}
    for bullet in bullets:
        by_section.setdefault(bullet.section, []).append(bullet)
    parts = []
    for section in sorted(by_section):
        lines = [b.line() for b in sorted(by_section[section], key=lambda b: b.id)]
        parts.append("\n".join([section_heading(section), *lines]))
    return "\n\n".join(parts)


def render_block(bullets: Sequence[Bullet]) -> str:
    """The whole block for the system prompt; empty when there are no bullets."""
    if not bullets:
        return ""
    example = min(b.id for b in bullets)
    return "\n".join(
        [OPEN, INSTRUCTION.format(example=example), "", render_sections(bullets), CLOSE]
    )


def fit_to_cap(ranked: Sequence[Bullet], cap_tokens: int) -> list[Bullet]:
    """The longest prefix-greedy choice of `ranked` whose rendered block fits `cap_tokens`."""
    chosen: list[Bullet] = []
    sections: set[str] = set()
    # Fixed cost of the frame, then each bullet's line and (once) its section heading.
    used = count_tokens(render_block([ranked[0]])) - count_tokens(ranked[0].line()) if ranked else 0
    used -= count_tokens(section_heading(ranked[0].section)) if ranked else 0
    for bullet in ranked:
        cost = count_tokens(bullet.line()) + 1
        if bullet.section not in sections:
            cost += count_tokens(section_heading(bullet.section)) + 2
        if used + cost > cap_tokens:
            continue
        chosen.append(bullet)
        sections.add(bullet.section)
        used += cost
    while chosen and count_tokens(render_block(chosen)) > cap_tokens:
        chosen.pop()  # the per-line estimate was short by a token or two
    return chosen
