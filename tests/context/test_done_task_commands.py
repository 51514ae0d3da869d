"""A finished task's shell turns keep their command lines when its items are masked together
(`stages/compress._expired_digests`, a done task's due items): in a queue of shell tasks a
later task re-types what an earlier one ran (a script's file name, a `sed` range), and the
fold's notes of the earlier tasks carry only what their masks name (bench/README.md, "A
finished task's masked shell turns keep their command lines")."""

from __future__ import annotations

import re
from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from tests.context.test_shell_blocks import _answer, _session


def _first_task_reply(k: int) -> str:
    body = "".join(f"print(wcs.pixel_to_world_values_{k}_{i}(0.5, 1.5))\n" for i in range(14))
    return (f"THOUGHT: I check the sliced WCS once more, axis {k}, with a script of its own "
            f"that prints every world coordinate of the slice.\n\n```bash\n"
            f"cat <<'EOF' > first_task_check_{k}.py\n"
            f"from astropy.wcs.wcsapi import SlicedLowLevelWCS\n{body}EOF\n"
            f"python first_task_check_{k}.py\n```")


def _queue() -> tuple[list[dict[str, Any]], int]:
    """Two shell tasks joined: the first one's turns each write and run a script, then the
    task statement again and the second task's turns; and where the second task starts."""
    first = _session(30, _first_task_reply)[:-1]  # the run ends with the agent's last turn
    first.append({"role": "user", "content": _answer(30)})
    first.append({"role": "assistant", "content": "```bash\necho COMPLETE_TASK_AND_SUBMIT\n```"})
    second = _session(60)[1:]  # the task statement again, then its turns
    return first + second, len(first)


async def test_a_done_tasks_shell_turns_keep_their_command_lines(engine: ContextEngine) -> None:
    messages, start = _queue()
    headers = {"x-ctxgate-session-id": "shell-done-task", "x-ctxgate-task-class": "default"}
    fitted = None
    for end in range(2, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end]},
                                  CallContext("t-sdt", "s", headers))
        if end > start:  # every call of the second task sends each script name the first wrote
            sent = "\n".join(str(m.get("content")) for m in fitted.body["messages"])
            names = set(map(int, re.findall(r"first_task_check_(\d+)\.py", sent)))
            assert names == set(range(30)), (end, sorted(set(range(30)) - names))
    assert fitted is not None
    sent = "\n".join(str(m.get("content")) for m in fitted.body["messages"])
    # the first task went into the fold's note (its last turns masked as it ended, together)
    assert re.search(r"\[ctxgate: \d+ turns folded\]", sent)
    assert "every world coordinate" not in sent  # its prose went
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after
