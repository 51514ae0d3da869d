"""Feedback signals: did the step work?

Implicit: an agent's next call carries the results of the tool calls its previous response
asked for. Those results are judged by the class's rules (YAML): a success pattern wins; a
JSON result with a non-zero exit code, or text matching a failure pattern (tracebacks,
exceptions, non-zero exit codes, HTTP 4xx/5xx), marks the step failed; otherwise it
succeeded. Explicit: `POST /v1/feedback`. A call with neither carries no signal and teaches
nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from gateway.playbook.config import ClassPlaybook, FeedbackRules

Outcome = Literal["success", "failure"]
_CITATION = re.compile(r"\[([a-z0-9_]+-\d{5})\]")


@dataclass(frozen=True, slots=True)
class Signal:
    source: Literal["implicit", "explicit"]
    outcome: Outcome
    detail: str  # what the judgement rests on (the failing line, the user's note)
    score: float | None = None
    ground_truth: str | None = None


@dataclass(frozen=True, slots=True)
class ToolStep:
    """The last assistant tool-call message and the results that answer it."""

    call_index: int  # index of the assistant message in the forwarded messages
    calls: list[dict[str, Any]]
    results: list[dict[str, Any]]


def text_of(content: Any) -> str:
    """A message's text, whether a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def cited_ids(text: str, injected: list[str]) -> list[str]:
    """Bullet ids cited as `[id]` in `text`, limited to the ones that were injected."""
    allowed = set(injected)
    return sorted({m for m in _CITATION.findall(text) if m in allowed})


def trailing_tool_step(messages: list[dict[str, Any]]) -> ToolStep | None:
    """The tool exchange the request ends with, if it ends with one."""
    end = len(messages)
    start = end
    while start > 0 and messages[start - 1].get("role") == "tool":
        start -= 1
    if start == end or start == 0:
        return None
    caller = messages[start - 1]
    if caller.get("role") != "assistant" or not caller.get("tool_calls"):
        return None
    return ToolStep(start - 1, list(caller["tool_calls"]), messages[start:end])


def may_teach(messages: list[dict[str, Any]], injected: list[str], cls: ClassPlaybook) -> bool:
    """Whether a call could change the playbook without explicit feedback.

    Structural and cheap (the gateway asks it on every call): the call must end with a tool
    exchange (the only implicit signal), in a class with a playbook, and either some outcome
    is learned on or the step cited a bullet to credit. Judging the tool results (regexes
    over output of any size) is left to the worker, off the request path.
    """
    if not cls.enabled:
        return False
    step = trailing_tool_step(messages)
    if step is None:
        return False
    if cls.feedback.learn_on:
        return True
    said = text_of(messages[step.call_index].get("content"))
    return bool(cited_ids(said, injected))


def judge(text: str, rules: FeedbackRules) -> str | None:
    """The evidence that one tool result failed, or None when it looks clean."""
    flags = re.IGNORECASE | re.MULTILINE
    if any(re.search(p, text, flags) for p in rules.success_patterns):
        return None
    exit_code = _json_exit_code(text, rules.exit_code_field)
    if exit_code:
        return f"{rules.exit_code_field}={exit_code}"
    for pattern in rules.failure_patterns:
        match = re.search(pattern, text, flags)
        if match:
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            return text[start : end if end >= 0 else len(text)].strip()[:300]
    return None


def _json_exit_code(text: str, field: str) -> int | None:
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        value = orjson.loads(stripped).get(field)
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, int) and value != 0 else None


def implicit_signal(messages: list[dict[str, Any]], rules: FeedbackRules) -> Signal | None:
    step = trailing_tool_step(messages)
    if step is None:
        return None
    names = {c.get("id"): (c.get("function") or {}).get("name", "?") for c in step.calls}
    failures = []
    for result in step.results:
        evidence = judge(text_of(result.get("content")), rules)
        if evidence is not None:
            failures.append(f"{names.get(result.get('tool_call_id'), '?')}: {evidence}")
    if failures:
        return Signal("implicit", "failure", "; ".join(failures)[:1000])
    return Signal("implicit", "success", f"{len(step.results)} tool result(s) clean")


def explicit_signal(feedback: dict[str, Any]) -> Signal:
    outcome: Outcome = "failure" if feedback.get("outcome") == "failure" else "success"
    return Signal(
        "explicit", outcome, str(feedback.get("note") or ""),
        score=feedback.get("score"), ground_truth=feedback.get("ground_truth"),
    )
