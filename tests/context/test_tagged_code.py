"""A CodeAct agent's aged assistant turn keeps its tag-delimited code (`<execute_bash>`,
`<execute_ipython>`, MINT's `<execute>`) as a fenced block is kept when the code names a file
or a path: the agent re-types the files its commands act on (`./hello.sh`), and a digest of
the turn's first sentence lost them (bench/README.md, "oh55b" and "Tag-delimited code kept
when it names a file"). Code naming none (a computation) is digested as prose."""

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
    assert "print(goto" not in summarize(mint, "assistant", 3)  # names no file: as prose
    code = "\n".join(f"x{i} = {i}" for i in range(29)) + "\nsave('/workspace/out.txt')"
    long = f"Let me write the module.\n<execute_ipython>\n{code}\n</execute_ipython>"
    digest = summarize(long, "assistant", 3)
    assert "x0 = 0" in digest and "out.txt" in digest and "x15 = 15" not in digest
    # an unclosed or mismatched tag is prose, not code
    assert "cat a.py" not in summarize(
        "Reading it now.\n<execute_bash>\ncat a.py\n</execute_ipython>", "assistant", 3)


def test_one_rule_for_every_tag_name() -> None:
    """The tag's name does not decide: a bare `<execute>` and an `<execute_bash>` block are
    kept alike when they name a file or a path, and digested alike when they name none."""
    for tag in ("execute", "execute_bash", "execute_ipython"):
        for code in ("./hello.sh", "cat /workspace/test.txt", "print(open('bad.txt').read())"):
            turn = f"The script is ready. Now let's run it:\n<{tag}>\n{code}\n</{tag}>"
            assert f"<{tag}>\n{code}\n</{tag}>" in summarize(turn, "assistant", 3), (tag, code)
        for code in ("ls", "pip install pymsgbox", "total = (a + b)/2\nprint(total)"):
            turn = f"The script is ready. Now let's run it:\n<{tag}>\n{code}\n</{tag}>"
            assert f"<{tag}>\n{code}" not in summarize(turn, "assistant", 3), (tag, code)
