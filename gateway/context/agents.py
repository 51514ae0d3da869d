"""The task class decided per agent, so that every session of one agent is classed alike.

An agent is its tenant, system prompt and tool set (`classify.agent_fingerprint`). The first
session of an agent whose class gets decided (by rule, agent policy or example) records it;
later sessions read it before any rule or embedding runs, whichever of them starts with a
short call. The first record wins (`SET NX`), so replicas racing on a new agent agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gateway.store import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

AGENT_TTL_S = 30 * 86400


class AgentClassStore(Protocol):
    async def get(self, tenant: str, fingerprint: str) -> str | None: ...

    async def claim(self, tenant: str, fingerprint: str, task_class: str) -> str:
        """Record `task_class` unless the agent has one already; returns the agent's class."""
        ...


class RedisAgentClassStore:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._redis = redis

    async def get(self, tenant: str, fingerprint: str) -> str | None:
        raw = await self._redis.get(keys.agent_class(tenant, fingerprint))
        return raw.decode() if isinstance(raw, bytes) else raw

    async def claim(self, tenant: str, fingerprint: str, task_class: str) -> str:
        key = keys.agent_class(tenant, fingerprint)
        if await self._redis.set(key, task_class, nx=True, ex=AGENT_TTL_S):
            return task_class
        return await self.get(tenant, fingerprint) or task_class


class MemoryAgentClassStore:
    """For replays without a server: records live in this object only."""

    def __init__(self) -> None:
        self._classes: dict[tuple[str, str], str] = {}

    async def get(self, tenant: str, fingerprint: str) -> str | None:
        return self._classes.get((tenant, fingerprint))

    async def claim(self, tenant: str, fingerprint: str, task_class: str) -> str:
        return self._classes.setdefault((tenant, fingerprint), task_class)
