"""What the digest of a folder's listing by bare name keeps (`listing.listed_names`): a tool
output that heads a folder (`Directory listing for C:\\Users\\u:`) and lists its entries by
name, one a line, keeps, digested, its files' names as the listing printed them, under its
head line: the agent opens `.gitconfig` by that name many calls later, and a digest's value
list never held a dotfile's name with its dot (Gemini CLI's home folder, bench/README.md,
"Session 73, gem73"), where those names are no shorter than the generic digest (else that
goes, as before: "Session 74, gem74"). An output that is not such a listing ages as before
— the real engine on the embedded Redis, the shipped configuration."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import ContextEngine
from gateway.context.listing import aged_listing, listed_names
from tests.context.sessions import drops_add_up, fit_each_call, order_page, reading_session

HEAD = "Directory listing for C:\\Users\\u:"
FOLDERS = [".cache", ".config", ".ssh", "AppData", "Application Data", "Desktop", "Documents",
           "Downloads", "Music", "My Documents", "Pictures", "Saved Games", "Start Menu",
           "Templates", "Videos"]
FILES = [".claude.json", ".claude.json.backup", ".gitconfig", ".lmstudio-home-pointer",
         "desktop.ini", "NTUSER.DAT", "ntuser.ini", "remediate_hardening.ps1"]
# more of a home folder's files: its digest of names is longer than the generic one
MORE_FILES = [".bash_history", ".node_repl_history", ".python_history", ".wslconfig", ".npmrc",
              ".viminfo", "package-lock.json", "notes_2024.txt"]
TASK = "Check how git signs my commits."
TOOLS = [{"type": "function", "function": {"name": "list_directory",
                                           "parameters": {"type": "object"}}}]


def folder_listing(files: list[str] = FILES) -> str:
    """A home folder listed as Gemini CLI's `list_directory` prints it: folders marked
    first, then files."""
    return "\n".join([HEAD, *(f"[DIR] {name}" for name in FOLDERS), *files])


def test_a_folder_listing_is_read_by_its_head_and_names() -> None:
    listed = listed_names(folder_listing())
    assert listed == (HEAD, FILES)  # the files; a folder is listed again when opened
    assert listed_names("\n".join(FILES * 2)) is None  # no head naming a folder
    assert listed_names(order_page(0)) is None  # records are not names
    grep = "\n".join(f"src/a{k}.py:{k}: x = {k}" for k in range(20))
    assert listed_names(f"Matches in /home/u:\n{grep}") is None
    prose = "\n".join(f"Step {k} of the plan reads the config and writes it back." for k in
                      range(10))
    assert listed_names(f"Plan for /etc:\n{prose}") is None
    assert listed_names("\n".join([HEAD, *FILES[:4]])) is None  # a few names: a value list


def test_a_digested_folder_listing_keeps_its_files_under_its_head() -> None:
    listed = listed_names(folder_listing())
    assert listed is not None
    head, names = listed
    digest = aged_listing("[ctxgate: omitted x]", names, "Read `desktop.ini` first.", True,
                          head)
    assert digest is not None
    lines = digest.splitlines()
    assert lines[0] == HEAD and lines[1] == "[ctxgate: 7 of its 8 files:]"
    assert ".gitconfig" in lines and "desktop.ini" not in lines  # the conversation has it


def listing_session(files: list[str]) -> list[dict[str, Any]]:
    """The home folder's listing, then pages of orders; the agent opens no file of it."""
    return reading_session(TASK, [folder_listing(files)] + [order_page(k) for k in range(1, 36)],
                           "list_directory")


async def aged_forms(engine: ContextEngine, files: list[str], key: str) -> list[str]:
    """What each call sends of the listing of `files` once it is no longer sent as it is
    nor masked, and asserts every call's drops add up."""
    fits = await fit_each_call(engine, listing_session(files), TOOLS, f"t-{key}", key)
    assert all(drops_add_up(fit) for fit in fits)
    sent = [next(m["content"] for m in fit.body["messages"]
                 if m.get("tool_call_id") == "call_000") for fit in fits]
    return [text for text in sent if text != folder_listing(files)
            and not text.startswith("[ctxgate: omitted")]


async def test_an_aged_folder_listing_keeps_its_files_names(engine: ContextEngine) -> None:
    files = FILES + MORE_FILES
    digests = await aged_forms(engine, files, "aged-names")
    assert digests, "the listing was digested"
    assert all(text.startswith(f"{HEAD}\n[ctxgate: 16 of its 16 files:]\n") for text in digests)
    assert all(".gitconfig" in text and ".claude.json" in text for text in digests)
    assert all("[DIR]" not in text for text in digests)


async def test_a_folder_listing_whose_names_are_shorter_keeps_the_generic_digest(
        engine: ContextEngine) -> None:
    """Its 8 files' names are fewer characters than the generic digest: sent in its place,
    they would move the session's later steps (a Gemini CLI queue's three cache breaks,
    bench/README.md, "Session 74, gem74"), so the generic digest goes, as before."""
    digests = await aged_forms(engine, FILES, "short-names")
    assert digests, "the listing was digested"
    assert all(text.startswith(f"{HEAD}\n[…") and "[ctxgate: 8 of its" not in text
               for text in digests)
