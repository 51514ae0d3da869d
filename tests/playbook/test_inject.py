"""Rendering and per-session pinned injection."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import redis.asyncio as aioredis

from gateway.embeddings import Vectors
from gateway.playbook.bullet import Bullet, Operation
from gateway.playbook.inject import PlaybookInjector
from gateway.playbook.render import CLOSE, OPEN, fit_to_cap, render_block
from gateway.playbook.store import PlaybookStore
from gateway.playbook.tokens import count_tokens
from tests.playbook.conftest import WordEmbedder


def test_render_format() -> None:
    block = render_block([
        Bullet("tool-00001", "tool_usage", "Use rg.", 2, 0),
        Bullet("err-00002", "common_mistakes", "Check exit codes.", 0, 1),
        Bullet("err-00001", "common_mistakes", "Read the traceback.", 3, 0),
    ])
    lines = block.splitlines()
    assert lines[0] == OPEN and lines[-1] == CLOSE
    assert "cite its id in square brackets" in lines[1] and "[err-00001]" in lines[1]
    body = lines[lines.index("## COMMON MISTAKES"):-1]
    assert body == [
        "## COMMON MISTAKES",
        "[err-00001] helpful=3 harmful=0 :: Read the traceback.",
        "[err-00002] helpful=0 harmful=1 :: Check exit codes.",
        "",
        "## TOOL USAGE",
        "[tool-00001] helpful=2 harmful=0 :: Use rg.",
    ]


def test_fit_to_cap_never_exceeds() -> None:
    bullets = [Bullet(f"misc-{i:05d}", f"s{i % 3}", f"lesson number {i} " * 3) for i in range(60)]
    for cap in (120, 200, 400, 900):
        chosen = fit_to_cap(bullets, cap)
        assert chosen and count_tokens(render_block(chosen)) <= cap
        assert len(fit_to_cap(bullets, cap * 2)) > len(chosen)
    assert fit_to_cap(bullets, 10) == []


async def seed(redis: aioredis.Redis, tenant: str, *contents: str) -> list[str]:
    results = await PlaybookStore(redis).merge(tenant, "code", [
        Operation("ADD", f"seed-{uuid.uuid4().hex}", section="tool_usage", content=c)
        for i, c in enumerate(contents)])
    return [r.bullet_id for r in results]


async def test_empty_playbook_injects_nothing(redis: aioredis.Redis, tenant: str) -> None:
    injector = PlaybookInjector(redis, WordEmbedder())
    assert await injector.block_for_session(tenant, "code", "s1", "fix tests", 500) is None
    await seed(redis, tenant, "Run the linter.")
    # The session started without a playbook and keeps it that way.
    assert await injector.block_for_session(tenant, "code", "s1", "fix tests", 500) is None
    assert await injector.block_for_session(tenant, "code", "s2", "fix tests", 500) is not None


async def test_block_is_pinned_per_session(redis: aioredis.Redis, tenant: str) -> None:
    await seed(redis, tenant, "Run the linter before pushing.")
    injector = PlaybookInjector(redis, WordEmbedder())
    first = await injector.block_for_session(tenant, "code", "s1", "lint the code", 500)
    await seed(redis, tenant, "A brand new lesson.")
    again = await injector.block_for_session(tenant, "code", "s1", "something else", 500)
    assert first is not None and again == first
    assert first.tokens == count_tokens(first.text)
    fresh = await injector.block_for_session(tenant, "code", "s2", "lint the code", 500)
    assert fresh is not None and "A brand new lesson." in fresh.text
    other = await injector.block_for_session(tenant + "z", "code", "s1", "lint the code", 500)
    assert other is None  # another tenant's playbook is empty


async def test_most_relevant_bullets_fill_the_cap(redis: aioredis.Redis, tenant: str) -> None:
    ids = await seed(redis, tenant,
                     "Format dates as ISO 8601 in reports.",
                     "Quote shell arguments that contain spaces.",
                     "When pytest fails with ImportError install the package first.")
    injector = PlaybookInjector(redis, WordEmbedder())
    frame = count_tokens(render_block([Bullet("tool-00001", "tool_usage", "x")]))
    cap = frame + 14  # room for one of the three
    one = fit = await injector.block_for_session(
        tenant, "code", "s1", "pytest fails with ImportError", cap)
    assert fit is not None and fit.bullet_ids == [ids[2]] and fit.tokens <= cap
    everything = await injector.block_for_session(tenant, "code", "s2", "x", 2000)
    assert everything is not None and everything.bullet_ids == sorted(ids)
    assert one.text != everything.text


async def test_existing_session_costs_one_round_trip(redis: aioredis.Redis, tenant: str) -> None:
    await seed(redis, tenant, "Lesson.")
    injector = PlaybookInjector(redis, WordEmbedder())
    await injector.block_for_session(tenant, "code", "s1", "q", 500)
    calls: list[str] = []
    original = redis.execute_command

    async def counting(*args: object, **kwargs: object) -> object:
        calls.append(str(args[0]))
        return await original(*args, **kwargs)

    redis.execute_command = counting  # type: ignore[method-assign]
    try:
        await injector.block_for_session(tenant, "code", "s1", "q", 500)
    finally:
        redis.execute_command = original  # type: ignore[method-assign]
    assert calls == ["HGET"]


async def test_small_playbook_needs_no_embedding(redis: aioredis.Redis, tenant: str) -> None:
    class Counting(WordEmbedder):
        calls = 0

        async def embed(self, texts: Sequence[str]) -> Vectors:
            Counting.calls += 1
            return await super().embed(texts)

    await seed(redis, tenant, "One lesson.", "Another lesson.")
    injector = PlaybookInjector(redis, Counting())
    block = await injector.block_for_session(tenant, "code", "s1", "q", 800)
    assert block is not None and len(block.bullet_ids) == 2 and Counting.calls == 0
    await injector.block_for_session(tenant, "code", "s2", "q", block.tokens - 1)
    assert Counting.calls == 1  # over the cap: ranked by relevance


async def test_pin_loaded_with_the_session_gives_the_same_block(
        redis: aioredis.Redis, tenant: str) -> None:
    from gateway.context.session import RedisSessionStore

    await seed(redis, tenant, "Pin me.")
    injector = PlaybookInjector(redis, WordEmbedder())
    first = await injector.block_for_session(tenant, "code", "s1", "q", 500)
    state = await RedisSessionStore(redis).load(tenant, "s1")  # what the engine loads anyway
    assert state.playbook_pin is not None
    assert injector.pinned_block(state.playbook_pin) == first
    empty = await injector.block_for_session(tenant + "e", "code", "s1", "q", 500)
    pinned_empty = (await RedisSessionStore(redis).load(tenant + "e", "s1")).playbook_pin
    assert empty is None and pinned_empty is not None  # "nothing" is pinned too
    assert injector.pinned_block(pinned_empty) is None
