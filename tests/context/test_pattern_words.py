"""A folded shell turn keeps the words its command lines open a pattern with (`fold.
pattern_words`): `sed -n '/def parse_expr/,/return/p'` finds code by its `def` line, and an
agent working a queue of tasks in one repository re-types that way of finding code in its
next tasks; the value search reads `/def` as the plain word `def` and the turns note left it
out (bench/README.md, "mini-SWE-agent queues' recall, part 3")."""

from __future__ import annotations

import re
from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.fold import Run, pattern_words, turns_note
from tests.context.test_shell_blocks import _answer, _session


def test_pattern_words_of_command_lines() -> None:
    masked = ("[ctxgate: omitted ```bash]\n$ sed -n '/def chunksizes(self)/,+20p' x/variable.py\n"
              "$ sed -i 's/if len(c) == 1 and not isinstance(c[0], Q):/if x/' a.py")
    assert pattern_words(masked) == ["/def", "Q):/if"]
    digest = ("```bash\nsed -n '/class UserChangeForm/,/def clean_password/p' forms.py\n```\n"
              "… line 12. …")
    assert pattern_words(digest) == ["/class"]  # `clean_password/p` is a value already
    # prose is not a command line, nor a python block's line
    assert pattern_words("THOUGHT: the /def line\n```python\nx = '/def'\n```") == []
    # a grep for a closing tag opens on a name as well
    assert pattern_words("$ grep -n '/body' a.html") == ["/body"]


def test_a_turns_note_keeps_a_sed_address() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"},
        {"role": "assistant", "content": "[ctxgate: omitted ```bash]\n"
                                         "$ sed -n '/def find_node/,/return/p' tree.py"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"},
        {"role": "assistant", "content": "[ctxgate: omitted ```bash]\n"
                                         "$ sed -n '/def walk/,/return/p' tree.py"},
    ]
    note = turns_note(messages, Run(0, 1, 3))
    assert "/def" in note.split()  # once: the second turn's is known
    assert note.count("/def") == 1 and "find_node/,/return/p" in note


def _first_task_reply(k: int) -> str:
    return (f"THOUGHT: I look at how the tree module defines its walker number {k}, from its "
            f"`def` line to the first return.\n\n```bash\n"
            f"sed -n '/def walk_{k}(self)/,/return/p' lib/tree_{k}.py\n```")


def _queue() -> tuple[list[dict[str, Any]], int]:
    first = _session(30, _first_task_reply)[:-1]
    first.append({"role": "user", "content": _answer(30)})
    first.append({"role": "assistant", "content": "```bash\necho COMPLETE_TASK_AND_SUBMIT\n```"})
    second = _session(60)[1:]
    return first + second, len(first)


async def test_a_later_task_sees_an_earlier_tasks_sed_address(engine: ContextEngine) -> None:
    messages, start = _queue()
    assert not any("/def" in str(m["content"]) for m in messages[start:])
    headers = {"x-ctxgate-session-id": "shell-pattern-words", "x-ctxgate-task-class": "default"}
    fitted = None
    for end in range(2, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end]},
                                  CallContext("t-spw", "s", headers))
        if end > start:  # every call of the second task still shows how the first found code
            sent = "\n".join(str(m.get("content")) for m in fitted.body["messages"])
            assert "/def" in sent, end
    assert fitted is not None
    sent = "\n".join(str(m.get("content")) for m in fitted.body["messages"])
    assert re.search(r"\[ctxgate: \d+ turns folded\]", sent)  # the first task was folded
    assert "how the tree module defines" not in sent  # its prose went
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after
