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


# How long an agent's sessions run: of its sessions, how many reached each of `RUN_MARKS`
# calls (`AgentRunStore`; the first mark counts the sessions started). A step on a session
# weighs its rewrites over the calls to come (`steps.unrepaid`); an agent whose sessions
# mostly end young says how many are left better than a floor measured on long sessions
# (`steps.agent_left`). Counts at marks, not the longest session: one long outlier would
# set the longest for good (Moatless runs: one 21-call run of 76 kept the rule off while
# nine in ten ran 11 calls or fewer).
RUN_MARKS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 16, 20, 24, 32)
_FIELDS = tuple(f"reached:{mark}" for mark in RUN_MARKS)

# ARGV: the field to count one more session in ('' to read only), the TTL, the fields read.
_NOTE_RUN = """
if ARGV[1] ~= '' then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return redis.call('HMGET', KEYS[1], unpack(ARGV, 3))
"""


class AgentRunStore(Protocol):
    async def note(self, tenant: str, fingerprint: str, calls: int) -> tuple[int, ...]:
        """Record a session of the agent at its `calls`-th call (1: a new session); returns
        the agent's sessions that reached each of `RUN_MARKS` calls (this one included)."""
        ...


class RedisAgentRunStore:
    """One hash per agent (`keys.agent_runs`). A call writes only when its session reaches
    one of `RUN_MARKS` (one script call: count it, read the record); between marks it reads
    the record this process last had (`_known`, refreshed by every write): a session past
    its first calls costs a round trip at a few of its calls only."""

    def __init__(self, redis: aioredis.Redis, known: int = 4096) -> None:
        self._note = redis.register_script(_NOTE_RUN)
        self._known: LRUCache[tuple[str, str], tuple[int, ...]] = LRUCache(maxsize=known)

    async def note(self, tenant: str, fingerprint: str, calls: int) -> tuple[int, ...]:
        known = self._known.get((tenant, fingerprint))
        mark = calls in RUN_MARKS
        if known is not None and not mark:
            return known
        field = f"reached:{calls}" if mark else ""
        raw = await self._note(keys=[keys.agent_runs(tenant, fingerprint)],
                               args=[field, AGENT_TTL_S, *_FIELDS])
        record = tuple(int(value or 0) for value in raw)
        self._known[(tenant, fingerprint)] = record
        return record


class MemoryAgentRunStore:
    """For replays without a server: records live in this object only."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], tuple[int, ...]] = {}

    async def note(self, tenant: str, fingerprint: str, calls: int) -> tuple[int, ...]:
        record = self._runs.get((tenant, fingerprint), (0,) * len(RUN_MARKS))
        if calls in RUN_MARKS:
            at = RUN_MARKS.index(calls)
            record = (*record[:at], record[at] + 1, *record[at + 1:])
        self._runs[(tenant, fingerprint)] = record
        return record
