"""Grow-and-refine: guard, check for near-duplicates, merge, prune past the cap.

Every write to a playbook (Curator deltas, admin edits, imports aside) goes through
`PlaybookEditor.apply`:
1. pollution guards refuse ADD/UPDATE content that is too long or tries to instruct the
   gateway or override the system prompt (drop log: stage playbook, action drop);
2. each ADD is compared (embedding cosine, same section) with the playbook's bullets and
   with the ADDs before it; over the threshold it is not added but credited to the bullet
   it repeats (its sources join that bullet's; drop log action dedup). The check comes
   before the merge, so no reader ever sees two copies of one lesson; when the embedding
   model is still loading, the check waits for it;
3. the deterministic merge applies the rest atomically and idempotently, on condition
   that the playbook has not changed since it was checked (its version); if it has (two
   workers adding the same lesson at once), the check runs again on the new playbook;
4. past the class's `max_tokens`, the lowest-scored bullets are pruned (action prune).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gateway.observability.droplog import DropEvent
from gateway.playbook.bullet import (
    Bullet,
    MergeResult,
    Operation,
    normalise_section,
    score,
)
from gateway.playbook.config import ClassPlaybook, PlaybookSettings
from gateway.playbook.guards import check_content
from gateway.playbook.inject import TextEmbedder
from gateway.playbook.render import render_sections
from gateway.playbook.store import PlaybookStore
from gateway.playbook.tokens import count_tokens

if TYPE_CHECKING:
    from gateway.observability.droplog import DropLog
    from gateway.observability.metrics import Metrics

log = logging.getLogger(__name__)
MERGE_ATTEMPTS = 20  # checks against a playbook that changed under them, before giving up


class PlaybookBusy(RuntimeError):
    """The playbook kept changing between the near-duplicate check and the merge."""


@dataclass(frozen=True, slots=True)
class Screened:
    """A delta after the near-duplicate check, and the playbook version it was checked at."""

    ops: list[Operation]
    repeats: list[tuple[Operation, str]]  # (ADD not added, the bullet id or ADD op id kept)
    version: int | None  # None: nothing to check, merge unconditionally


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a delta came from, for the drop log."""

    trace_id: str = ""
    session_id: str = ""


@dataclass(frozen=True, slots=True)
class ApplyReport:
    results: list[MergeResult]
    refused: list[tuple[Operation, str]]
    folded: list[tuple[str, str]]  # (op id of an ADD not added, id of the bullet it repeats)
    pruned: list[str]


def _effective_repeats(
    repeats: list[tuple[Operation, str]], results: list[MergeResult]
) -> list[tuple[Operation, str]]:
    """The repeats that took effect in this merge (not those of a redelivered delta), each
    with the id of the bullet it repeats."""
    by_op = {r.op.op_id: r for r in results}
    out = []
    for op, kept in repeats:
        credit = by_op.get(op.op_id) or by_op.get(kept)  # the credit, or the ADD it repeats
        if credit is not None and credit.outcome == "applied":
            out.append((op, credit.bullet_id))
    return out


