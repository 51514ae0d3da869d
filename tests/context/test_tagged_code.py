"""A CodeAct agent's aged assistant turn keeps its tag-delimited code (`<execute_bash>`,
`<execute_ipython>`) as a fenced block is kept: the agent re-types its own
commands (`./hello.sh`), and a digest of the turn's first sentence lost them (bench/README.md,
"oh55b")."""

from __future__ import annotations

from gateway.context.summarize import summarize

TURN = ("The shell script 'hello.sh' has been created successfully with the correct content. "
        "Now, let's run it to make sure it works as expected:\n"
        "<execute_bash>\n./hello.sh\n</execute_bash>")


def test_an_aged_codeact_turn_keeps_its_command() -> None:
    for level in (1, 3):
        digest = summarize(TURN, "assistant", level)
        assert "<execute_bash>\n./hello.sh\n</execute_bash>" in digest
    assert "make sure it works" not in summarize(TURN, "assistant", 3)  # the prose goes


def test_other_tags_and_long_blocks() -> None:
    mint = "I will compute it.\n<execute>\nprint(goto(\"drawer 1\"))\n</execute>"
    assert "print(goto" not in summarize(mint, "assistant", 3)  # MINT's bare tag: as before
    code = "\n".join(f"x{i} = {i}" for i in range(30))
    long = f"Let me write the module.\n<execute_ipython>\n{code}\n</execute_ipython>"
    digest = summarize(long, "assistant", 3)
    assert "x0 = 0" in digest and "x29 = 29" in digest and "x15 = 15" not in digest
    # an unclosed or mismatched tag is prose, not code
    assert "cat a.py" not in summarize(
        "Reading it now.\n<execute_bash>\ncat a.py\n</execute_ipython>", "assistant", 3)
