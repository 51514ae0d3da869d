"""Per-session state: the decided task class and the remembered compaction decisions.

Remembered decisions make compaction stable: an item masked or summarised once is rendered
the same way on every later call, so consecutive calls share their rendered prefix. Redis:
one HGETALL to read, one pipeline (HSET of the changed fields + EXPIRE) to write, and only
when something changed. `MemorySessionStore` serves `ctxgate replay` without a server.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import orjson

from gateway.store import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

SESSION_TTL_S = 7 * 86400


@dataclass(frozen=True, slots=True)
class Decision:
    """How one item is rendered from now on; re-applied verbatim on every later call."""

    stage: str
    action: str  # drop | mask | compress | dedup
    reason: str
    method: str  # drop | mask | summary | dedup | strip
    level: int = 1
    arg: str | None = None  # dedup: the representative's id; strip: the pattern
    # summary: the rendered text, fixed when decided (it depends on what the model saw
    # before the item at that time), so every later call and every replica sends it as is.
    text: str | None = None
    step: int = 0  # the session's compaction step that took it (the drop log's `step`)

    def dump(self) -> list[Any]:
        return [self.stage, self.action, self.reason, self.method, self.level, self.arg,
                self.text, self.step]

    @classmethod
    def load(cls, raw: list[Any]) -> Decision:
        return cls(
            str(raw[0]),
            str(raw[1]),
            str(raw[2]),
            str(raw[3]),
            int(raw[4]),
            raw[5],
            raw[6] if len(raw) > 6 else None,
            int(raw[7]) if len(raw) > 7 else 0,
        )


PLAYBOOK_PIN_FIELD = b"playbook"  # the field gateway/playbook/inject.py pins a block in


@dataclass
class SessionState:
    task_class: str | None = None
    decisions: dict[str, Decision] = field(default_factory=dict)
    horizon: int = 0  # messages before this index went through an age-based step
    calls: int = 0  # calls seen, and aging steps taken (they change the prefix)
    steps: int = 0
    prefix: str = ""  # "<messages>:<rolling hash>" of the last rendered request
    # The playbook block pinned for this session (written by the playbook, read-only here):
    # loaded with the rest of the session, so an open session's block costs no round trip.
    playbook_pin: bytes | None = None
    # The fidelity signals' record of the last call (`fidelity.py`), kept as stored: what
    # was forwarded of it (`lost`, rewritten only when that changes) and the tool calls so far.
    fidelity: bytes | None = None
    lost: bytes | None = None
    dirty: set[str] = field(default_factory=set)

    def encode(self, name: str) -> bytes:
        if name == "decisions":
            return orjson.dumps({k: d.dump() for k, d in self.decisions.items()})
        if name == "class":
            return (self.task_class or "").encode()
        if name == "horizon":
            return f"{self.horizon}:{self.calls}:{self.steps}".encode()
        if name in ("fidelity", "lost"):
            return getattr(self, name) or b""
        return self.prefix.encode()

    @classmethod
    def decode(
        cls, raw: dict[bytes, bytes], decoded: DecodedDecisions | None = None, key: Any = None
    ) -> SessionState:
        state = cls()
        if decoded is not None:
            state.decisions = decoded.get(key, raw.get(b"decisions"))
        if not raw:
            return state
        state.task_class = raw.get(b"class", b"").decode() or None
        if decoded is None and b"decisions" in raw:
            state.decisions = decode_decisions(raw[b"decisions"])
        horizon, _, counts = raw.get(b"horizon", b"0").decode().partition(":")
        state.horizon = int(horizon)
        if counts:
            calls, _, steps = counts.partition(":")
            state.calls, state.steps = int(calls), int(steps or 0)
        state.prefix = raw.get(b"prefix", b"").decode()
        state.playbook_pin = raw.get(PLAYBOOK_PIN_FIELD)
        state.fidelity, state.lost = raw.get(b"fidelity"), raw.get(b"lost")
        return state


def decode_decisions(raw: bytes) -> dict[str, Decision]:
    return {k: Decision.load(v) for k, v in orjson.loads(raw).items()}


class DecodedDecisions:
    """Decoded decisions per session while their stored bytes stay the same (a bounded LRU
    on the store): a call does not decode what the session's previous call saved or read.
    The dicts handed out are shared, so they are never changed in place (the engine
    replaces a session's decisions, it does not edit them)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._by_session: OrderedDict[Any, tuple[bytes | None, dict[str, Decision]]] = (
            OrderedDict()
        )

    def get(self, key: Any, raw: bytes | None) -> dict[str, Decision]:
        hit = self._by_session.get(key)
        if hit is not None and hit[0] == raw:
            self._by_session.move_to_end(key)
            return hit[1]
        decisions = decode_decisions(raw) if raw is not None else {}
        self.put(key, raw, decisions)
        return decisions

    def put(self, key: Any, raw: bytes | None, decisions: dict[str, Decision]) -> None:
        self._by_session[key] = (raw, decisions)
        self._by_session.move_to_end(key)
        if len(self._by_session) > self._size:
            self._by_session.popitem(last=False)


class SessionStore(Protocol):
    async def load(self, tenant: str, session_id: str) -> SessionState: ...
    async def save(self, tenant: str, session_id: str, state: SessionState) -> None: ...


class RedisSessionStore:
    def __init__(self, redis: aioredis.Redis) -> None:
        self._redis = redis
        self._decoded = DecodedDecisions()

    async def load(self, tenant: str, session_id: str) -> SessionState:
        raw = await self._redis.hgetall(keys.session(tenant, session_id))
        return SessionState.decode(
            cast(dict[bytes, bytes], raw), self._decoded, (tenant, session_id)
        )

    async def save(self, tenant: str, session_id: str, state: SessionState) -> None:
        if not state.dirty:
            return
        key = keys.session(tenant, session_id)
        mapping = {name: state.encode(name) for name in state.dirty}
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
            pipe.expire(key, SESSION_TTL_S)
            await pipe.execute()
        if "decisions" in mapping:
            self._decoded.put((tenant, session_id), mapping["decisions"], state.decisions)
        state.dirty.clear()


class MemorySessionStore:
    """A throwaway store for replays: states live in this object only."""

    def __init__(self) -> None:
        self._raw: dict[tuple[str, str], dict[bytes, bytes]] = {}
        self._decoded = DecodedDecisions()

    async def load(self, tenant: str, session_id: str) -> SessionState:
        raw = dict(self._raw.get((tenant, session_id), {}))
        return SessionState.decode(raw, self._decoded, (tenant, session_id))

    async def save(self, tenant: str, session_id: str, state: SessionState) -> None:
        raw = self._raw.setdefault((tenant, session_id), {})
        for name in state.dirty:
            raw[name.encode()] = state.encode(name)
        if "decisions" in state.dirty:
            self._decoded.put((tenant, session_id), raw[b"decisions"], state.decisions)
        state.dirty.clear()
