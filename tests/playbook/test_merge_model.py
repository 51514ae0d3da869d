"""The Lua merge against a plain-Python model of ACE's semantics, on random operation
sequences (hypothesis), each delivered twice: the second delivery must change nothing."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.playbook.bullet import Operation, section_slug
from gateway.playbook.store import PlaybookStore


@dataclass
class Model:
    """ACE: ADD numbers ids per section slug; TAG adds counts; UPDATE rewrites; REMOVE drops."""

    bullets: dict[str, dict[str, object]] = field(default_factory=dict)
    seq: dict[str, int] = field(default_factory=dict)
    applied: set[str] = field(default_factory=set)

    def apply(self, op: Operation) -> None:
        if op.op_id in self.applied:
            return
        self.applied.add(op.op_id)
        if op.type == "ADD":
            slug = section_slug(op.section)
            self.seq[slug] = self.seq.get(slug, 0) + 1
            bid = f"{slug}-{self.seq[slug]:05d}"
            self.bullets[bid] = {"content": op.content, "helpful": 0, "harmful": 0}
        elif op.id in self.bullets:
            bullet = self.bullets[op.id]
            if op.type == "REMOVE":
                del self.bullets[op.id]
            elif op.type == "UPDATE":
                bullet["content"] = op.content
            elif op.type == "TAG":
                bullet["helpful"] = max(0, int(bullet["helpful"]) + op.helpful)  # type: ignore[call-overload]
                bullet["harmful"] = max(0, int(bullet["harmful"]) + op.harmful)  # type: ignore[call-overload]


SECTIONS = ["common_mistakes", "Tool Usage", "Déploiement & rollback"]
IDS = [f"{section_slug(s)}-{n:05d}" for s in SECTIONS for n in range(1, 3)]
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
               min_size=1, max_size=40)


@st.composite
def operations(draw: st.DrawFn) -> list[Operation]:
    ops = []
    for index in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["ADD", "ADD", "TAG", "UPDATE", "REMOVE"]))
        redelivered = draw(st.sampled_from([True, False, False, False]))
        op_id = f"op-{draw(st.integers(0, index)) if redelivered else index}"
        if kind == "ADD":
            ops.append(Operation("ADD", op_id, section=draw(st.sampled_from(SECTIONS)),
                                 content=draw(TEXT)))
        elif kind == "TAG":
            ops.append(Operation("TAG", op_id, id=draw(st.sampled_from(IDS)),
                                 helpful=draw(st.integers(-1, 3)),
                                 harmful=draw(st.integers(0, 3))))
        elif kind == "UPDATE":
            ops.append(Operation("UPDATE", op_id, id=draw(st.sampled_from(IDS)),
                                 content=draw(TEXT)))
        else:
            ops.append(Operation("REMOVE", op_id, id=draw(st.sampled_from(IDS))))
    return ops


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations(), split=st.integers(0, 25))
def test_lua_merge_matches_the_model(redis_url: str, ops: list[Operation], split: int) -> None:
    async def run() -> dict[str, dict[str, object]]:
        client = aioredis.Redis.from_url(redis_url)
        store, tenant = PlaybookStore(client), "h" + uuid.uuid4().hex[:10]
        await store.merge(tenant, "c", ops[:split])  # two deliveries of overlapping batches
        await store.merge(tenant, "c", ops[split:])
        await store.merge(tenant, "c", ops)
        state = {b.id: {"content": b.content, "helpful": b.helpful, "harmful": b.harmful}
                 for b in await store.bullets(tenant, "c")}
        await client.aclose()
        return state

    model = Model()
    for op in ops:
        model.apply(op)
    assert asyncio.run(run()) == model.bullets
