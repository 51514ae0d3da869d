"""An aged turn of an agent whose tools are text keeps its shell commands when it is masked:
the prose goes, the command lines stay (`stages/compress._masked_commands`)."""

from __future__ import annotations

import re

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.summarize import shell_commands
from tests.context.test_shell_blocks import _session


def _reply(k: int) -> str:
    body = "".join(f"print(wcs.world_to_pixel_values_{k}_{i}(0.5, 1.5, 1.05))\n" for i in range(16))
    return (f"THOUGHT: The slice still gives the wrong pixel on axis {k}; I check it again with "
            f"a script printing every axis of the sliced WCS.\n\n```bash\n"
            f"cat <<'EOF' > check_axis_{k}.py\nimport astropy.wcs\n{body}EOF\n"
            f"python check_axis_{k}.py\n```")


def test_shell_commands_are_each_blocks_command_line() -> None:
    text = ("THOUGHT: write the script.\n\n```bash\ncat <<'EOF' > check_iter.py\nimport x\n"
            "print(x)\nEOF\n```\nThen ```python\nnot_a_command()\n```")
    assert shell_commands(text) == ["$ cat <<'EOF' > check_iter.py […3 lines]"]
    assert shell_commands("```sh\nsed -n '10,20p' a.py\n```") == ["$ sed -n '10,20p' a.py"]
    assert shell_commands("no block here") == []
    # a python block's closing fence opens nothing: the prose after it is no command
    assert shell_commands("```python\nf()\n```\nprose after\n```bash\nls -la\n```") == [
        "$ ls -la"]
    assert shell_commands("```bash\nls\n") == []  # never closed


async def test_a_masked_shell_turn_keeps_its_command(engine: ContextEngine) -> None:
    messages = _session(70, _reply)
    headers = {"x-ctxgate-session-id": "shell-mask", "x-ctxgate-task-class": "default"}
    fitted = None
    for end in range(2, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end]}, CallContext("t-shm", "s", headers))
    assert fitted is not None
    sent = fitted.body["messages"]
    masked = [(i, str(m["content"])) for i, m in enumerate(sent)
              if m["role"] == "assistant" and str(m["content"]).startswith("[ctxgate: omitted")]
    assert masked  # old turns were masked
    for _, text in masked:
        assert "axis of the sliced WCS" not in text  # the prose went
        assert re.search(r"\$ cat <<'EOF' > check_axis_\d+\.py \[…\d+ lines\]", text)
