"""A digest's value list keeps a file's `path:line[:col]` whole (`summarize._FILE_LINE`): an
agent's summary cites its edits as `app/deps.lock:41`, and a later turn re-types that token
whole, while the list split it at the `:` into the file (named elsewhere, so not listed) and a
bare `41`. The file alone is not listed beside it (the whole token holds it)."""

from __future__ import annotations

from gateway.context.summarize import summarize, values

SUMMARY = (
    "Done - I pinned the parser to the fork's commit and refreshed the lockfile, which is what "
    "the build reads first.\n\n"
    "- Updated `app/deps.lock:9` and `app/deps.lock:41` with the same pinned source.\n"
    "- Updated `app/manifest.json:13` to the fork's commit.\n"
    "- Updated `NOTES.md:76` to describe the workflow (refresh `app/deps.lock` after a fork "
    "update).\n"
)


def listed(out: str) -> list[str]:
    """The values of a digest's `[omitted text mentions: …]` line."""
    line = out.splitlines()[-1]
    assert line.startswith("[omitted text mentions:")
    return line.removeprefix("[omitted text mentions: ").removesuffix("]").split()


def test_values_keep_a_file_and_its_line_whole_only_when_asked() -> None:
    text = "see `src/app.py:12:5`, `lib/io.rs:3-9`, at 03:00, https://example.com:8080 x.y:3.5"
    assert values(text) == ["see", "src/app.py", "12", "lib/io.rs", "3-9", "at", "03:00",
                            "https", "example.com", "8080", "x.y", "3.5"]
    assert values(text, lines=True) == ["see", "src/app.py:12:5", "lib/io.rs:3-9", "at",
                                        "03:00", "https", "example.com", "8080", "x.y", "3.5"]


def test_an_aged_summary_lists_the_lines_it_cites_whole() -> None:
    # the files are named elsewhere the model sees (`known`): before, the list kept only the
    # bare numbers, and no `app/deps.lock:41` the agent re-types later
    known = frozenset({"app/deps.lock", "app/manifest.json", "NOTES.md"})
    out = summarize(SUMMARY, "assistant", 3, known)
    assert len(out) < len(SUMMARY)
    names = listed(out)
    for cited in ("app/deps.lock:9", "app/deps.lock:41", "app/manifest.json:13", "NOTES.md:76"):
        assert cited in names
    assert "41" not in names and "76" not in names


def test_a_file_listed_with_its_line_is_not_listed_again_bare() -> None:
    out = summarize(SUMMARY, "assistant", 3)
    names = listed(out)
    assert "app/deps.lock:41" in names
    assert "app/deps.lock" not in names  # held by `app/deps.lock:41`


def test_an_absolute_file_line_keeps_its_slash() -> None:
    text = SUMMARY + "- The crash was at `/srv/app/src/engine.c:214:9`, now guarded.\n"
    names = listed(summarize(text, "assistant", 3))
    assert "/srv/app/src/engine.c:214:9" in names


def test_a_tool_output_keeps_its_file_lines_split() -> None:
    # a compiler's or grep -n's output cites a line per row: whole, each would take a place
    # of the capped list (Claude Code's tune recall fell so), so they stay split there
    rows = [f"building target {k}: ok" for k in range(60)]
    warnings = ["src/engine.c:214:9: warning: 'width' shadows a global",
                "src/parse_args.c:88:1: warning: unused variable 'flags'"]
    text = "\n".join([*rows[:30], *warnings, *rows[30:]])
    names = listed(summarize(text, "tool_result", 3))
    assert "src/parse_args.c" in names
    assert not any(":" in n for n in names)


def test_a_link_with_a_port_is_not_a_file_line() -> None:
    rows = [f"request {k} served" for k in range(60)]
    text = "\n".join([*rows[:30], "listening on http://api.local.dev:8080 now", *rows[30:]])
    out = summarize(text, "tool_result", 3)
    assert "api.local.dev:8080" not in " ".join(n for n in listed(out) if "://" not in n)


def test_a_long_file_line_stays_split_so_its_line_is_still_listed() -> None:
    # over a listed value's 80 characters the whole token would be dropped (`_mentions`),
    # and with it the line's number, which the split values keep
    deep = "opt/env/lib/python3.9/site-packages/some_package/subpackage/inner/module_file.py"
    rows = [f"step {k} done" for k in range(60)]
    text = "\n".join([*rows[:30], f'  File "/x", in run  # /{deep}:9644 raised', *rows[30:]])
    assert values(text, lines=True) == values(text)
    assert "9644" in values(text, lines=True)
