"""An aged turn of an agent whose tools are text keeps its shell commands when it is masked:
the prose goes, the command lines stay (`stages/compress._masked_commands`)."""

from __future__ import annotations

import re

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.summarize import shell_commands, shell_digest, shell_values
from tests.context.test_shell_blocks import _session


def _reply(k: int) -> str:
    body = "".join(f"print(wcs.world_to_pixel_values_{k}_{i}(0.5, 1.5, 1.05))\n" for i in range(16))
    # every script opens with the same set-up, which the agent types again in the next
    return (f"THOUGHT: The slice still gives the wrong pixel on axis {k}; I check it again with "
            f"a script printing every axis of the sliced WCS.\n\n```bash\n"
            f"cat <<'EOF' > check_axis_{k}.py\nfrom astropy.wcs.wcsapi import SlicedLowLevelWCS\n"
            f"wcs = SlicedLowLevelWCS(fits_wcs, slices=[0])\n{body}EOF\n"
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


def test_shell_digest_lists_the_names_its_blocks_bodies_carry() -> None:
    text = ("THOUGHT: write the script.\n\n```bash\ncat <<'EOF' > check_it.py\n"
            "from django.db import connection\n"
            "with connection.schema_editor() as schema_editor:\n"
            "    schema_editor.create_model(Foo)\nEOF\npython check_it.py\n```")
    digest = shell_digest(text)
    head, mentions = digest.split("\n")
    assert head == "$ cat <<'EOF' > check_it.py […5 lines]"
    assert "schema_editor.create_model" in mentions and "django.db" in mentions
    assert "write the script" not in digest  # the prose goes
    # what the model reads elsewhere (the system prompt, the task) is not listed again
    assert "django.db" not in shell_digest(text, frozenset({"django.db"}))
    assert shell_digest("```bash\nls -la\n```") == "$ ls -la"  # a one-line command: itself
    assert shell_digest("no block") == ""
    assert shell_values(text) == frozenset({"from", "django.db", "import", "connection", "with",
                                            "connection.schema_editor", "as", "schema_editor",
                                            "schema_editor.create_model", "Foo", "EOF",
                                            "python", "check_it.py"})


def test_shell_digest_lists_only_values_typed_before() -> None:
    text = ("```bash\ncat <<'EOF' > check_it.py\nfrom django.conf import settings\n"
            "settings.configure(INSTALLED_APPS=['repro_app'])\nrun_check_42()\nEOF\n```")
    typed = {"INSTALLED_APPS", "settings.configure"}.__contains__
    head, mentions = shell_digest(text, typed=typed).split("\n")
    assert mentions == "[omitted text mentions: settings.configure INSTALLED_APPS]"
    assert "run_check_42" in shell_digest(text)  # no reading of earlier turns: every value
    assert shell_digest(text, typed=lambda v: False) == head  # none typed before: no list


async def test_a_masked_shell_turn_keeps_the_names_it_typed_before(engine: ContextEngine) -> None:
    messages = _session(70, _reply)
    headers = {"x-ctxgate-session-id": "shell-mask-names", "x-ctxgate-task-class": "default"}
    masked: list[str] = []
    for end in range(2, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end]},
                                  CallContext("t-shn", "s", headers))
        masked += [str(m["content"]) for m in fitted.body["messages"] if m["role"] == "assistant"
                   and str(m["content"]).startswith("[ctxgate: omitted")]
    assert masked  # old turns were masked on some call
    listed = 0
    for text in masked:
        # the prose went, the command line and the set-up names it typed before stay
        assert "axis of the sliced WCS" not in text
        assert re.search(r"\$ cat <<'EOF' > check_axis_\d+\.py \[…\d+ lines\]", text)
        if "check_axis_0.py" in text:
            continue  # the first script: nothing typed before it
        listed += 1
        assert "[omitted text mentions: astropy.wcs.wcsapi SlicedLowLevelWCS" in text
        assert "world_to_pixel_values" not in text  # its own names, typed this once only
    assert listed
