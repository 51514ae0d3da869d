"""A digest made while a queue's later task is the current one (`summarize._mentions`) lists
a name the output writes with a closing `/` (a folder: `tasks/gyy/robots-handler/`) with
it, and lists it even when the bare name is known elsewhere (a listing's records name it
without the `/`): the agent types the folder as the output wrote it, the value list ended
it before the `/` (bench/README.md, "Toolathlon queues' recall, part thirty-four"). A first
task's digest lists what it did."""

from __future__ import annotations

from gateway.context.focus import Focus
from gateway.context.summarize import summarize

OWNERS = ("fan", "gyy", "haoze", "jl")
PATHS = [f"tasks/{o}/tool-{k}" for o in OWNERS for k in range(3)]
OUTPUT = "\n".join(
    ["=== STDOUT ===", f"Need to check {len(PATHS)} tasks", "", "Sample paths to check:"]
    + [f"  {p}/ on branch {p.split('/')[1]}-dev" for p in PATHS]
    + ["=== EXECUTION INFO ===", "Return code: 0", "Execution time: 0.047 seconds"]
)
FIRST = frozenset({"orders", "audit"})  # the first task's terms (`Focus.lead`)
LATER = Focus(FIRST | {"implemented", "branches"}, FIRST)  # a later task's own terms besides
KNOWN = frozenset(PATHS)  # another result's records name the folders without their `/`


def mentions(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("[omitted text mentions"))


def test_later_task_lists_folders_as_written() -> None:
    line = mentions(summarize(OUTPUT, "tool_result", 3, known=KNOWN, focus=LATER))
    listed = [p for p in PATHS if f" {p}/ " in f" {line[:-1]} "]
    assert len(listed) >= 10  # the cap and LATER_TASK_VALUES: most of the 12 folders
    assert all(f"{p} " not in f"{line} " for p in PATHS)  # none without its `/`


def test_first_task_digest_as_before() -> None:
    digest = summarize(OUTPUT, "tool_result", 3, known=KNOWN, focus=FIRST)
    assert not any(f"{p}/" in digest for p in PATHS[1:-1])
    fresh = mentions(summarize(OUTPUT, "tool_result", 3, focus=FIRST))
    assert "/ " not in fresh and not fresh.endswith("/]")
