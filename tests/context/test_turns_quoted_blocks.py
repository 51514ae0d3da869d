"""A turns note of an agent that edits by exact text keeps a call's text of lines (a file
written whole, a script) quotable: its lines go as written, indentation and repeated lines
kept, and only a run of two or more of them that the call's notes already have as one run
goes; such an agent quotes several indented lines of a file it wrote, and a note that sent
each line once and stripped lost every such quote (Gemini CLI; bench/README.md, "Session 70,
gem70"). An agent with no such edit gets its notes as before."""

from __future__ import annotations

import json
from typing import Any

from gateway.context.fold import FOLD_HEAD, TURNS_HEAD, Earlier, Run, call_line, turns_note
from gateway.context.quoting import first_quote_edit, spent_texts

SCRIPT = "\n".join([
    "#!/bin/bash",
    "set -e",
    "    # Alacritty",
    '    if [ -f "$HOME/.config/alacritty/dark.toml" ]; then',
    '        cp "$HOME/.config/alacritty/dark.toml" "$HOME/.config/alacritty/theme.toml"',
    "    fi",
    "    # Kitty",
    '    if [ -f "$HOME/.config/kitty/dark.conf" ]; then',
    '        cp "$HOME/.config/kitty/dark.conf" "$HOME/.config/kitty/theme.conf"',
    "    fi",
    "done",
])
FOOT = "\n".join([
    "    # Foot",
    '    if [ -f "$HOME/.config/foot/dark.ini" ]; then',
    '        cp "$HOME/.config/foot/dark.ini" "$HOME/.config/foot/foot.ini"',
    "    fi",
])
LONGER = SCRIPT.replace("done", f"{FOOT}\ndone")  # the same file written again, longer


def _write(n: int, asked: str, text: str) -> list[dict[str, Any]]:
    """A user turn whose fold note has a call writing `text` whole, and the reply."""
    call = {"id": f"c{n}", "type": "function", "function": {
        "name": "write_file",
        "arguments": json.dumps({"file_path": "/home/u/.local/bin/toggle-theme",
                                 "content": text})}}
    note = call_line(call, "Successfully wrote the file.")
    return [{"role": "user", "content": f"{asked}\n{FOLD_HEAD}\n{note}"},
            {"role": "assistant", "content": f"Wrote it ({n})."}]


def test_a_file_written_whole_stays_quotable_in_a_turns_note() -> None:
    messages = _write(0, "Write the theme script.", SCRIPT)
    note = turns_note(messages, Run(0, 1, 1), quoted=True)
    assert TURNS_HEAD.match(note)
    # the Kitty block quoted by a later edit: indented, its `fi` after the Alacritty one's
    quote = "\n".join(SCRIPT.split("\n")[6:10])
    assert quote in note
    assert SCRIPT.split("\n", 1)[1] in note  # every line as written, in order
    # an agent that does not edit by exact text: each line once, stripped, as before
    before = turns_note(messages, Run(0, 1, 1))
    assert quote not in before and "Kitty" in before and "\n    fi" not in before


def test_a_text_written_again_leaves_out_the_runs_an_earlier_note_has() -> None:
    earlier = Earlier()
    earlier.take(turns_note(_write(0, "Write the theme script.", SCRIPT), Run(0, 1, 1),
                            quoted=True))
    note = turns_note(_write(1, "Add foot too.", LONGER), Run(0, 1, 1), earlier, quoted=True)
    assert "    # Alacritty" not in note  # that run is in the earlier note, whole
    # the new block's lines go as written: a quote of them is a substring of the note
    assert "\n".join(FOOT.split("\n")[:3]) in note
    # and a quote of the older lines is one of the earlier note
    assert "\n".join(SCRIPT.split("\n")[6:10]) in earlier.text


def test_a_call_line_an_earlier_note_has_is_still_left_out() -> None:
    earlier = Earlier()
    first = _write(0, "Write the theme script.", "echo one")
    earlier.take(turns_note(first, Run(0, 1, 1), quoted=True))
    again = turns_note(_write(0, "Write it again.", "echo one"), Run(0, 1, 1), earlier,
                       quoted=True)
    assert again.split("\n")[1:] == ["Write it again."]


