"""Which task class a request belongs to: header, then YAML rules (tool names, system-prompt
patterns; a tool-using request then falls back to the agent policy; model), then the nearest
class by embedding of its example requests, then the default. The engine asks once per
session and remembers the answer, per session and per agent (`agent_fingerprint`)."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gateway.context.items import (
    appended_observation,
    content_text,
    json_step_result,
    observation_label,
    scratchpad,
    system_observation,
    text_tool_result,
)
from gateway.context.taskclass import DEFAULT_CLASS, TaskClass

if TYPE_CHECKING:
    from gateway.embeddings import Embedder, Vectors

MIN_SIMILARITY = 0.3
# A user turn re-sends state (`RequestScan.resends`) when its lines of `RESEND_LINE_CHARS`
# or more that earlier user turns had add up to `RESEND_CHARS`: a harness that puts the
# whole program, document or record into each new prompt (ChatDev's phase prompts).
RESEND_LINE_CHARS = 40
RESEND_CHARS = 2000
# ... in this many user turns: a harness that does so at every step, not a queue whose next
# task re-sends its instructions (MINT's queue: tune recall 0.02 point lower at 1, 0.01 at 2)
RESEND_TURNS = 3
# ... or, in a short prompt, at least `RESEND_MIN_CHARS` that are `RESEND_SHARE` or more of
# its long lines' characters: a small template re-sent with another history (2-4k-character
# micro-agent prompts, whose re-sent lines never add up to `RESEND_CHARS`)
RESEND_MIN_CHARS = 500
RESEND_SHARE = 0.5
# A user turn answering an assistant turn is a report (`RequestScan.reports`) when it has
# `REPORT_CHARS` or more and `REPORT_RATIO` times the characters of the turn it answers: an
# observation sent back to an agent (another agent's findings, a page read), where a person
# chatting asks in fewer words than the answer they get. `REPORT_TURNS` of them, and half
# the user turns that answer the assistant or more, make the session an agent's.
REPORT_CHARS = 400
REPORT_RATIO = 2
REPORT_TURNS = 3
# An agent's own turn is restated (`superseded` with this `least`) when a later turn of its
# own re-sends this many characters of its long lines: a new plan written on the old one's
# template (its headings, the team it lists), where the old plan's own lines are a finished
# task's. Tune, Magentic-One queues: a plan shares 1,019-1,269 characters with the next.
RESTATED_CHARS = RESEND_MIN_CHARS


def long_lines(text: str) -> list[str]:
    """The lines of `text` long enough to tell a re-sent copy (`RESEND_LINE_CHARS`)."""
    return [line for line in text.splitlines() if len(line) >= RESEND_LINE_CHARS]


def resent(lines: Sequence[str], earlier: Collection[str]) -> bool:
    """Whether a prompt's long `lines` re-send `earlier` lines: `RESEND_CHARS` of them, or
    in a short prompt `RESEND_MIN_CHARS` that are `RESEND_SHARE` of its long lines."""
    found = sum(len(line) for line in lines if line in earlier)
    return found >= RESEND_CHARS or (
        found >= RESEND_MIN_CHARS and found >= RESEND_SHARE * sum(map(len, lines)))


def superseded(text: str, later: Collection[str], least: int = RESEND_CHARS) -> bool:
    """Whether a prompt is re-sent by later prompts (`later`: their lines): its long lines
    found there add up to `least` (`RESEND_CHARS`), as a re-sending prompt's do
    (`RequestScan.resends`), or are all there. The newer copy holds the state it held; what
    is left of it (the phase's own instructions) was for the call that answered it. (The
    share that `resent` also counts is not used here: it changed nothing on the queues that
    needed it.) An agent's own turn re-written on its template (`RESTATED_CHARS`: a new
    plan) is read with a lower `least`."""
    lines = long_lines(text)
    found = sum(len(line) for line in lines if line in later)
    return bool(lines) and (found >= least or found == sum(map(len, lines)))


def defined_tools(body: Mapping[str, Any]) -> list[str]:
    """Names of the tools the request defines, sorted."""
    names = set()
    for tool in body.get("tools") or ():
        if isinstance(tool, Mapping):
            fn = tool.get("function")
            name = fn.get("name") if isinstance(fn, Mapping) else tool.get("name")
            if name:
                names.add(str(name))
    return sorted(names)


def tool_names(body: Mapping[str, Any]) -> set[str]:
    """Tools the request defines or its history calls."""
    names = set(defined_tools(body))
    for msg in body.get("messages") or ():
        for call in msg.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping) and fn.get("name"):
                names.add(str(fn["name"]))
    return names


def is_agent_request(body: Mapping[str, Any]) -> bool:
    """Defines tools or carries tool history: a request of a tool-using agent."""
    if body.get("tools"):
        return True
    return any(
        m.get("role") in ("tool", "function") or m.get("tool_calls")
        for m in body.get("messages") or ()
    )


def is_text_tool_request(body: Mapping[str, Any]) -> bool:
    """An agent whose tools are text (no API tools): some user turn after an assistant turn
    is the result of a call that assistant turn wrote (`text_tool_result`), or an assistant
    turn carries the result its harness appended to it (`appended_observation`)."""
    return RequestScan().text_tools(body.get("messages") or ())


@dataclass(slots=True)
class RequestScan:
    """What `is_agent_request` and `is_text_tool_request` read of a session's messages,
    kept with its prefix (`prefix.Prefix.scan`) from one call to the next, so that a call
    whose older messages the prefix proved unchanged (its byte check, or the gateway's
    `Lineage`) reads only its new ones. Each answer can only turn true as messages are
    appended: once true it is not read again."""

    count: int = 0  # messages `agent` read
    agent: bool = False  # one of them is a tool result or carries tool calls
    text_count: int = 0  # messages `text_tools` read
    text: bool = False  # one of them is a text tool's result (`is_text_tool_request`)
    assistant: str = ""  # the text of the last assistant message read by `text_tools`
    after_assistant: bool = False  # the last message `text_tools` read was an assistant's
    resend_count: int = 0  # messages `resends` read
    resend: bool = False  # user turns among them re-send earlier ones' lines (`resends`)
    resent: int = 0  # how many of them re-send them
    user_lines: set[str] = field(default_factory=set)  # long lines of the user turns read
    pad_count: int = 0  # messages `scratchpads` read
    report_count: int = 0  # messages `reports` read
    report: bool = False  # their user turns are an agent's observations (`reports`)
    reported: int = 0  # user turns among them that are reports
    answers: int = 0  # user turns among them that answer an assistant turn
    answered: int | None = None  # the characters of the assistant turn just read
    report_lines: set[str] = field(default_factory=set)  # long lines of the user turns read
    pad: bool = False  # one of them is a user turn that carries an agent's steps

    def agent_history(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """Whether `messages` (those read before, then new ones) carry tool history."""
        if not self.agent:
            self.agent = any(
                m.get("role") in ("tool", "function") or m.get("tool_calls")
                for m in messages[self.count:]
            )
        self.count = len(messages)
        return self.agent

    def scratchpads(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """Whether a user turn of `messages` (those read before, then new ones) carries an
        agent's own steps and their results (`items.scratchpad`): tool history kept inside
        a user message by a harness that sends the whole episode as one."""
        if not self.pad:
            self.pad = any(m.get("role") == "user"
                           and scratchpad(content_text(m.get("content")))
                           for m in messages[self.pad_count:])
        self.pad_count = len(messages)
        return self.pad

    def reports(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """Whether `messages` (those read before, then new ones) are an agent's session
        without tools: `REPORT_TURNS` or more of the user turns that answer an assistant
        turn are reports, and they are half of those turns or more. A report has
        `REPORT_CHARS`, `REPORT_RATIO` times the turn it answers; it re-sends no earlier
        user turn's lines (`resent`: a harness's prompt template) and carries no label of a
        prose call's result (`items.observation_label`: a text-tool agent whose call form
        `is_text_tool_request` does not know yet; report-aged before that check knew it, a
        DA-Code queue's first calls changed what its later ones kept, tune recall 99.272 ->
        99.270). An orchestrator that delegates in prose gets its team's findings back as
        user turns: history that ages as tool results do, not a person's instructions (a
        person's long turns seldom follow short answers three times). Only a session that
        opens with a system prompt, as a harness sets one: a person's chat without one that
        pastes long texts between short answers goes out as sent."""
        if not self.report and messages and messages[0].get("role") in (
                "system", "developer"):
            for msg in messages[self.report_count:]:
                role = msg.get("role")
                if role == "assistant":
                    self.answered = len(content_text(msg.get("content")))
                    continue
                if role == "user":
                    text = content_text(msg.get("content"))
                    lines = long_lines(text)
                    if self.answered is not None:
                        self.answers += 1
                        if (len(text) >= REPORT_CHARS
                                and len(text) >= REPORT_RATIO * self.answered
                                and not observation_label(text)
                                and not resent(lines, self.report_lines)):
                            self.reported += 1
                    self.report_lines.update(lines)
                self.answered = None
                if self.reported >= REPORT_TURNS and 2 * self.reported >= self.answers:
                    self.report, self.report_lines = True, set()
                    break
        self.report_count = len(messages)
        return self.report

    def text_tools(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """`is_text_tool_request` of `messages` (those read before, then new ones)."""
        if not self.text:
            assistant, after = self.assistant, self.after_assistant
            for msg in messages[self.text_count:]:
                role = msg.get("role")
                if role == "assistant":
                    assistant = content_text(msg.get("content"))
                    if appended_observation(assistant) is not None:
                        self.text = True  # a call's result appended to the agent's turn
                        break
                elif role == "user" and assistant and (
                        text_tool_result(assistant, text := content_text(msg.get("content")))
                        or (after and json_step_result(assistant, text))):
                    self.text = True
                    break
                elif role in ("system", "developer") and after and assistant and (
                        system_observation(assistant, content_text(msg.get("content")))):
                    self.text = True  # a call's result sent back as a system message
                    break
                after = role == "assistant"
            self.assistant, self.after_assistant = assistant, after
        self.text_count = len(messages)
        return self.text

    def resends(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """Whether `RESEND_TURNS` user turns of `messages` (those read before, then new
        ones) each repeat `RESEND_CHARS` or more of earlier user turns' long lines: a
        harness that re-sends the state it works on in each prompt, so that an older copy
        is superseded by the newer one (`engine.resend_aging`)."""
        if not self.resend:
            for msg in messages[self.resend_count:]:
                if msg.get("role") != "user":
                    continue
                lines = long_lines(content_text(msg.get("content")))
                if resent(lines, self.user_lines):
                    self.resent += 1
                if self.resent >= RESEND_TURNS:
                    self.resend, self.user_lines = True, set()
                    break
                self.user_lines.update(lines)
        self.resend_count = len(messages)
        return self.resend


def agent_fingerprint(body: Mapping[str, Any]) -> str | None:
    """Which agent sent a request: its system prompt and the tools it defines. Every session
    of one agent has the same fingerprint from its first call on, however short that is.
    None when the request has neither: nothing tells its agent apart."""
    system, tools = system_prompt(body.get("messages") or ()), defined_tools(body)
    if not system and not tools:
        return None
    h = hashlib.blake2b(digest_size=12)
    h.update(system.encode() + b"\x00" + "\x00".join(tools).encode())
    return h.hexdigest()


def system_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    """The request's first message when it is a system or developer one: its agent's
    prompt. The system messages after it are not the agent's: a header a client rebuilds
    on every call (the date, what its memory recalled), results of its calls sent back as
    system messages (`system_observation`); read in, they made each call a new agent."""
    first = messages[0] if messages else None
    if first is None or first.get("role") not in ("system", "developer"):
        return ""
    return content_text(first.get("content"))


def system_text(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(
        content_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    )


def request_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """What a request is about: the start of its system prompt and its first user message."""
    first_user = next(
        (content_text(m.get("content")) for m in messages if m.get("role") == "user"), ""
    )
    return (system_text(messages)[:300] + "\n" + first_user[:1500]).strip()


@dataclass
class HistoryRules:
    """What `Classifier.by_rules` reads of a request's messages (the tools its history
    called, its system texts, whether it carries tool history), kept from one call of a
    session to the next so that a call reads only its new messages: only for calls whose
    messages[:count] are proven to be the very ones read before (`prefix.Lineage`)."""

    count: int = 0
    called: set[str] = field(default_factory=set)
    system: list[str] = field(default_factory=list)
    agent: bool = False

    def read(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Take in messages[count:], as `tool_names`, `system_text` and
        `is_agent_request` read each message."""
        for msg in messages[self.count:]:
            calls = msg.get("tool_calls")
            for call in calls or ():
                fn = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(fn, Mapping) and fn.get("name"):
                    self.called.add(str(fn["name"]))
            role = msg.get("role")
            if role in ("system", "developer"):
                self.system.append(content_text(msg.get("content")))
            if role in ("tool", "function") or calls:
                self.agent = True
        self.count = max(self.count, len(messages))


