"""What the mask of a short folder listing by bare name keeps (`stages.base._masked_names`):
its head line and its files' names, as its digest keeps them. A finished task's mask cut a
261-character listing of `.gemini` to a bare placeholder, and the next task read
`GEMINI.md`, a name no other message held (Gemini CLI queues, bench/README.md, "Session 76,
gem76"). A longer listing's mask stays the plain placeholder, and an output that is no such
listing is masked as before — the real engine on the embedded Redis, the shipped
configuration."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import ContextEngine
from gateway.context.stages.base import MASKED_NAMES_CHARS
from tests.context.sessions import drops_add_up, fit_each_call, order_page, task_queue

HEAD = "Directory listing for C:\\Users\\u\\.gemini:"
FOLDERS = ["antigravity", "antigravity-browser-profile", "tmp"]
# `installation_id` has no dot: not read as a file
FILES = ["gemini.ico", "GEMINI.md", "google_accounts.json", "installation_id",
         "mcp-oauth-tokens-v2.json", "settings.json", "trustedFolders.json"]
TASK = "Why is every shell command rejected?"
TOOLS = [{"type": "function", "function": {"name": "read_page",
                                           "parameters": {"type": "object"}}}]


def folder_listing(files: list[str] = FILES) -> str:
    """A folder listed as Gemini CLI's `list_directory` prints it: folders marked first."""
    return "\n".join([HEAD, *(f"[DIR] {name}" for name in FOLDERS), *files])


def listing_session(listing: str) -> list[dict[str, Any]]:
    """A first task that lists the folder and reads a few pages of orders, then a second
    task of many pages: the first task's outputs are masked once it is done."""
    return task_queue("You work on the user's machine with the tools.", [
        (TASK, 4, "The shell's safety parser rejects them."),
        ("Audit the orders.", 30, "The orders are audited.")],
        lambda k: listing if k == 1 else order_page(k))


async def sent_forms(engine: ContextEngine, listing: str, key: str) -> list[str]:
    """What each call sends in the listing's place; asserts every call's drops add up."""
    fits = await fit_each_call(engine, listing_session(listing), TOOLS, f"t-{key}", key)
    assert all(drops_add_up(fit) for fit in fits)
    return [next(m["content"] for m in fit.body["messages"]
                 if m.get("tool_call_id") == "call_001") for fit in fits]


async def test_a_masked_short_folder_listing_keeps_its_files_names(
        engine: ContextEngine) -> None:
    listing = folder_listing()
    assert len(listing) <= MASKED_NAMES_CHARS
    forms = await sent_forms(engine, listing, "masked-names")
    aged = [text for text in forms if text != listing]
    assert aged, "the listing aged"
    assert not any(text.startswith("[ctxgate: omitted") for text in aged)
    assert all(text.startswith(f"{HEAD}\n[ctxgate: 6 of its 6 files:]\n") for text in aged)
    assert all("GEMINI.md" in text.splitlines() for text in aged)


async def test_a_long_folder_listing_keeps_its_plain_mask(engine: ContextEngine) -> None:
    files = FILES + [f"notes_{k:03d}.txt" for k in range(40)]
    listing = folder_listing(files)
    assert len(listing) > MASKED_NAMES_CHARS
    forms = await sent_forms(engine, listing, "long-names")
    assert any(text.startswith("[ctxgate: omitted") for text in forms), "the listing was masked"
