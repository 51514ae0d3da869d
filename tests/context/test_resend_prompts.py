"""A harness that re-sends its state in each prompt (a software company of role-playing
agents: every phase prompt carries the whole program as it now stands), no API tools and no
call written in prose: its sessions age their old prompts as the agent policy ages turns,
the agents' own turns stay as written, and a new prompt's (or turn's) runs of lines that an
earlier prompt or turn has go out as markers on arrival (`RequestScan.resends`,
`engine.resend_aging`, `ClusterOptions.arrival_from_turns`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from gateway.context.classify import (
    RESEND_CHARS,
    RESEND_MIN_CHARS,
    RequestScan,
    long_lines,
    superseded,
)
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item
from gateway.context.lines import verbatim_index
from gateway.context.segments import in_code_block
from gateway.context.session import Decision, MemorySessionStore, SessionState
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import fit_agreed, memory_engine

from .conftest import with_compaction, without_young

SYSTEM = "A software company of agents: a reviewer and a programmer build what a customer asks."
TASK = "Build a small ledger application that totals its accounts and prints a report."


def _program(version: int) -> str:
    """A made-up program of 40 lines; each version changes one line."""
    lines = [f"    def account_{i}_total(self, entries_{i}: list[float]) -> float:  # ledger"
             for i in range(40)]
    lines[version % 40] = f"    def account_{version}_total(self) -> float:  # version {version}"
    return "class Ledger:\n" + "\n".join(lines)


def _prompt(phase: int) -> str:
    return (f"Phase {phase}: review the code below and give your highest-priority comment.\n"
            f"Task: {TASK}\nCodes:\n```python\n{_program(phase)}\n```\n"
            f"Answer with one comment of phase {phase} and how to fix it.")


def _session(phases: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    messages.append({"role": "assistant", "content": "We will write it in Python."})
    for k in range(1, phases + 1):
        messages.append({"role": "user", "content": _prompt(k)})
        messages.append({"role": "assistant", "content": (
            f"Comment {k}: account_{k}_total must check entries_{k} is not empty; "
            f"the report of phase {k} then prints 0.00 for it. " * 3)})
    return messages


def _call(session: str) -> CallContext:
    # `default`, the class such a session gets when nothing names it (fixed here so that the
    # test does not hang on what the embedded examples say of its first call)
    return CallContext("t-resend", "rs", {"x-ctxgate-session-id": session,
                                           "x-ctxgate-task-class": "default"})


def test_a_prompt_that_re_sends_earlier_prompts_lines_marks_the_session() -> None:
    messages = _session(4)
    scan = RequestScan()
    assert not scan.resends(messages[:4])  # one prompt with the program: nothing re-sent
    assert sum(len(line) for line in _program(2).splitlines()) > RESEND_CHARS
    # the next one re-sends it: once or twice may be a queue's next tasks re-sending their
    # instructions; three times is a harness that re-sends its state
    assert not scan.resends(messages[:6]) and not scan.resends(messages[:8])
    assert scan.resends(messages[:10])
    # a chat whose user turns say new things each time is not one
    chat = [{"role": "user", "content": f"Question {k}: " + f"what about item {k}? " * 30}
            for k in range(6)]
    assert not RequestScan().resends(chat)


def _template_prompt(step: int) -> str:
    """A made-up micro-agent prompt: a 12-line template (about 900 characters of long lines)
    and the history of this step, under a third of it."""
    template = "\n".join(f"Rule {i}: answer with one JSON action; never repeat an action "
                         f"already taken, and finish when the goal of rule {i} holds."
                         for i in range(12))
    history = "\n".join(f'{{"action": "run", "args": {{"command": "check step {step}.{j}"}}, '
                         f'"observation": "ok {step}.{j}"}}' for j in range(3))
    return f"# Task\nVerify the fix of step {step}.\n{template}\n# History\n{history}"


def test_a_small_template_re_sent_with_another_history_marks_the_session() -> None:
    prompts = [{"role": "user", "content": _template_prompt(k)} for k in range(4)]
    lines = long_lines(_template_prompt(1))
    resent = sum(len(line) for line in lines if line in long_lines(_template_prompt(0)))
    # under the absolute threshold, over the short prompt's floor and half its long lines
    assert RESEND_MIN_CHARS <= resent < RESEND_CHARS
    assert 2 * resent >= sum(map(len, lines))
    scan = RequestScan()
    assert not scan.resends(prompts[:3])  # two re-sending prompts are not enough
    assert scan.resends(prompts)
    # new questions sharing a short header (under the floor) are not a re-sent state
    chat = [{"role": "user", "content": "Header of this assistant, answer briefly please.\n"
             f"Question {k}: " + f"what about item {k}? " * 3} for k in range(6)]
    assert not RequestScan().resends(chat)


async def test_old_prompts_age_the_agents_turns_stay_and_new_prompts_point_back(
    engine_without_young: ContextEngine,
) -> None:
    messages = _session(24)[:-1]  # ends with the newest prompt
    fitted = None
    for end in range(4, len(messages) + 1, 2):  # each call ends with a prompt
        fitted = await engine_without_young.fit({"messages": messages[:end]}, _call("rs"))
    assert fitted is not None
    assert fitted.task_class == "default"  # not renamed: it ages as the agent policy does
    sent = fitted.body["messages"]
    assert fitted.tokens_after < 0.6 * fitted.tokens_before
    # the agents' turns are never digested (what they wrote is what a later turn quotes)
    assert all(d.kind != "assistant" for d in fitted.drops if d.reason == "aged")
    written = [m["content"] for m in sent if m["role"] == "assistant"]
    assert written == [m["content"] for m in messages if m["role"] == "assistant"]
    assert "version 24" in sent[-1]["content"]  # the newest prompt's changed line as sent
    # old prompts aged: fewer characters of prompts than were sent
    prompts = sum(len(m["content"]) for m in sent if m["role"] == "user")
    assert prompts < 0.3 * sum(len(m["content"]) for m in messages if m["role"] == "user")


async def test_a_prompt_re_sending_code_a_turn_wrote_points_to_that_turn(
    engine_without_young: ContextEngine,
) -> None:
    messages = _session(4)
    code = "Here is the whole program again:\n" + _program(99)
    messages += [{"role": "user", "content": "Write the program out in full."},
                 {"role": "assistant", "content": code},
                 {"role": "user", "content": _prompt(99)}]
    fitted = None
    for end in [i + 1 for i, m in enumerate(messages) if m["role"] == "user" and i >= 3]:
        fitted = await engine_without_young.fit({"messages": messages[:end]}, _call("rt"))
    assert fitted is not None
    sent = fitted.body["messages"]
    assert sent[-2]["content"] == code  # the agent's turn as written, the copy pointed to
    assert "lines as in an earlier assistant: Here is the whole program" in sent[-1]["content"]
    assert "version 99" not in sent[-1]["content"]  # that line is in the turn above


async def test_a_resend_session_between_steps_takes_its_prefix(
    settings: Settings, embedder: Any
) -> None:
    """Such a session's calls between steps render from its previous call's prefix, the
    turns' lines indexed there too (a new prompt re-sending code a turn wrote points to that
    turn on that path as on the full one): its per-call time grows with the new messages
    only. The full path (no cache) sends the very same on every call."""
    messages = _session(12)
    for k in range(13, 16):
        code = f"Here is the whole program, version {k}:\n" + _program(k)
        messages += [{"role": "user", "content": f"Write the program out in full, {k}."},
                     {"role": "assistant", "content": code},
                     {"role": "user", "content": _prompt(k) + "\n" + _program(k)},
                     {"role": "assistant", "content": f"Comment {k}: looks right now."}]
    session = uuid.uuid4().hex
    cached = memory_engine(without_young(settings), embedder, True)
    plain = memory_engine(without_young(settings), embedder, False)
    reused: list[int] = []  # the calls rendered from the previous call's prefix
    pointed: list[int] = []  # those whose newest prompt points to a turn
    for end in [i + 1 for i, m in enumerate(messages) if m["role"] == "user" and i >= 3]:
        before = cached.prefixes.reused
        fitted = await fit_agreed(cached, plain, {"messages": messages[:end]}, _call(session))
        if cached.prefixes.reused > before:
            reused.append(end)
            if "lines as in an earlier assistant: Here is the whole program" in str(
                    fitted.body["messages"][-1]["content"]):
                pointed.append(end)
    assert len(reused) >= 10, reused
    assert len(pointed) >= 2, (reused, pointed)


def _item(kind: str, index: int, text: str) -> Item:
    return Item(id=f"m{index}", kind=kind, unit=f"u{index}",  # type: ignore[arg-type]
                message_index=index, segment=0, text=text, tokens=len(text) // 4,
                fixed_tokens=0, turn=index, pinned=False, rewritable=True)


def test_the_prefix_line_index_holds_the_turns_at_their_latest_copy() -> None:
    """`verbatim_index(turns=True)`, which a resend session's prefix keeps for its next call,
    indexes as `cluster.arrival_duplicates` does: the assistant's turns too, and each line
    under the latest item that has it; without `turns`, outputs only, the first copy."""
    old, turn = _program(1), "Here it is:\n" + _program(2)
    items = [_item("user", 1, old), _item("assistant", 2, turn), _item("user", 3, "short")]
    shared = _program(1).splitlines()[5]
    assert shared in _program(2)
    index = verbatim_index(items, {}, 200, (), turns=True)
    assert index[shared].id == "m2" and index["Here it is:"].id == "m2"
    plain = verbatim_index(items, {}, 200, ())
    assert plain[shared].id == "m1" and "Here it is:" not in plain
    # a turn with a decision is not sent as written: no marker names it
    cut = Decision("compress", "compress", "aged", "summary", text="gist")
    assert verbatim_index(items, {"m2": cut}, 200, (), turns=True)[shared].id == "m1"


def test_a_prompt_later_prompts_re_send_is_superseded() -> None:
    later = {line for k in (5, 6) for line in _prompt(k).splitlines()}
    assert superseded(_prompt(4), later)  # the program again, one line changed
    # a prompt of new things, or one whose copy no later prompt has, is not
    assert not superseded(_prompt(4), set())
    news = "\n".join(f"Question {k}: what does account {k} hold at the end of the year?"
                     for k in range(30))
    assert not superseded(news, later)
    # a short prompt all of whose long lines come again is
    assert superseded(f"Task: {TASK}", {f"Task: {TASK}"})


async def test_an_old_prompt_a_later_prompt_re_sends_goes_as_its_placeholder(
    engine_without_young: ContextEngine,
) -> None:
    messages = _session(24)[:-1]
    fitted = None
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine_without_young.fit({"messages": messages[:end]}, _call("rp"))
    assert fitted is not None
    sent = fitted.body["messages"]
    aged = [m["content"] for m, was in zip(sent, messages, strict=True)
            if m["role"] == "user" and m["content"] != was["content"]
            and "Phase" in was["content"] and was is not messages[-1]]
    assert aged
    # each one line: its placeholder, not a digest of its head and tail lines
    assert all(text.startswith("[ctxgate: omitted") and "\n" not in text for text in aged)


def _stepless(settings: Settings) -> ContextEngine:
    """An engine whose steps come only on the share (no young session's credit, no young
    calls weighed), on a memory store."""
    return ContextEngine(with_compaction(settings, early_calls=0, repay_young_calls=0), None,
                         Metrics(), DropLog("/dev/null", "none", None), None,
                         sessions=MemorySessionStore())


async def test_a_session_recognised_late_counts_its_earlier_calls_toward_its_steps(
    settings: Settings,
) -> None:
    engine = _stepless(settings)
    messages = _session(24)[:-1]
    ends = list(range(4, len(messages) + 1, 2))
    scan = RequestScan()
    flip = next(k for k, end in enumerate(ends) if scan.resends(messages[:end]))
    first = None
    for k, end in enumerate(ends):
        fitted = await engine.fit({"messages": messages[:end]}, _call("rl"))
        if first is None and any(d.reason == "aged" for d in fitted.drops):
            first = k
    # its 4 calls before kept their prefix: the share (1 in 6) allows a step 2 calls on,
    # where counted from the flip it waited 6
    assert first is not None and flip < first <= flip + 2


def test_the_calls_before_a_session_aged_are_kept_with_its_counts() -> None:
    state = SessionState(horizon=7, calls=20, steps=3, stable_calls=6)
    again = SessionState.decode({b"horizon": state.encode("horizon")})
    assert (again.horizon, again.calls, again.steps, again.late_batch,
            again.stable_calls) == (7, 20, 3, False, 6)
    state.late_batch = True
    again = SessionState.decode({b"horizon": state.encode("horizon")})
    assert (again.late_batch, again.stable_calls) == (True, 6)
    # none recorded: the field as before
    assert SessionState(horizon=7, calls=20, steps=3).encode("horizon") == b"7:20:3"
    assert SessionState.decode({b"horizon": b"7:20:3:1"}).stable_calls == 0


def _sectioned_prompt(phase: int) -> str:
    """A made-up prompt rendered in markdown sections, as a fresh-prompt agent writes its
    whole state each step: sections of 80+ characters each, which the parser reads as
    documents (`segments.find_documents`), not as one user turn."""
    return (f"# Task\nPhase {phase}: review the ledger code below; {TASK}\n\n"
            f"## Code\n```python\n{_program(phase)}\n```\n\n"
            "## Format\nAnswer with one JSON object: the comment, the line it is about and "
            f"the fix, for phase {phase} only; never repeat an earlier comment.\n")


async def _fit_prompts(
    engine: ContextEngine, prompt: Callable[[int], str], session: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A session of 24 prompts (`prompt` of each phase), each answered, fitted call by call:
    the messages of the last call and what was forwarded of them."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK},
        {"role": "assistant", "content": "We will write it in Python."}]
    for k in range(1, 25):
        messages += [{"role": "user", "content": prompt(k)},
                     {"role": "assistant", "content": f"Comment {k}: check entries_{k}."}]
    messages = messages[:-1]  # ends with the newest prompt
    fitted = None
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end]}, _call(session))
    assert fitted is not None
    return messages, fitted.body["messages"]


async def test_old_prompts_in_sections_age_as_whole_prompts_do(
    engine_without_young: ContextEngine,
) -> None:
    """A re-sending session whose prompts are split into sections (markdown headings) ages
    those sections as it ages a prompt's text: an older copy of the state is superseded
    whatever the parser made of its parts. Without that, no old prompt changed at all."""
    messages, sent = await _fit_prompts(engine_without_young, _sectioned_prompt, "rk")
    assert sent[-1]["content"].startswith("# Task\nPhase 24:")  # the newest prompt
    prompts = sum(len(m["content"]) for m in sent if m["role"] == "user")
    assert prompts < 0.3 * sum(len(m["content"]) for m in messages if m["role"] == "user")
    written = [m["content"] for m in sent if m["role"] == "assistant"]
    assert written == [m["content"] for m in messages if m["role"] == "assistant"]


def _commented_program(version: int) -> str:
    """`_program` with a comment at the start of each ten methods, at the line's start: as
    a markdown heading would be (`# Accounts 0 to 9`), inside the code block."""
    lines = _program(version).splitlines()
    for start in (30, 20, 10, 0):
        lines.insert(1 + start, f"# Accounts {start} to {start + 9}")
    return "\n".join(lines)


def _prompt_with_code(phase: int) -> str:
    """A made-up prompt in markdown sections whose code block the parser splits at its
    comments too: sections of the prompt and sections of the code."""
    return (f"# Task\nPhase {phase}: review the ledger code below; {TASK}\n\n"
            f"## Code\n```python\n{_commented_program(phase)}\n```\n\n"
            "## Format\nAnswer with one JSON object: the comment, the line it is about and "
            f"the fix, for phase {phase} only; never repeat an earlier comment.\n")


def test_a_comment_in_a_code_block_is_not_a_section_heading() -> None:
    text = _prompt_with_code(3)
    assert not in_code_block(text, text.index("# Task"))
    assert in_code_block(text, text.index("# Accounts 10 to 19"))
    assert not in_code_block(text, text.index("## Format"))
    assert not in_code_block("no code here", 3)


async def test_old_prompts_code_sections_stay_whole_their_markdown_sections_age(
    engine_without_young: ContextEngine,
) -> None:
    """A re-sending session ages its old prompts' markdown sections, not the pieces of code
    the parser cut at the code's comment lines: a later reply copies the code's lines
    verbatim (ChatDev's phase prompts). Without it every old version's changed line was
    digested away."""
    _, forwarded = await _fit_prompts(engine_without_young, _prompt_with_code, "rc")
    sent = "\n".join(m["content"] for m in forwarded if m["role"] == "user")
    # each old version's own line is still sent as written
    assert all(f"def account_{k}_total(self) -> float:  # version {k}" in sent
               for k in range(1, 25))
    # the old prompts' own sections aged
    formats = sum(f"the fix, for phase {k} only" in sent for k in range(1, 24))
    assert formats < 12
