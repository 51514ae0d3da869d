"""The playbook store: bullets per (tenant, task class) in Redis, changed only by `merge`.

`merge` runs one Lua script (merge.lua) over the playbook's three keys, which share the
tenant's hash tag: all operations of one call apply atomically, and an operation whose id
was merged before is skipped, so a redelivered delta applies once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING

import orjson

from gateway.playbook.bullet import Bullet, MergeResult, Operation
from gateway.store import as_text, keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis



def namespace(tenant: str, task_class: str) -> str:
    return f"{tenant}/{task_class}"


def split_namespace(ns: str) -> tuple[str, str]:
    tenant, sep, task_class = ns.partition("/")
    if not sep or not tenant or not task_class:
        raise ValueError(f"namespace must be TENANT/TASK_CLASS, got {ns!r}")
    return tenant, task_class


class PlaybookStore:
    """Reads and merges playbooks; the only writer of bullet keys."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self._redis = redis
        source = resources.files("gateway.playbook").joinpath("merge.lua").read_text()
        self._merge = redis.register_script(source)

    async def merge(
        self, tenant: str, task_class: str, ops: Sequence[Operation], now: float | None = None
    ) -> list[MergeResult]:
        """Apply `ops` in order, atomically; each op id applies at most once, ever."""
        merged = await self._run_merge(tenant, task_class, ops, now, expect_version=None)
        assert merged is not None  # unconditional
        return merged

    async def merge_if_unchanged(
        self, tenant: str, task_class: str, ops: Sequence[Operation], version: int,
        now: float | None = None,
    ) -> list[MergeResult] | None:
        """`merge`, only if the playbook is still at `version`; None (nothing applied) if
        another writer changed it since the caller read it."""
        return await self._run_merge(tenant, task_class, ops, now, expect_version=version)

    async def _run_merge(
        self, tenant: str, task_class: str, ops: Sequence[Operation], now: float | None,
        expect_version: int | None,
    ) -> list[MergeResult] | None:
        if not ops:
            return []
        await self._redis.sadd(keys.PLAYBOOK_INDEX, namespace(tenant, task_class))
        payload = orjson.dumps([op.to_wire() for op in ops]).decode()
        flat = await self._merge(
            keys=[
                keys.playbook_bullets(tenant, task_class),
                keys.playbook_meta(tenant, task_class),
                keys.playbook_applied(tenant, task_class),
            ],
            args=[payload, repr(now if now is not None else time.time()),
                  "" if expect_version is None else str(expect_version)],
        )
        if len(flat) == 1 and as_text(flat[0]) == "stale":
            return None
        pairs = zip(flat[0::2], flat[1::2], strict=True)
        return [
            MergeResult(op, as_text(outcome), as_text(bullet_id))  # type: ignore[arg-type]
            for op, (outcome, bullet_id) in zip(ops, pairs, strict=True)
        ]

    async def bullets(self, tenant: str, task_class: str) -> list[Bullet]:
        """Every bullet, pending ones included, in id order."""
        raw = await self._redis.hgetall(keys.playbook_bullets(tenant, task_class))
        return sorted((Bullet.from_json(v) for v in raw.values()), key=lambda b: b.id)

    async def get(self, tenant: str, task_class: str, bullet_id: str) -> Bullet | None:
        raw = await self._redis.hget(keys.playbook_bullets(tenant, task_class), bullet_id)
        return Bullet.from_json(raw) if raw else None

    async def version(self, tenant: str, task_class: str) -> int:
        raw = await self._redis.hget(keys.playbook_meta(tenant, task_class), "version")
        return int(raw or 0)

    async def namespaces(self) -> list[tuple[str, str]]:
        members = await self._redis.smembers(keys.PLAYBOOK_INDEX)
        return sorted(split_namespace(as_text(m)) for m in members)

    async def replace(self, tenant: str, task_class: str, bullets: Sequence[Bullet]) -> None:
        """Import: the playbook becomes exactly `bullets`; id counters move past their ids."""
        counters: dict[str, int] = {}
        for bullet in bullets:
            slug, _, digits = bullet.id.rpartition("-")
            if slug and digits.isdigit():
                counters[f"seq:{slug}"] = max(counters.get(f"seq:{slug}", 0), int(digits))
        bullets_key = keys.playbook_bullets(tenant, task_class)
        meta_key = keys.playbook_meta(tenant, task_class)
        await self._redis.sadd(keys.PLAYBOOK_INDEX, namespace(tenant, task_class))
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(bullets_key)
            if bullets:
                pipe.hset(bullets_key, mapping={b.id: orjson.dumps(b.to_dict()) for b in bullets})
            for field, n in counters.items():
                pipe.hset(meta_key, field, n)
            pipe.hincrby(meta_key, "version", 1)
            await pipe.execute()