def _call(n: str, name: str, **args: str) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [{
        "id": n, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


PATH = "/home/u/.local/bin/toggle-theme"
QUOTE = "\n".join(SCRIPT.split("\n")[6:10])  # the Kitty block
EDIT = _call("e", "replace", file_path=PATH, old_string=QUOTE,
             new_string=QUOTE.replace("cp ", "ln -sf "))


def _turn(n: str) -> list[dict[str, Any]]:
    return [{"role": "tool", "tool_call_id": n, "content": "ok"},
            {"role": "user", "content": "Go on."}]


def test_an_exact_text_edit_is_one_of_part_of_a_text_written_whole_turns_before() -> None:
    """`first_quote_edit`: a call whose two strings share a line, one of them two or more
    lines of a text a call wrote whole in a turn before the previous one; an edit of what
    the previous turn wrote, of a tool output, or of all of a text (a retry) is not one."""
    write = _call("w", "write_file", file_path=PATH, content=SCRIPT)
    run = _call("r", "run_shell_command", command="bash toggle-theme")
    messages = [{"role": "user", "content": "Write it."}, write, *_turn("w"), run,
                *_turn("r"), EDIT]
    assert first_quote_edit(messages, len(messages)) == 7
    assert first_quote_edit(messages, 7) == -1
    # right after the write: the live tail has the text, no fold took it
    assert first_quote_edit([messages[0], write, *_turn("w"), EDIT], 5) == -1
    # a file read (a tool output), then edited: the agent quotes what it reads
    read = [{"role": "user", "content": "Fix it."}, run,
            {"role": "tool", "tool_call_id": "r", "content": SCRIPT}, run, *_turn("r"), EDIT]
    assert first_quote_edit(read, len(read)) == -1
    # the whole text quoted again: a retry of a call, not an edit of a part of a text
    retry = _call("x", "str_replace", path=PATH, old_str=QUOTE, new_str=None)  # type: ignore[arg-type]
    again = _call("y", "str_replace", path=PATH, old_str=QUOTE,
                  new_str=QUOTE.replace("cp ", "ln -sf "))
    assert first_quote_edit([messages[0], retry, *_turn("x"), run, *_turn("r"), again],
                            7) == -1


CMD = "\n".join([
    "for f in dark light; do",
    '    cp "$HOME/.config/kitty/$f.conf" "/tmp/kitty-$f.conf"',
    '    cp "$HOME/.config/foot/$f.ini" "/tmp/foot-$f.ini"',
    "done",
])


def test_a_command_goes_as_before() -> None:
    """`spent_texts`: a text a call naming no file wrote whole is a command, run, kept in
    no file a later edit quotes; a quoted note sends its lines as the base does, and a
    file's text as written."""
    write = _call("w", "write_file", file_path=PATH, content=SCRIPT)
    run = _call("r", "run_shell_command", command=CMD, description="Back up the themes.")
    messages = [write, *_turn("w"), run, *_turn("r"), EDIT]
    assert spent_texts(messages, 0, len(messages)) == [(CMD, False)]
    lines = [call_line(c, "ok") for m in (write, run, EDIT) for c in m["tool_calls"]]
    turn = [{"role": "user", "content": "Do it.\n" + FOLD_HEAD + "\n" + "\n".join(lines)},
            {"role": "assistant", "content": "Done."}]
    note = turns_note(turn, Run(0, 1, 1), quoted=True, spent=[(CMD, False)])
    kept = turns_note(turn, Run(0, 1, 1), quoted=True)
    assert CMD in kept and CMD not in note
    assert '\ncp "$HOME/.config/kitty/$f.conf" "/tmp/kitty-$f.conf"' in note  # stripped
    assert SCRIPT.split("\n", 1)[1] in note  # the file's text, as written
    assert QUOTE.replace("cp ", "ln -sf ") in note  # the edit's new text, too
