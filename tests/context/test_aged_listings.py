"""What an aged path listing keeps (`listing.py`): a tool output whose lines are file paths
(a glob's, a `find`'s) keeps, digested, its shallowest paths and, masked, the paths the
conversation names below the listing's folder, whole, as the agent re-types them to open
the file (OpenCode's first-turn `glob **/*`: files read by absolute path 30 calls after the
listing was masked). Hash-named files and paths written whole elsewhere are left out; an
output that is not a listing ages as before — the real engine on the embedded Redis, the
shipped configuration."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.listing import aged_listing, kept_paths, listed_paths
from gateway.settings import Settings
from tests.context.sessions import (
    drops_add_up,
    fit_agreed,
    fit_each_call,
    memory_engine,
    order_page,
    reading_session,
)

ROOT = "/home/u/proj/"
NAMED = f"{ROOT}.agents/skills/release/SKILL.md"  # the conversation names its tail
TASK = "Audit the orders, then update the release skill."
TOOLS = [{"type": "function", "function": {"name": "read_page",
                                           "parameters": {"type": "object"}}}]


def glob_output() -> str:
    """A glob of a repository: its own files, a vendored tree, git objects, then a note."""
    paths = [f"{ROOT}.git/objects/{k:02x}/{'3f9a' * 9}{k:02x}" for k in range(20)]
    paths += [f"{ROOT}vendor/lib/pkg{k}/dist/module{k}.js" for k in range(30)]
    paths += [f"{ROOT}README.md", f"{ROOT}src/app.ts", f"{ROOT}src/config.ts", NAMED]
    return "\n".join(paths) + "\n\n(Results are truncated: showing first 100 results.)"


def test_a_listing_is_read_by_its_lines() -> None:
    paths = listed_paths(glob_output())
    assert paths is not None and len(paths) == 54 and paths[-1] == NAMED
    assert listed_paths(order_page(0)) is None  # records are not paths
    assert listed_paths("\n".join(f"{ROOT}src/a{k}.py:{k}: x = {k}" for k in range(20))) is None
    assert listed_paths(f"{ROOT}a/b\n{ROOT}a/c") is None  # a few names: a value list keeps them


def test_a_masked_listing_keeps_the_paths_the_conversation_names() -> None:
    paths = listed_paths(glob_output())
    assert paths is not None
    said = "I will edit `.agents/skills/release/SKILL.md` and `src/app.ts` next."
    # `src/config.ts` beside the named `src/app.ts` too (`test_a_masked_listing_keeps_…_beside`)
    assert kept_paths(paths, said) == [f"{ROOT}src/app.ts", f"{ROOT}src/config.ts", NAMED]
    # a path the conversation writes whole is read there; a bare word names no file
    assert kept_paths(paths, f"{said} {ROOT}src/app.ts") == [NAMED]
    assert kept_paths(paths, "Nothing named here, not even SKILL.md.") == []
    masked = aged_listing("[ctxgate: omitted /home/u/proj/.git…]", paths, said)
    assert masked is not None
    assert masked.startswith("[ctxgate: omitted /home/u/proj/.git…; 3 of its 54 paths:]\n")
    assert aged_listing("[ctxgate: omitted x]", paths, "") is None  # a plain placeholder
    # a digest keeps the shallowest others too, never a hash-named one
    digest = aged_listing("[ctxgate: omitted x]", paths, "", digest=True)
    assert digest is not None and f"{ROOT}README.md" in digest and NAMED in digest
    assert ".git/objects" not in digest


def test_a_masked_listing_keeps_the_files_beside_a_named_one() -> None:
    """The conversation names `.agents/commands/commit.md` below the listing's folder: the
    other files of `.agents/commands/` are kept too (the agent opens `rule.md` next by the
    path the listing printed), not those of a sub-folder, of another folder, of the common
    folder itself, nor one the conversation writes whole."""
    own = [f"{ROOT}.agents/commands/commit.md", f"{ROOT}.agents/commands/rule.md",
           f"{ROOT}.agents/commands/release.md", f"{ROOT}.agents/commands/old/draft.md",
           f"{ROOT}.agents/skills/lint/SKILL.md", f"{ROOT}package.json", f"{ROOT}README.md"]
    objects = [f"{ROOT}.git/objects/{k:02x}/{'3f9a' * 9}{k:02x}" for k in range(4)]
    paths = listed_paths("\n".join(objects + own))
    assert paths is not None
    said = "Committed with `.agents/commands/commit.md` as the notes say."
    assert kept_paths(paths, said) == own[:3]
    # a file written whole elsewhere is read there
    assert kept_paths(paths, f"{said} {ROOT}.agents/commands/release.md") == own[:2]
    # a file of the common folder anchors nothing: its folder is the whole project's
    assert kept_paths(paths, "Bumped `package.json`.") == [f"{ROOT}package.json"]
    masked = aged_listing("[ctxgate: omitted /home/u/proj/.git…]", paths, said)
    assert masked is not None and masked.endswith(f"\n{ROOT}.agents/commands/rule.md\n"
                                                  f"{ROOT}.agents/commands/release.md")


def listing_session() -> list[dict[str, Any]]:
    """A glob, then pages of orders; the agent's prose names the skill file by its part
    below the listing's folder on its fifth turn."""
    messages = reading_session(TASK, [glob_output()] + [order_page(k) for k in range(1, 36)],
                               "read_page")
    messages[10]["content"] = "The release steps live in `.agents/skills/release/SKILL.md`."
    return messages


