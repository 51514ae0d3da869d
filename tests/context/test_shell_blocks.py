"""Agents that write one shell command a turn in a fenced block (mini-SWE-agent: a `THOUGHT:`
and ```` ```bash ```` block; the harness answers in a user turn opening with the command's
exit status, `<returncode>0</returncode>`; no API tools): the answer is the command's result
however short, the system prompt that has the model work a shell is no plain chat's, an
output whose lines all look like prompts digests without failing, and the sections of the
task statement (an issue's `### Steps to Reproduce`) keep their identifiers as the task
statement does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from gateway.context.classify import is_agent_request, is_text_tool_request
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import text_tool_result
from gateway.context.summarize import summarize
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.conftest import without_done_results, without_young

SYSTEM = ("You are a helpful assistant that can interact multiple times with a computer shell "
          "to solve programming tasks.\nYour response must contain exactly ONE bash code block "
          "with ONE command (or commands connected with && or ||).")
TASK = ("<pr_description>\nConsider the following PR description:\nSliced WCS gives a wrong "
        "pixel\n\n### Description\nworld_to_pixel on a slice returns an erroneous result for "
        "one of the dimensions of the cube, as shown below.\n\n### Steps to Reproduce\n"
        "```python\nwcs_header = {'CDELT3': 0.055, 'CUNIT3': 'Angstrom', 'CRVAL3': 1.05}\n"
        "fits_wcs = astropy.wcs.WCS(header=wcs_header)\n```\n</pr_description>\n\n"
        "<instructions>\nFix it in the non-test files of the current directory.\n"
        "</instructions>")


def _reply(k: int) -> str:
    return (f"THOUGHT: I read the next part of the module, lines {40 * k} on.\n\n```bash\n"
            f"nl -ba astropy/wcs/wcsapi/sliced_low_level_wcs.py | sed -n '{40 * k},"
            f"{40 * k + 12}p'\n```")


def _answer(k: int) -> str:
    body = "".join(f"   {40 * k + i}\t        value_{k}_{i} = self._wcs.pixel_n_dim + {i}\n"
                   for i in range(12))
    return f"<returncode>0</returncode>\n<output>\n{body}</output>"


def _session(calls: int, reply: Callable[[int], str] | None = None
             ) -> list[dict[str, Any]]:
    """A shell agent's session of `calls` turns (`reply`: the agent's turn k)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": TASK}]
    for k in range(calls):
        messages.append({"role": "assistant", "content": (reply or _reply)(k)})
        messages.append({"role": "user", "content": _answer(k)})
    return messages


def test_an_exit_status_answers_a_shell_block() -> None:
    session = _session(2)
    assert is_text_tool_request({"messages": session})
    assert not is_agent_request({"messages": session})
    assert text_tool_result(_reply(1), _answer(1))
    # however short: an edit's empty output
    assert text_tool_result(_reply(1), "<returncode>0</returncode>\n<output>\n</output>")
    assert text_tool_result("Running it:\n```\npytest -q\n```", "Exit code: 1\n2 failed")
    # no shell block (prose, another language), or no exit status first: no result
    assert not text_tool_result("I ran `ls` before.", "<returncode>0</returncode>\n<output>\n")
    assert not text_tool_result("```python\nprint(1)\n```", "<returncode>0</returncode>")
    assert not text_tool_result(_reply(1), "<output>\nsetup.py\n</output>")
    assert not text_tool_result(_reply(1), "Thanks, and what is the return code of it?")