class Classifier:
    def __init__(self, classes: Mapping[str, TaskClass], embedder: Embedder | None) -> None:
        self._classes = [c for c in classes.values() if c.name != DEFAULT_CLASS]
        self._agents = next((c.name for c in self._classes if c.match.agents), None)
        self._embedder = embedder
        self._centroids: tuple[list[str], Vectors] | None = None

    def by_rules(self, body: Mapping[str, Any], seen: HistoryRules | None = None) -> str | None:
        """The class the rules name, or None. `seen`: what an earlier call of the session
        read of these same messages (`HistoryRules`), read on from there."""
        messages = body.get("messages") or []
        if seen is not None:
            seen.read(messages)
        tools = tool_names(body) if seen is None else set(defined_tools(body)) | seen.called
        if tools:
            for cls in self._classes:
                if cls.match.tools & tools:
                    return cls.name
        system = system_text(messages) if seen is None else "\n".join(seen.system)
        if system:
            for cls in self._classes:
                if any(p.search(system) for p in cls.match.system_patterns):
                    return cls.name
        if self._agents is not None and (
                is_agent_request(body) if seen is None
                else bool(body.get("tools")) or seen.agent):
            return self._agents
        model = str(body.get("model") or "")
        for cls in self._classes:
            if any(p.search(model) for p in cls.match.models):
                return cls.name
        return None

    async def _class_centroids(self) -> tuple[list[str], Vectors] | None:
        if self._centroids is None and self._embedder is not None:
            names, rows = [], []
            for cls in self._classes:
                if cls.match.examples:
                    vectors = await self._embedder.embed(list(cls.match.examples))
                    centroid = vectors.mean(axis=0)
                    rows.append(centroid / max(float(np.linalg.norm(centroid)), 1e-9))
                    names.append(cls.name)
            if rows:
                self._centroids = (names, np.stack(rows).astype(np.float32))
        return self._centroids

    async def by_example(self, text: str) -> str | None:
        centroids = await self._class_centroids()
        if centroids is None or not text or self._embedder is None:
            return None
        names, matrix = centroids
        vector = (await self._embedder.embed([text]))[0]
        sims = matrix @ vector
        best = int(np.argmax(sims))
        return names[best] if float(sims[best]) >= MIN_SIMILARITY else None

    async def classify(self, body: Mapping[str, Any]) -> tuple[str, str]:
        """(class name, how it was decided: rule | example | default)."""
        by_rule = self.by_rules(body)
        if by_rule is not None:
            return by_rule, "rule"
        by_example = await self.by_example(request_text(body.get("messages") or []))
        if by_example is not None:
            return by_example, "example"
        return DEFAULT_CLASS, "default"
