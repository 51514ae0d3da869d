"""The deterministic merge against ACE's semantics, on a real Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from gateway.playbook.bullet import (
    Bullet,
    Operation,
    normalise_section,
    parse_line,
    section_slug,
)
from gateway.playbook.store import PlaybookStore


def add(op_id: str, section: str, content: str) -> Operation:
    return Operation("ADD", op_id, section=section, content=content)


async def test_add_numbers_ids_per_section_slug(redis: aioredis.Redis, tenant: str) -> None:
    store = PlaybookStore(redis)
    results = await store.merge(tenant, "code", [
        add("a1", "Common Mistakes", "Run the tests before committing."),
        add("a2", "common_mistakes", "Check the exit code."),
        add("a3", "Tool Usage", "Use rg, not grep -r."),
    ])
    assert [r.bullet_id for r in results] == ["err-00001", "err-00002", "tool-00001"]
    bullets = {b.id: b for b in await store.bullets(tenant, "code")}
    assert bullets["err-00002"].section == "common_mistakes"
    assert bullets["tool-00001"].helpful == 0 and bullets["tool-00001"].harmful == 0
    assert await store.version(tenant, "code") == 1


async def test_same_operation_twice_applies_once(redis: aioredis.Redis, tenant: str) -> None:
    store = PlaybookStore(redis)
    op = add("trace-1:0", "others", "Read the error message first.")
    first = await store.merge(tenant, "c", [op])
    second = await store.merge(tenant, "c", [op])
    assert first[0].outcome == "applied" and second[0].outcome == "duplicate"
    assert len(await store.bullets(tenant, "c")) == 1
    tag = Operation("TAG", "trace-2:0", id=first[0].bullet_id, helpful=1)
    await store.merge(tenant, "c", [tag])
    await store.merge(tenant, "c", [tag])
    bullet = await store.get(tenant, "c", first[0].bullet_id)
    assert bullet is not None and bullet.helpful == 1
    assert await store.version(tenant, "c") == 2  # a duplicate-only merge changes nothing


async def test_tag_update_remove(redis: aioredis.Redis, tenant: str) -> None:
    store = PlaybookStore(redis)
    [res] = await store.merge(tenant, "c", [add("x", "strategies", "Plan first.")])
    bid = res.bullet_id
    await store.merge(tenant, "c", [
        Operation("TAG", "t1", id=bid, helpful=2, harmful=1, sources=("trace-a",)),
        Operation("TAG", "t2", id=bid, helpful=0, harmful=1, sources=("trace-b",)),
        Operation("UPDATE", "u1", id=bid, content="Plan first, then act."),
    ])
    bullet = await store.get(tenant, "c", bid)
    assert bullet is not None
    assert (bullet.helpful, bullet.harmful) == (2, 2)
    assert bullet.content == "Plan first, then act."
    assert bullet.sources == ("trace-a", "trace-b")
    assert bullet.updated_at >= bullet.created_at
    [removed] = await store.merge(tenant, "c", [Operation("REMOVE", "r1", id=bid)])
    assert removed.outcome == "applied"
    assert await store.get(tenant, "c", bid) is None
    [missing] = await store.merge(tenant, "c", [Operation("TAG", "t3", id=bid, helpful=1)])
    assert missing.outcome == "missing"


async def test_counters_continue_after_remove(redis: aioredis.Redis, tenant: str) -> None:
    store = PlaybookStore(redis)
    [a] = await store.merge(tenant, "c", [add("1", "others", "one")])
    await store.merge(tenant, "c", [Operation("REMOVE", "2", id=a.bullet_id)])
    [b] = await store.merge(tenant, "c", [add("3", "others", "two")])
    assert (a.bullet_id, b.bullet_id) == ("misc-00001", "misc-00002")  # ids are never reused


async def test_fold_sums_counters_and_sources(redis: aioredis.Redis, tenant: str) -> None:
    store = PlaybookStore(redis)
    res = await store.merge(tenant, "c", [
        Operation("ADD", "1", section="others", content="a", sources=("s1",)),
        Operation("ADD", "2", section="others", content="b", sources=("s2",)),
    ])
    keep, lose = res[0].bullet_id, res[1].bullet_id
    await store.merge(tenant, "c", [Operation("TAG", "3", id=lose, helpful=3)])
    await store.merge(tenant, "c", [Operation("FOLD", "4", id=lose, into=keep)])
    bullets = await store.bullets(tenant, "c")
    assert [b.id for b in bullets] == [keep]
    assert bullets[0].helpful == 3 and bullets[0].sources == ("s1", "s2")


async def test_playbooks_are_separate_per_tenant_and_class(
    redis: aioredis.Redis, tenant: str
) -> None:
    store = PlaybookStore(redis)
    await store.merge(tenant, "a", [add("same-op", "others", "for class a")])
    [other] = await store.merge(tenant + "x", "a", [add("same-op", "others", "other tenant")])
    assert other.outcome == "applied" and other.bullet_id == "misc-00001"
    assert [b.content for b in await store.bullets(tenant, "b")] == []
    assert (tenant, "a") in await store.namespaces()


async def test_import_replaces_and_moves_counters(redis: aioredis.Redis, tenant: str) -> None:
    store = PlaybookStore(redis)
    await store.merge(tenant, "c", [add("1", "others", "old")])
    await store.replace(tenant, "c", [Bullet("err-00007", "common_mistakes", "imported", 1, 0)])
    [res] = await store.merge(tenant, "c", [add("2", "common mistakes", "next")])
    assert res.bullet_id == "err-00008"
    assert {b.id for b in await store.bullets(tenant, "c")} == {"err-00007", "err-00008"}


def test_line_format_round_trips() -> None:
    bullet = Bullet("err-00001", "common_mistakes", "Check exit codes.", 3, 1)
    assert bullet.line() == "[err-00001] helpful=3 harmful=1 :: Check exit codes."
    assert parse_line(bullet.line()) == ("err-00001", 3, 1, "Check exit codes.")
    assert section_slug("Strategies and Hard Rules") == "str"
    assert section_slug("Database Migrations") == "dm"
    assert normalise_section("!!!") == "others" and section_slug("!!!") == "misc"
    assert len(normalise_section("very long section name " * 10)) <= 40
