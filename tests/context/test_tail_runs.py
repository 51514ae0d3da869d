"""A text-tool run whose harness does not count the calls left, of an agent whose record
says its sessions are runs of one task (`steps.runs_of_one`), rewrites a result on the call
where it stops being the newest, as a counted run does (`engine._tail_left`,
`engine._tail_masks`), but only on a call whose aging step changes the prefix anyway: the
rewrite lands at the tail of what the last call sent, so it adds no re-send to the step's
(bench/README.md, "Session 69, mswe69"). The rewrite lists every value the result wrote
(`apply.value_list`), uncapped: the agent's next commands re-type its names and line
numbers (bench/README.md, "Session 70, mswe70")."""

from __future__ import annotations

import re
from typing import Any

from gateway.context.engine import CallContext, ContextEngine

SYSTEM = "You are a helpful assistant that can interact with a computer shell to solve tasks."


def _output(k: int) -> str:
    rows = "".join(f"    def handler_{k}_{i}(self, record):  # line {k * 100 + i}\n"
                   f"        return record.fields[{i * 37 + k}] * weight_{i}\n"
                   for i in range(30))
    return f"<returncode>0</returncode>\n<output>\nclass Parser{k}:\n{rows}</output>"


def _shell_run() -> list[dict[str, Any]]:
    """mini-SWE-agent's run: fenced shell blocks answered by their exit status and output."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user",
         "content": "<pr_description>\nfix the parser's weights\n</pr_description>"}]
    for k in range(12):
        msgs += [{"role": "assistant",
                  "content": f"THOUGHT: I read on.\n\n```bash\ncat parser_{k}.py\n```"},
                 {"role": "user", "content": _output(k)}]
    return msgs


async def _calls(engine: ContextEngine, messages: list[dict[str, Any]], sid: str
                 ) -> list[list[str]]:
    """Each call's messages as forwarded."""
    out = []
    for end in [i for i, m in enumerate(messages) if m["role"] == "assistant"]:
        fitted = await engine.fit({"model": "gpt-4o", "messages": messages[:end]},
                                  CallContext("t-run", "s", {"x-ctxgate-session-id": sid}))
        out.append([str(m["content"]) for m in fitted.body["messages"]])
    return out


def _tail_rewrites(calls: list[list[str]], messages: list[dict[str, Any]]) -> list[int]:
    """The calls that rewrote the result the call before ended with, and nothing before it."""
    out = []
    for k in range(1, len(calls)):
        sent, before = calls[k], calls[k - 1]
        aging = len(before) - 1  # the result the last call ended with
        if sent[:aging] == before[:aging] and len(sent[aging]) < len(before[aging]) / 2:
            assert before[aging] == messages[aging]["content"]
            assert sent[aging + 1:] == [str(m["content"]) for m in messages[aging + 1:len(sent)]]
            out.append(k)
    return out


async def test_a_run_of_one_by_the_record_rewrites_a_result_at_the_tail(
    engine: ContextEngine,
) -> None:
    messages = _shell_run()
    first = await _calls(engine, messages, "tail-record-0")
    assert _tail_rewrites(first, messages) == []  # no record yet: verbatim until a step
    for k in range(1, 7):  # six more runs of the same agent, each one task
        calls = await _calls(engine, messages, f"tail-record-{k}")
    rewrites = _tail_rewrites(calls, messages)
    # on the calls that step (the instability budget's: one in five at most), not on every call
    assert rewrites and len(rewrites) <= 0.2 * len(calls) + 1, rewrites


async def test_a_tail_rewrite_keeps_every_value_the_result_wrote(engine: ContextEngine) -> None:
    messages = _shell_run()
    for k in range(7):  # the record: seven runs of one task
        calls = await _calls(engine, messages, f"tail-values-{k}")
    rewrites = _tail_rewrites(calls, messages)
    assert rewrites
    for k in rewrites:
        aging = len(calls[k - 1]) - 1
        rewritten, original = calls[k][aging], messages[aging]["content"]
        # 30 rows of names, line numbers and field indexes: more than a digest lists
        written = set(re.findall(r"handler_\d+_\d+|weight_\d+|\d{3,}|Parser\d+", original))
        assert len(written) > 60
        assert [v for v in written if v not in rewritten] == []



def _long_thought_run(calls: int) -> list[dict[str, Any]]:
    """`_shell_run` whose thoughts run long, as mini-SWE's do: its steps digest them, so a
    step's first rewrite lies turns before the result the last call ended with."""
    words = ["the", "parser", "reads", "weights", "from", "each", "record", "so", "I", "check",
             "whether", "its", "fields", "match", "what", "tests", "expect", "before",
             "changing", "anything"]
    msgs = _shell_run()[:2]
    msgs[0] = {"role": "system", "content": f"{SYSTEM} Think at length."}  # its own record
    for k in range(calls):
        thought = " ".join(words[(7 * k + 3 * j) % len(words)] + ("." if j % 9 == 8 else "")
                           for j in range(400))
        msgs += [{"role": "assistant",
                  "content": f"THOUGHT: {thought}\n\n```bash\ncat parser_{k}.py\n```"},
                 {"role": "user", "content": _output(k)}]
    return msgs


def _listed_at_once(calls: list[list[str]], messages: list[dict[str, Any]]) -> list[list[int]]:
    """Per call, the results the call before sent verbatim (not the newest) that it sends
    rewritten."""
    out = []
    for k in range(1, len(calls)):
        sent, before = calls[k], calls[k - 1]
        out.append([i for i in range(2, len(before))
                    if messages[i]["role"] == "user" and before[i] == messages[i]["content"]
                    and i < len(sent) and sent[i] != before[i]])
    return out


async def test_a_step_lists_every_result_it_re_sends_anyway(engine: ContextEngine) -> None:
    """A result that aged on a call that took no step waits verbatim for the next step,
    which re-sends it anyway: that step lists it too, with every value it wrote
    (bench/README.md, "Session 75, mswe75")."""
    messages = _long_thought_run(20)
    for k in range(8):  # the record: seven runs of one task before it
        calls = await _calls(engine, messages, f"tail-resent-{k}")
    listed = _listed_at_once(calls, messages)
    assert max(len(rows) for rows in listed) >= 2, listed
    for k, rows in enumerate(listed, start=1):
        for i in rows:
            written = set(re.findall(r"handler_\d+_\d+|weight_\d+|\d{3,}|Parser\d+",
                                     messages[i]["content"]))
            assert [v for v in written if v not in calls[k][i]] == []
