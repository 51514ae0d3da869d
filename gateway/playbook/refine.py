"""Grow-and-refine: guard, merge, fold near-duplicates, prune past the cap.

Every write to a playbook (Curator deltas, admin edits, imports aside) goes through
`PlaybookEditor.apply`:
1. pollution guards refuse ADD/UPDATE content that is too long or tries to instruct the
   gateway or override the system prompt (drop log: stage playbook, action drop);
2. the deterministic merge applies the rest atomically and idempotently;
3. each bullet just added is compared (embedding cosine, same section) with the others; over
   the threshold, the lower-scored of the pair is folded into the better (action dedup);
4. past the class's `max_tokens`, the lowest-scored bullets are pruned (action prune).
Folding after the merge, not before, also catches two workers adding the same lesson at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gateway.observability.droplog import DropEvent
from gateway.playbook.bullet import Bullet, MergeResult, Operation, score
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

@dataclass(frozen=True, slots=True)
class Origin:
    """Where a delta came from, for the drop log."""

    trace_id: str = ""
    session_id: str = ""


@dataclass(frozen=True, slots=True)
class ApplyReport:
    results: list[MergeResult]
    refused: list[tuple[Operation, str]]
    folded: list[tuple[str, str]]  # (folded id, kept id)
    pruned: list[str]


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
        results = await self.store.merge(tenant, task_class, accepted)
        added = [r.bullet_id for r in results if r.op.type == "ADD" and r.outcome == "applied"]
        folded = await self._fold(tenant, task_class, added) if added else []
        # Anything that can grow the playbook (a new bullet, a longer rewrite) may push it
        # past its cap.
        grew = any(r.outcome == "applied" and r.op.type in ("ADD", "UPDATE") for r in results)
        pruned = await self._prune(tenant, task_class, cls) if grew else []
        self._log(tenant, task_class, origin, refused, folded, pruned)
        await self._count(tenant, task_class, results, len(folded), len(pruned))
        return ApplyReport(
            results, refused, [(a.id, b.id) for a, b in folded], [b.id for b in pruned]
        )

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

    async def _fold(
        self, tenant: str, task_class: str, added: list[str]
    ) -> list[tuple[Bullet, Bullet]]:
        if self._embedder is None:
            return []
        bullets = {b.id: b for b in await self.store.bullets(tenant, task_class)}
        ops: list[Operation] = []
        folded: list[tuple[Bullet, Bullet]] = []
        gone: set[str] = set()
        for new_id in added:
            new = bullets.get(new_id)
            if new is None or new_id in gone:
                continue
            peers = [b for b in bullets.values()
                     if b.section == new.section and b.id != new_id and b.id not in gone]
            if not peers:
                continue
            vecs = await self._embedder.embed([new.content, *(p.content for p in peers)])
            sims = vecs[1:] @ vecs[0]
            best = int(sims.argmax())
            if float(sims[best]) < self._settings.dedup_threshold:
                continue
            peer = peers[best]
            # The better record wins; on a tie the older bullet stays (its id is known).
            keep, lose = (new, peer) if new.helpful - new.harmful > (
                peer.helpful - peer.harmful) else (peer, new)
            ops.append(Operation("FOLD", f"fold:{lose.id}", id=lose.id, into=keep.id))
            folded.append((lose, keep))
            gone.add(lose.id)
        results = await self.store.merge(tenant, task_class, ops)
        applied = {r.bullet_id for r in results if r.outcome == "applied"}
        return [(lost, keep) for lost, keep in folded if lost.id in applied]

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
        folded: list[tuple[Bullet, Bullet]],
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
            DropEvent("playbook", "dedup", "near_duplicate", lost.id, "bullet", None,
                      count_tokens(lost.line()), 0, kept_as=keep.id, text=lost.content)
            for lost, keep in folded
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
