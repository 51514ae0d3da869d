"""The task statement as a copy that repeats on arrival point to: a queue harness that re-sends
its template (a worked example, instructions) before each task (OpenHands' CodeAct agents)
has the later copies sent with the template's lines as one marker naming the first task's
statement, from their first call on; the new task's lines stay, the statement itself is
never rewritten, and an output sharing a line with it is cut as before (bench/README.md,
"The task statement as a copy repeats on arrival point to")."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item
from gateway.context.lines import LineIndex, index_lines, without_repeated_lines
from gateway.context.session import MemorySessionStore
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import drops_add_up, fit_agreed

HEAD = "Here is an example of how you can interact with the environment for task solving:"
SHARED = ("File updated. Please review the changes and make sure they are correct (correct "
          "indentation, no duplicate lines, etc). Edit the file again if necessary.")
EXAMPLE = "\n".join([
    HEAD, "", "--- START OF EXAMPLE ---", "",
    *(f"USER: step {k} of the worked example writes line {k} of app.py with care" for k in
      range(20)),
    SHARED, "", "--- END OF EXAMPLE ---", "", "NOW, LET'S START!", "",
])
SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The "
          "assistant runs code in <execute_bash> blocks.")


def _item(text: str, item_id: str, goal: bool = False, kind: str = "user") -> Item:
    return Item(id=item_id, kind=kind, unit="u", message_index=1, segment=0, text=text,
                tokens=len(text) // 4, fixed_tokens=0, turn=-1, pinned=False,
                rewritable=True, goal=goal)


def test_a_later_task_reads_the_statement_s_lines_and_an_output_does_not() -> None:
    goal = _item(EXAMPLE + "Fix typos in bad.txt.", "goal", goal=True)
    output = _item(f"OBSERVATION:\n{SHARED}\n[Command finished with exit code 0]", "out",
                   kind="tool_result")
    index: LineIndex = {}
    index_lines(index, goal)
    index_lines(index, output)
    later = EXAMPLE + "Write a shell script hello.sh that prints hello."
    cut = without_repeated_lines(later, index, 120)
    assert cut is not None
    text, rep = cut
    assert rep is goal  # one run: the line an output also has does not break it
    assert text.startswith(f"[ctxgate: 29 lines as in an earlier user: {HEAD[:32]}…]")
    assert text.endswith("Write a shell script hello.sh that prints hello.")
    assert len(text) < 200
    # an output reads the outputs' lines only, as before the statement was indexed
    again = f"OBSERVATION:\n{SHARED}\nUSER: step 3 of the worked example writes line 3 of app.py"
    cut = without_repeated_lines(again, index, 120)
    assert cut is not None and cut[1] is output
    assert "step 3 of the worked example" in cut[0]
    # without the statement's opening line, its lines are not read (the output's one is)
    cut = without_repeated_lines(later.split("\n", 1)[1], index, 120)
    assert cut is not None and cut[1] is output
    assert "step 3 of the worked example" in cut[0]


def _engine(settings: Settings, embedder: Any, cache: bool) -> ContextEngine:
    return ContextEngine(settings, None, Metrics(), DropLog("/dev/null", "none", None), embedder,
                         sessions=MemorySessionStore(), prefix_cache_size=1024 if cache else 0)


def _queue(tasks: list[str], rows: int = 0) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for k, task in enumerate(tasks):
        messages.append({"role": "user", "content": EXAMPLE + task})
        call = f"<execute_bash>\ncat task{k}.txt\n</execute_bash>"
        messages.append({"role": "assistant", "content": f"Let me look.\n{call}"})
        messages.append({"role": "user",
                         "content": "\n".join([f"OBSERVATION:\ncontents of task{k}.txt", *(
                             f"row {r} of task{k}.txt: value {r * (k + 3)}" for r in range(rows)),
                             "[exit code 0]"])})
        messages.append({"role": "assistant", "content": f"Task {k} is done.\n<finish></finish>"})
    return messages


async def test_a_queue_s_later_template_goes_as_a_marker_from_its_first_call(
    settings: Settings, embedder: Any
) -> None:
    tasks = ["Fix typos in bad.txt.", "Write a shell script hello.sh that prints hello."]
    messages = _queue(tasks)
    session = uuid.uuid4().hex
    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    ends = [i + 1 for i, m in enumerate(messages) if m["role"] == "user"]
    previous: list[Any] | None = None
    for end in ends:
        call = CallContext("t-goal", uuid.uuid4().hex, {"x-ctxgate-session-id": session})
        body = {"messages": messages[:end]}
        fitted = await fit_agreed(cached, plain, body, call)  # the full path agrees
        forwarded = fitted.body["messages"]
        if previous is not None:
            assert forwarded[: len(previous)] == previous  # nothing sent before changes
        assert drops_add_up(fitted)
        previous = list(forwarded)
        if end > 5:  # the second task's statement is in: a marker from its first call on
            assert forwarded[5]["content"] == (
                f"[ctxgate: 29 lines as in an earlier user: {HEAD[:32]}…]\n{tasks[1]}")
    assert previous is not None
    assert previous[1]["content"] == EXAMPLE + tasks[0]  # the statement stays as sent
    assert [d.reason for d in fitted.drops if d.message_index == 5] == ["repeated_lines"]


async def test_the_statement_the_markers_name_stays_as_sent_at_the_next_step(
    settings: Settings, embedder: Any
) -> None:
    """A step on the call a later task arrives on finds that task's statement verbatim
    (arrival comes after the stages): the first task's statement, which earlier markers
    name, is not made a near-duplicate pointer to it (it was, before `_named_statements`),
    and every line of the template is still sent on every call."""
    tasks = [f"Task {k}: write script{k}.sh that prints the number {k} twice." for k in range(10)]
    messages = _queue(tasks, rows=150)
    engine = _engine(settings, embedder, True)
    session = uuid.uuid4().hex
    ends = [i + 1 for i, m in enumerate(messages) if m["role"] == "user"]
    for end in ends:
        call = CallContext("t-goal", uuid.uuid4().hex, {"x-ctxgate-session-id": session})
        fitted = await engine.fit({"messages": messages[:end]}, call)
        forwarded = fitted.body["messages"]
        assert forwarded[1]["content"] == EXAMPLE + tasks[0]
        sent = "\n".join(str(m["content"]) for m in forwarded)
        assert all(line in sent for line in EXAMPLE.splitlines())
    assert sum(d.reason == "repeated_lines" for d in fitted.drops) >= 5