async def test_a_shell_agents_system_prompt_is_no_plain_chat(engine: ContextEngine) -> None:
    first = {"messages": _session(0)}
    assert engine.classifier.by_rules(first) != "plain_chat"
    chat = {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": "hello"}]}
    assert engine.classifier.by_rules(chat) == "plain_chat"


def test_an_output_of_prompt_like_lines_digests() -> None:
    text = "<returncode>0</returncode>\n<output>\n</output>"
    assert summarize(text, "user", level=3) == "<returncode>0</returncode>\n[…1 lines]\n</output>"


async def test_a_shell_session_ages_and_its_task_sections_keep_their_values(
    engine_without_young: ContextEngine,
) -> None:
    # past the agent policy's 60th turn; the class named, as a first call decides nothing;
    # large calls not weighed (`engine_without_young`: on its first task the shipped aging
    # leaves out the steps whose digests do not repay, every one of this synthetic session's)
    engine = engine_without_young
    messages = _session(70)
    headers = {"x-ctxgate-session-id": "shell", "x-ctxgate-task-class": "default"}
    fitted = None
    for end in range(2, len(messages) + 1, 2):  # each call ends with a user turn
        fitted = await engine.fit({"messages": messages[:end]}, CallContext("t-sh", "s", headers))
    assert fitted is not None and fitted.task_class == "default"
    sent = fitted.body["messages"]
    assert sent[-1] == messages[-1]  # the latest output as written
    assert fitted.drops and fitted.tokens_after < fitted.tokens_before
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after
    # the values of the task statement's sections, which a reproduction script re-types
    text = "\n".join(str(m["content"]) for m in sent)
    for value in ("CDELT3", "0.055", "Angstrom", "CRVAL3", "1.05"):
        assert value in text



def _grep_reply(k: int) -> str:
    """A turn whose digest is long enough to start a mask batch (its command line kept)."""
    return (f"THOUGHT: I look for the offset of dimension {k} where the slice is built.\n\n"
            "```bash\n" + " && ".join(
                f'grep -n "pixel_n_dim_{k}_{i}" astropy/wcs/wcsapi/sliced_low_level_wcs_{i}.py'
                for i in range(5)) + "\n```")


async def test_a_short_shell_runs_old_outputs_go_with_the_digests_batch(
    engine_without_young: ContextEngine,
) -> None:
    # a 45-turn run, under the agent policy's 60th turn: its old outputs, never digested,
    # go as gists with the digests' mask batch (the policy's `text_tools`:
    # `mask_turns_from_turns: 0`), those of the last 17 turns as written
    # (`mask_after_turns: 17`); on main every output of a run this short went verbatim, and
    # each step re-sent them at full price. Large calls not weighed (`engine_without_young`:
    # this synthetic session's steps never repay)
    engine = engine_without_young
    messages = _session(45, _grep_reply)
    headers = {"x-ctxgate-session-id": "shell-short", "x-ctxgate-task-class": "default"}
    fitted = None
    for end in range(2, len(messages) + 1, 2):  # each call ends with a user turn
        fitted = await engine.fit({"messages": messages[:end]}, CallContext("t-sh", "s", headers))
    assert fitted is not None and fitted.task_class == "default"
    sent = [str(m["content"]) for m in fitted.body["messages"]]
    assert [d for d in fitted.drops if d.kind == "user" and d.reason == "aged"]
    assert _answer(0) not in sent and _answer(10) not in sent  # old outputs: gists
    assert all(_answer(k) in sent for k in range(45 - 17, 45))  # the young ones whole
    assert fitted.body["messages"][-1] == messages[-1]
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after


async def test_a_shell_queues_outputs_age_as_the_policys(
    settings: Settings, redis_client: aioredis.Redis, embedder: Embedder, drop_log_path: Path,
) -> None:
    # a queue: a second task opens as the first did (`Clock.queue_starts`), so the policy's
    # `text_tools` no longer apply (`steps.one_run`): under the policy's 60th turn no output
    # of the current task goes as a gist (with them, later batches cost MedAgentBench's
    # queues). The first task's are done with (`done_results_turns`, test_done_results.py):
    # gists with the shipped settings, as sent with that rule off
    first = _session(10, _grep_reply)[:-1]  # the run ends with the agent's last turn
    second = _session(35, _grep_reply)[1:]  # the task statement again, then its turns
    messages = first + second
    for done_results in (False, True):
        shipped = without_young(settings)
        metrics = Metrics()
        log = DropLog(str(drop_log_path), "hash", metrics)
        engine = ContextEngine(shipped if done_results else without_done_results(shipped),
                               redis_client, metrics, log, embedder)
        headers = {"x-ctxgate-session-id": f"shell-queue-{done_results}",
                   "x-ctxgate-task-class": "default"}
        fitted = None
        try:
            for end in range(2, len(messages) + 1, 2):  # each call ends with a user turn
                fitted = await engine.fit({"messages": messages[:end]},
                                          CallContext("t-sh", "s", headers))
        finally:
            log.close()
        assert fitted is not None and fitted.task_class == "default"
        aged = [d for d in fitted.drops if d.kind == "user" and d.reason == "aged"]
        assert not [d for d in aged if (d.message_index or 0) >= len(first)]
        assert bool(aged) == done_results
        assert sum(d.tokens_saved for d in fitted.drops) == (
            fitted.tokens_before - fitted.tokens_after)


def _prose_session(calls: int) -> list[dict[str, Any]]:
    """An AutoCodeRover-like session: the agent names its search calls in prose, its harness
    answers the first (`Result of search_class(...)`), then writes prose of its own."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a software developer maintaining a large project."},
        {"role": "user", "content": TASK}]
    for k in range(calls):
        messages.append({"role": "assistant", "content": _grep_reply(k).replace(
            "```bash", f'search_class("SlicedLowLevelWCS{k}")\n```')})
        if k == 0:
            answer = ('Result of search_class("SlicedLowLevelWCS0"):\n\n' + _answer(k))
        else:
            answer = (f"Based on your analysis {k}, write the patch where the offset is built."
                      "\n" + _answer(k).replace("<returncode>0</returncode>", "Context:"))
        messages.append({"role": "user", "content": answer})
    return messages


async def test_a_prose_tool_session_of_harness_replies_ages_as_the_policys(
    engine_without_young: ContextEngine,
) -> None:
    # an agent that writes a call now and then (AutoCodeRover): one user message of the 45
    # after its first answer answered a call, the rest are its harness's prose
    # (`Clock.text_results` against `Clock.replies`), so the policy's `text_tools` do not
    # apply (`steps.one_run`): under the policy's 60th turn no old message goes as a gist
    # (with them, AutoCodeRover's queues lost 1.2-2.8 points of cost @0.1)
    engine = engine_without_young
    messages = _prose_session(45)
    assert is_text_tool_request({"messages": messages})
    headers = {"x-ctxgate-session-id": "prose-tools", "x-ctxgate-task-class": "default"}
    fitted = None
    for end in range(2, len(messages) + 1, 2):  # each call ends with a user turn
        fitted = await engine.fit({"messages": messages[:end]}, CallContext("t-pr", "s", headers))
    assert fitted is not None and fitted.task_class == "default"
    assert not [d for d in fitted.drops if d.kind == "user" and d.reason == "aged"]
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after
