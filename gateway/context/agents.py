"""The task class decided per agent, so that every session of one agent is classed alike.

An agent is its tenant, system prompt and tool set (`classify.agent_fingerprint`). The first
session of an agent whose class gets decided (by rule, agent policy or example) records it;
later sessions read it before any rule or embedding runs, whichever of them starts with a
short call. The first record wins (`SET NX`), so replicas racing on a new agent agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from cachetools import LRUCache

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


# How long an agent's sessions run: the sessions it started and the most calls one of them
# has made so far (`AgentRunStore`). A step on a session weighs its rewrites over the calls
# to come (`steps.unrepaid`); an agent whose every session so far ended young says how many
# are left better than a floor measured on long sessions (`steps.agent_left`).
_NOTE_RUN = """
local sessions = redis.call('HINCRBY', KEYS[1], 'sessions', ARGV[2])
local longest = tonumber(redis.call('HGET', KEYS[1], 'longest') or '0')
local calls = tonumber(ARGV[1])
if calls > longest then
  longest = calls
  redis.call('HSET', KEYS[1], 'longest', longest)
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {sessions, longest}
"""


class AgentRunStore(Protocol):
    async def note(self, tenant: str, fingerprint: str, calls: int) -> tuple[int, int]:
        """Record a session of the agent at its `calls`-th call (1: a new session); returns
        the agent's sessions so far (this one included) and the most calls one has made."""
        ...


class RedisAgentRunStore:
    """One hash per agent (`keys.agent_runs`). A call writes only when its session is new
    or longer than the longest this process knows of (`_known`, refreshed by every write):
    the sessions of an agent that has reached its usual length cost no round trip."""

    def __init__(self, redis: aioredis.Redis, known: int = 4096) -> None:
        self._note = redis.register_script(_NOTE_RUN)
        self._known: LRUCache[tuple[str, str], tuple[int, int]] = LRUCache(maxsize=known)

    async def note(self, tenant: str, fingerprint: str, calls: int) -> tuple[int, int]:
        known = self._known.get((tenant, fingerprint))
        if known is not None and 1 < calls <= known[1]:
            return known
        raw = await self._note(keys=[keys.agent_runs(tenant, fingerprint)],
                               args=[calls, int(calls == 1), AGENT_TTL_S])
        record = (int(raw[0]), int(raw[1]))
        self._known[(tenant, fingerprint)] = record
        return record


class MemoryAgentRunStore:
    """For replays without a server: records live in this object only."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], tuple[int, int]] = {}

    async def note(self, tenant: str, fingerprint: str, calls: int) -> tuple[int, int]:
        sessions, longest = self._runs.get((tenant, fingerprint), (0, 0))
        record = (sessions + int(calls == 1), max(longest, calls))
        self._runs[(tenant, fingerprint)] = record
        return record