class PlaybookEditor:
    """The one way bullets change: guards, merge, fold, prune, with drop-log lines."""

    def __init__(
        self,
        store: PlaybookStore,
        embedder: TextEmbedder | None,
        settings: PlaybookSettings,
        drop_log: DropLog | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self._embedder = embedder
        self._settings = settings
        self._drop_log = drop_log
        self._metrics = metrics

    async def apply(
        self,
        tenant: str,
        task_class: str,
        ops: Sequence[Operation],
        cls: ClassPlaybook,
        origin: Origin = Origin(),
    ) -> ApplyReport:
        accepted, refused = self._guard(ops, cls)
        results, repeats = await self._checked_merge(tenant, task_class, accepted)
        folded = _effective_repeats(repeats, results)
        # Anything that can grow the playbook (a new bullet, a longer rewrite) may push it
        # past its cap.
        grew = any(r.outcome == "applied" and r.op.type in ("ADD", "UPDATE") for r in results)
        pruned = await self._prune(tenant, task_class, cls) if grew else []
        self._log(tenant, task_class, origin, refused, folded, pruned)
        credits = {op.op_id for op, _ in folded}
        await self._count(tenant, task_class, [r for r in results if r.op.op_id not in credits],
                          len(folded), len(pruned))
        return ApplyReport(results, refused, [(op.op_id, kept) for op, kept in folded],
                           [b.id for b in pruned])

    async def _checked_merge(
        self, tenant: str, task_class: str, ops: list[Operation]
    ) -> tuple[list[MergeResult], list[tuple[Operation, str]]]:
        """Screen `ops` for repeats, then merge them if the playbook is still what was
        screened against; otherwise screen again."""
        for _ in range(MERGE_ATTEMPTS):
            screened = await self._screen(tenant, task_class, ops)
            if screened.version is None:
                return await self.store.merge(tenant, task_class, screened.ops), []
            merged = await self.store.merge_if_unchanged(tenant, task_class, screened.ops,
                                                         screened.version)
            if merged is not None:
                return merged, screened.repeats
        raise PlaybookBusy(f"{tenant}/{task_class} changed under {MERGE_ATTEMPTS} checks")

    def _guard(
        self, ops: Sequence[Operation], cls: ClassPlaybook
    ) -> tuple[list[Operation], list[tuple[Operation, str]]]:
        accepted: list[Operation] = []
        refused: list[tuple[Operation, str]] = []
        for op in ops:
            if op.type in ("ADD", "UPDATE"):
                verdict = check_content(op.content, self._settings.max_bullet_chars)
                if not verdict.ok:
                    log.warning("bullet refused (%s): %.120r", verdict.reason, op.content)
                    refused.append((op, verdict.reason))
                    continue
                op = replace(op, content=" ".join(op.content.split()))
            if op.type == "ADD" and cls.review == "manual":
                op = replace(op, status="pending")
            accepted.append(op)
        return accepted, refused

    async def _screen(self, tenant: str, task_class: str, ops: list[Operation]) -> Screened:
        """Turn each ADD that repeats a bullet (or an earlier ADD) into a credit to it."""
        if self._embedder is None or not any(op.type == "ADD" for op in ops):
            return Screened(ops, [], None)
        version = await self.store.version(tenant, task_class)  # read before the bullets
        known = [(b.id, b.section, b.content) for b in
                 await self.store.bullets(tenant, task_class)]
        kept: list[Operation] = []
        added: set[str] = set()  # op ids of the ADDs kept so far
        repeats: list[tuple[Operation, str]] = []
        for op in ops:
            if op.type != "ADD":
                kept.append(op)
                continue
            section = normalise_section(op.section)
            peers = [(i, c) for i, s, c in known if s == section]
            peer = await self._nearest(op.content, peers) if peers else None
            if peer is None:
                known.append((op.op_id, section, op.content))
                added.add(op.op_id)
                kept.append(op)
            elif peer in added:  # repeats an ADD of this delta
                repeats.append((op, peer))
            else:  # repeats a bullet: credit it (same op id: a redelivery applies once)
                kept.append(Operation("TAG", op.op_id, id=peer, sources=op.sources))
                repeats.append((op, peer))
        return Screened(kept, repeats, version)

    async def _nearest(self, content: str, peers: list[tuple[str, str]]) -> str | None:
        """The id of the peer `content` nearly duplicates, or None."""
        assert self._embedder is not None
        vecs = await self._embedder.embed([content, *(c for _, c in peers)])
        sims = vecs[1:] @ vecs[0]
        best = int(sims.argmax())
        return peers[best][0] if float(sims[best]) >= self._settings.dedup_threshold else None

    async def _prune(self, tenant: str, task_class: str, cls: ClassPlaybook) -> list[Bullet]:
        bullets = await self.store.bullets(tenant, task_class)
        total = count_tokens(render_sections(bullets))
        if total <= cls.max_tokens:
            return []
        now = time.time()
        half_life = self._settings.decay_half_life_days
        victims: list[Bullet] = []
        for bullet in sorted(bullets, key=lambda b: (score(b, now, half_life), b.id)):
            if total <= cls.max_tokens:
                break
            victims.append(bullet)
            total -= count_tokens(bullet.line()) + 1
        ops = [Operation("REMOVE", f"prune:{b.id}:{b.updated_at!r}", id=b.id) for b in victims]
        results = await self.store.merge(tenant, task_class, ops)
        applied = {r.bullet_id for r in results if r.outcome == "applied"}
        return [b for b in victims if b.id in applied]

    def _log(
        self,
        tenant: str,
        task_class: str,
        origin: Origin,
        refused: list[tuple[Operation, str]],
        folded: list[tuple[Operation, str]],
        pruned: list[Bullet],
    ) -> None:
        if self._drop_log is None:
            return
        events = [
            DropEvent("playbook", "drop", f"guard_{reason}", op.id or op.op_id, "bullet", None,
                      count_tokens(op.content), 0, text=op.content)
            for op, reason in refused
        ]
        events += [
            DropEvent("playbook", "dedup", "near_duplicate", op.op_id, "bullet", None,
                      count_tokens(op.content), 0, kept_as=kept, text=op.content)
            for op, kept in folded
        ]
        events += [
            DropEvent("playbook", "prune", "over_cap", b.id, "bullet", None,
                      count_tokens(b.line()), 0, text=b.content)
            for b in pruned
        ]
        self._drop_log.write(events, trace_id=origin.trace_id, session_id=origin.session_id,
                             tenant=tenant, task_class=task_class)

    async def _count(self, tenant: str, task_class: str, results: list[MergeResult],
                     folded: int, pruned: int) -> None:
        if self._metrics is None:
            return
        for result in results:
            if result.outcome == "applied":
                self._metrics.curator_operations.labels(result.op.type).inc()
        if folded:
            self._metrics.curator_operations.labels("FOLD").inc(folded)
        if pruned:
            self._metrics.curator_operations.labels("PRUNE").inc(pruned)
