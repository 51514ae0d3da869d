"""A text-tool agent's aged turn keeps the lines of code its prose named (`summarize.line_refs`):
a shell agent reasons over line numbers (`The check is at line 512.`, `Line 1025: …`) and
re-types them in its next turns (a `sed -n '512,520p'`, an insert before 512); a digest that
drops the turn's prose lost them (bench/README.md, "An aged shell turn keeps the lines its
prose named")."""

from __future__ import annotations

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.summarize import line_refs, summarize
from tests.context.test_shell_blocks import _session

TURN = ("THOUGHT: The traceback points to `sympy/simplify/fu.py` line 504.\n"
        "Line 1025: `if not value` is True.\n1038: 8 spaces, so Lines 276-279: stay.\n\n"
        "```bash\nsed -n '500,510p' sympy/simplify/fu.py\n```")


def test_line_refs_as_written() -> None:
    assert line_refs(TURN) == "… line 504. … Line 1025: … 1038: … Lines 276-279: …"
    assert line_refs("THOUGHT: nothing numbered here, 2 files.") == ""
    digest = summarize(TURN, "assistant", 3, named_lines=True)
    assert "line 504." in digest and "Line 1025:" in digest and "sed -n '500,510p'" in digest
    assert "traceback points" not in digest  # the prose itself goes
    assert "line 504." not in summarize(TURN, "assistant", 3)  # only where asked


def _reply(k: int) -> str:
    return (f"THOUGHT: The value I need to change is set at line {500 + k}. I read what "
            f"surrounds it first, since the slice's pixel axes depend on the lines above "
            f"and the dropped world axes are computed further down.\n\n```bash\n"
            f"nl -ba astropy/wcs/wcsapi/sliced_low_level_wcs.py | sed -n '{40 * k},"
            f"{40 * k + 12}p'\n```")


async def test_an_aged_shell_turn_keeps_the_lines_it_named(engine: ContextEngine) -> None:
    messages = _session(40, _reply)
    headers = {"x-ctxgate-session-id": "shell-line-refs", "x-ctxgate-task-class": "default"}
    digested = 0
    for end in range(3, len(messages), 2):  # each call ends on a command's result
        fitted = await engine.fit({"messages": messages[:end]},
                                  CallContext("t-slr", "s", headers))
        sent = "\n".join(str(m.get("content")) for m in fitted.body["messages"])
        turns = (end - 1) // 2
        digested += sent.count("I read what surrounds it first") < turns  # a turn's prose went
        # the latest ten turns' lines as the agent wrote them, digested or not
        for k in range(max(0, turns - 10), turns):
            assert f"line {500 + k}." in sent, (end, k)
        assert sum(d.tokens_saved for d in fitted.drops) == (
            fitted.tokens_before - fitted.tokens_after)
    assert digested