async def test_an_aged_listing_keeps_the_path_named_since(engine: ContextEngine) -> None:
    messages = listing_session()
    fits = await fit_each_call(engine, messages, TOOLS, "t-list", "aged-listing")
    sent = [next(m["content"] for m in fit.body["messages"]
                 if m.get("tool_call_id") == "call_000") for fit in fits]
    aged = [text for text in sent if text.startswith("[ctxgate: omitted")]
    assert aged, "the listing aged"
    assert all(NAMED in text and ".git/objects" not in text for text in aged)
    assert all("vendor/lib/pkg29" not in text for text in aged)  # deep and never named
    assert f"{ROOT}README.md" in aged[0]  # digested: its shallowest paths
    # masked: the path the conversation named, whole
    assert aged[-1] == f"[ctxgate: omitted /home/u/proj/.gi…; 1 of its 54 paths:]\n{NAMED}"
    assert all(drops_add_up(fit) for fit in fits)


async def test_a_prefix_cached_engine_ages_a_listing_alike(settings: Settings,
                                                            embedder: Any) -> None:
    cached, plain = memory_engine(settings, embedder, True), memory_engine(settings, embedder,
                                                                           False)
    messages = listing_session()
    last: Any = None
    for end in range(3, len(messages)):
        if messages[end]["role"] == "assistant":
            body = {"model": "gpt-4o", "messages": messages[:end], "tools": TOOLS}
            call = CallContext("t-list", f"tr-{end}", {"x-ctxgate-session-id": "agreed"})
            last = await fit_agreed(cached, plain, body, call)
    glob = next(m["content"] for m in last.body["messages"] if m.get("tool_call_id") == "call_000")
    assert glob.endswith(f"paths:]\n{NAMED}")


def test_a_digest_lists_a_stores_records_after_the_projects_files() -> None:
    """A folder holding hash-named files (git's `.git/`) is a tool's store: its shallow
    records (`.git/index`) come after the project's own files, which a digest's room keeps
    (OpenCode's `core/tsconfig.json` in place of `.git/COMMIT_EDITMSG`)."""
    records = [f"{ROOT}.git/{name}" for name in ("COMMIT_EDITMSG", "index", "config", "HEAD")]
    own = [f"{ROOT}src/module_{k}/index.ts" for k in range(24)]  # more than the room
    paths = listed_paths("\n".join(glob_output().splitlines()[:20] + records + own))
    assert paths is not None
    digest = aged_listing("[ctxgate: omitted x]", paths, "", digest=True)
    assert digest is not None and f"{ROOT}src/module_0/index.ts" in digest
    assert f"{ROOT}.git/index" not in digest and ".git/objects" not in digest
