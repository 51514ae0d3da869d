"""What an aged listing of paths that each failed the same way keeps (`listing.failed_paths`):
a search that could not read a tree prints one `path: Permission denied (os error 13)` a
line, and the agent turns to those files next by the paths it printed. Aged, digested or
masked, it keeps its folders: each as its few files, a large one as one line (a Gemini CLI
queue's `ripgrep` error, masked to its bare placeholder three calls before the agent listed
the repository it named; bench/README.md, "Session 75, gem75"). An output that is not such a
listing ages as before — the real engine on the embedded Redis, the shipped configuration."""

from __future__ import annotations

from gateway.context.engine import ContextEngine
from gateway.context.listing import failed_listing, failed_paths
from tests.context.sessions import drops_add_up, fit_each_call, order_page, reading_session

DENIED = "Permission denied (os error 13)"
REPO = "/home/u/notes-repo"
TRANSCRIPTS = [f"{REPO}/transcripts/agent-a{k:02d}f4.jsonl" for k in range(40)]
FILES = [f"{REPO}/README.md", *TRANSCRIPTS[:20], f"{REPO}/docs/SETUP.md", *TRANSCRIPTS[20:],
         f"{REPO}/scripts/convert_to_markdown.py", "/home/u/2025-12-30-export.txt"]
TASK = "Find where my chat history is saved."
TOOLS = [{"type": "function", "function": {"name": "search_file_content",
                                           "parameters": {"type": "object"}}}]


def denied_listing() -> str:
    """A search's error as Gemini CLI prints it: the tool's head, then one path a line."""
    lines = [f"{path}: {DENIED}" for path in FILES]
    return "Error during grep search operation: ripgrep exited with code 2: " + "\n".join(lines)


def test_a_listing_of_failed_paths_is_read_by_its_shared_message() -> None:
    assert failed_paths(denied_listing()) == (DENIED, FILES)
    grep = "\n".join(f"src/a{k}.py: x = {k}" for k in range(20))
    assert failed_paths(grep) is None  # a search's hits: each line says something else
    assert failed_paths("\n".join(f"{path}: {DENIED}" for path in FILES[:5])) is None  # few
    assert failed_paths(order_page(0)) is None


def test_its_aged_form_keeps_each_folder() -> None:
    text = failed_listing("[ctxgate: omitted Error during gre…]", DENIED, FILES)
    assert text.splitlines() == [
        f"[ctxgate: omitted Error during gre…; {len(FILES)} paths, each `{DENIED}`:]",
        f"{REPO}/README.md",
        f"{REPO}/transcripts/ (40 files)",
        f"{REPO}/docs/SETUP.md",
        f"{REPO}/scripts/convert_to_markdown.py",
        "/home/u/2025-12-30-export.txt",
    ]


async def test_an_aged_listing_of_failed_paths_keeps_its_folders(
        engine: ContextEngine) -> None:
    """The agent opens no file of it; each later call sends the listing as it is, or aged
    with its folders: never the bare placeholder, which named none of them."""
    messages = reading_session(TASK, [denied_listing()] + [order_page(k) for k in range(1, 36)],
                               "search_file_content")
    fits = await fit_each_call(engine, messages, TOOLS, "t-failed", "failed-paths")
    assert all(drops_add_up(fit) for fit in fits)
    sent = [next(m["content"] for m in fit.body["messages"] if m.get("tool_call_id") == "call_000")
            for fit in fits]
    aged = [text for text in sent if text != denied_listing()]
    assert aged, "the listing aged"
    assert all(f"{REPO}/scripts/convert_to_markdown.py" in text
               and f"{REPO}/transcripts/ (40 files)" in text for text in aged)
