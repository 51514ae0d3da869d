"""Parse a request's messages into items: stable ids, kinds, ages, exact token counts.

One message is one item, except that recognisable retrieved documents inside a user or tool
message become their own `knowledge` items (segments of that message). An assistant message
with `tool_calls` and its `tool` results share a `unit`: a unit is dropped as a whole, so
calls and results always stay paired. The first segment of a message carries the message's
fixed cost (per-message overhead, name, tool calls), so per-item counts add up to the
request's count.
"""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_left
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.context.offload import CHECK_EVERY, check_deadline
from gateway.context.segments import find_documents
from gateway.context.tokens import REPLY_PRIMING, TOKENS_PER_MESSAGE, TOKENS_PER_NAME, TokenCounter
from gateway.observability.droplog import Kind

# A message a wire adapter marks with this key is pinned (an opaque item, a signed block).
PINNED = "ctxgate_pinned"
# A file name the task statement names (`report_2024.docx`, `form_template.json`): a
# tool result answering a call whose arguments name it is a document the task works from.
_FILE_NAME = re.compile(r"(?<![\w.-])[\w-]+(?:\.[\w-]+)*\.[A-Za-z][A-Za-z0-9]{1,4}(?![\w-])")

_ROLE_KIND: dict[str, Kind] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool_result",
    "function": "tool_result",
}


class Clock:
    """The assistant turns among a session's messages walked so far (`Layout.extend` moves
    it): an item reads its age from its layout's clock, so the items of a history that only
    grows age without being rebuilt (a step call takes its session's items as they are).
    `named`: the indexes of the tool results answering a call whose arguments name a file
    the task statement names (`Layout.extend`): the documents the task works from.
    `task_start`, `task_turns`: the index of the user message that started the current
    task, in a session whose agent had answered before it (a queue's later task; -1: none),
    and the turns walked when it came: what the task has lasted is `turns - task_turns`.
    `api_calls`: the agent made a tool call through the API (its outputs come as tool
    messages, so a user message after its answer is the user's: `steps.on_first_task`);
    `text_calls`: a user message answered a call the agent wrote in its turn
    (`text_tool_result`: its outputs are such messages, any other is the user's);
    `text_results` of the `replies` user messages after the agent's first answer did
    (`steps.one_run`: mini-SWE-agent's are nearly all, AutoCodeRover's one or two a run).
    `task_statement`: `task_start` when that user message reads as a new task's statement
    (`new_task_statement`: a long message after the agent worked through the API on its
    own for NEW_TASK_CALLS turns), else -1: a customer's reply in a conversation with an
    agent (tau-bench), or a text-tool agent's observation, starts no task statement.
    `queue_starts`: (index, turns walked) of each later task's start that opens as the first
    task's statement did (`Layout.task_starts`), in order: a queue harness's tasks, which a
    harness's reply to a malformed turn (`task_start`) does not start, nor a run of user
    messages shorter than the first task's statement (`Layout.first_run`: a harness's
    instructions for one node of its agent, opening with the same template line).
    `called_start`: `task_start` when the agent had made a call answered in prose;
    `json_steps`: one such call was a JSON step answered by a JSON observation
    (`json_step_result`); `system_results`: one was answered by a system message
    (`system_observation`)."""

    __slots__ = ("api_calls", "called_start", "json_steps", "named", "queue_starts", "replies",
                 "system_results", "task_start", "task_statement", "task_turns",
                 "template_turns", "text_calls", "text_results", "turns")

    def __init__(self, turns: int = 0) -> None:
        self.turns = turns
        self.named: set[int] = set()
        self.task_start = -1
        self.called_start = -1  # the latest `task_start` after a call answered in prose
        self.task_statement = -1
        self.task_turns = 0
        self.api_calls = False
        self.text_calls = False
        self.json_steps = False  # a call's result was a JSON step's (`json_step_result`)
        self.system_results = False  # a call's result was a system message
        self.text_results = 0
        self.replies = 0
        self.queue_starts: list[tuple[int, int]] = []
        # user messages after the first answer that open as the first one did (its first
        # line: a harness's template), a later task's statement or not (`steps.queue_statement`)
        self.template_turns: set[int] = set()

    def text_queue(self) -> bool:
        """Whether the session is a text-tool agent's queue of tasks: no tool call through
        the API, and a later task found by its statement (`queue_starts`)."""
        return not self.api_calls and bool(self.queue_starts)


# A user message after an answer is a new task's statement (`Clock.task_statement`) when the
# agent made at least NEW_TASK_CALLS turns of API tool calls since the user's message before
# it (it worked a task on its own: a tau-bench agent answering a customer made at most 8) and
# it has NEW_TASK_CHARS characters (a Toolathlon task's has 265 and more). Tune splits.
NEW_TASK_CALLS = 10
NEW_TASK_CHARS = 250


def new_task_statement(api_turns: int, text: str) -> bool:
    """Whether a user message after an answer, `text`, following `api_turns` assistant turns
    of API tool calls since the user's message before it, reads as a new task's statement."""
    return api_turns >= NEW_TASK_CALLS and len(text) >= NEW_TASK_CHARS


STILL = Clock()  # the clock of items made outside a layout (never moves): age = -turn


# An agent that calls its tools through the API re-types its own replies: a customer-service
# agent ends a confirmation on the record it names (`from order #W5565470.`) and its next
# reply says the same, period included. An aged reply's digest (a turn with no tool call, not
# a call's plan) lists a value that ends one of its sentences with its period (`summarize`'s
# `periods`), the bare value known elsewhere or not: the list that left it out as known
# (the order id kept in a call's arguments) no longer held the token the next reply types.
# Issue-7 yardstick (bench/README.md, "tau2 retail queues' recall: an API-tool agent's aged
# reply lists its sentence-ending values with their period"): tau2 retail gpt-4.1 queues'
# recall 99.107 / 99.071 -> 100.000 / 99.891 (tune / holdout), gpt-4.1-mini's 99.460 /
# 99.022 -> 99.590 / 99.238, cost @0.1 -0.06..-0.10; a call's plan too cost tau-bench
# airline runs 0.15 point of cost @0.1 (a step moved) for no recall on tau2.
OWN_TURN_KINDS = frozenset({"assistant"})


@dataclass(frozen=True, slots=True)
class Item:
    """One piece of the context that is kept, rewritten or dropped as a whole."""

    id: str
    kind: Kind
    unit: str  # items of one unit are dropped together
    message_index: int
    segment: int  # 0: the message head (carries the fixed cost); 1..: later segments
    text: str  # the rewritable text (a slice of string content, or joined text parts)
    tokens: int  # tokens of text + fixed_tokens
    fixed_tokens: int  # cost that stays while the message stays (overhead, tool calls)
    turn: int  # assistant turns up to and including this message (its age counts from it)
    pinned: bool
    rewritable: bool  # string content: may be replaced by a shorter text
    goal: bool = False  # part of the task statement (user words before the first answer)
    score: float = 0.0  # importance set by rerank; higher is kept longer
    clock: Clock = field(default=STILL, compare=False, repr=False)  # its layout's turns

    @property
    def age(self) -> int:
        """Assistant turns after this message, in the messages its layout has walked."""
        return self.clock.turns - self.turn

    @property
    def periods(self) -> bool:
        """Whether its digest's value list names a value that ends a sentence with its period
        (`summarize.values`' `periods`): every item of an agent that writes its steps as
        JSON (`Clock.json_steps`), and the own replies (`OWN_TURN_KINDS`) of an API-tool
        agent or of one whose results come back as system messages (`system_results`: its
        replies re-tell what they found, `…is 541.`, as the next run of a queue's task
        finds it again; gptme queues' tune recall 99.32 -> 99.70; bench/README.md, "Aged
        replies keep their markup")."""
        return self.clock.json_steps or ((self.clock.api_calls or self.clock.system_results)
                                         and self.kind in OWN_TURN_KINDS)


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    items: list[Item]
    base_tokens: int  # reply priming + tool definitions: always sent
    encoding: str
    layout: Layout | None = None  # how the items were laid out: extended by the next call

    @property
    def tokens(self) -> int:
        return self.base_tokens + sum(item.tokens for item in self.items)


TEXT_PARTS = ("text", "input_text")


def content_text(content: Any, kinds: tuple[str | None, ...] = TEXT_PARTS) -> str:
    """A message's text: a string as is, a list of parts as its text parts (`kinds`)
    joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") in kinds
        )
    return "" if content is None else str(content)


def text_parts(content: Any) -> bool:
    """Whether a content is a list of plain text parts and nothing else (`[{"type": "text",
    "text": ...}]`, as a client that always sends lists writes every message): it says no
    more than its text does, so a rewrite of that text is sent as a string content, as a
    string content's is. A part with anything else (an image, a cache mark) keeps the list
    as sent."""
    return isinstance(content, list) and bool(content) and all(
        isinstance(part, Mapping) and part.get("type") == "text"
        and isinstance(part.get("text"), str) and len(part) == 2
        for part in content)


def _digest(*parts: str) -> str:
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(part.encode())
        h.update(b"\x00")
    return h.hexdigest()


# A call an agent wrote in prose (`search_class("SQLCompiler")`): a name followed by `(`.
_CALL_NAME = re.compile(r"([A-Za-z_][\w.]{2,})\(")
# A user turn this long or longer, whose first line names a call the assistant's turn
# before it wrote, is that call's result: a harness, not a person, wrote it.
TEXT_RESULT_MIN_CHARS = 200
_HEAD_CHARS = 200


# A REST call an agent wrote in prose, on a line of its own (`GET http://host/fhir/...`).
_HTTP_CALL = re.compile(r"^\W*(GET|POST|PUT|PATCH|DELETE) +https?://", re.MULTILINE)


# A ReAct action, on a line of its own (`search[red shoes]`, `Action 2: Lookup[born]`), and
# the label ReAct's harnesses put before its result (`Observation:`, `Observation 2:`).
_REACT_ACTION = re.compile(r"^\W*(?:Action(?: \d+)?: *)?[A-Za-z_]\w*\[[^\n]*\] *$", re.MULTILINE)
_OBSERVATION = re.compile(r"Observation(?: \d+)?:")


# A ReAct action the agent wrote on a line of its own (`Action: search`), and the
# `Observation:` label on a line of its own that a harness writes the action's result after
# when it appends that result to the agent's own turn (the next call sends the turn back
# with it: the agent's text and the tool's output in one assistant message).
_ACTION_LINE = re.compile(r"^Action(?: \d+)?:", re.MULTILINE)
_OBSERVATION_LINE = re.compile(r"^Observation(?: \d+)?:", re.MULTILINE)


def appended_observation(text: str) -> int | None:
    """Where the result a harness appended to an assistant turn starts: its last line that
    opens with ReAct's `Observation:` label, after a line that opens with `Action:`. None:
    the turn carries no result. Such a turn's tail is a tool's output, not the agent's
    words: an agent re-running an action gets the same output appended again."""
    starts = [m.start() for m in _OBSERVATION_LINE.finditer(text)]
    if not starts or _ACTION_LINE.search(text, 0, starts[-1]) is None:
        return None
    return starts[-1]


def appended_result(text: str, min_chars: int) -> bool:
    """Whether an assistant turn carries a result its harness appended of `min_chars` or
    more (`appended_observation`): one a repeat on arrival may point back to."""
    at = appended_observation(text)
    return at is not None and len(text) - at >= min_chars


# A shell command an agent wrote in a fenced code block (```` ```bash ````, ```` ```sh ````,
# unlabelled), and the exit status its harness reports first (`<returncode>1</returncode>`,
# `Exit code: 1`): a person's reply does not open with one, so such a turn is that
# command's result however short (an edit's empty output).
_SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell|zsh|console)?[ \t]*\n", re.MULTILINE)
_EXIT_STATUS = re.compile(r"\W*(?:return ?code|exit ?code|exit status)\W{0,3}-?\d+\b",
                          re.IGNORECASE)


# Code an agent wrote for its harness to run: an execution tag (CodeAct's `<execute>`,
# `<execute_bash>`, `<execute_ipython>`) or a fenced code block; and the label such a harness
# puts before what the code printed (`Observation:`, `OBSERVATION:`).
_CODE_TO_RUN = re.compile(r"<execute(?:_\w+)?>|<code>|^```", re.MULTILINE)
_CODE_OBSERVATION = re.compile(r"\W*observation(?: \d+)?:", re.IGNORECASE)


def observation_label(text: str) -> bool:
    """Whether a turn opens with ReAct's `Observation:` label: a harness writing back the
    result of a call its agent wrote in prose, whatever form the call took."""
    return _CODE_OBSERVATION.match(text.lstrip()[:_HEAD_CHARS]) is not None


def text_tool_result(assistant: str, user: str) -> bool:
    """Whether a user turn answers a call the assistant turn before it named in prose: it is
    long and its first line names that call (`Result of search_class("X"):`), or the HTTP
    method of a REST call the assistant wrote on a line of its own (`GET http://...` then
    `Here is the response from the GET request:`), or it starts with ReAct's
    `Observation:` label after a ReAct action the assistant wrote on a line of its own
    (`click[Buy Now]`), as an agent harness that runs the model's calls writes it back; a
    person's reply rarely does. Or, however short, its first line reports the exit status
    of a shell command the assistant wrote in a fenced block (`<returncode>0</returncode>`
    after ```` ```bash ````), or opens with an `Observation:` label after code the
    assistant wrote to be run (`<execute>print(goto("drawer 1"))</execute>`, a fenced
    block): a code-acting agent's harness answers so, a person does not."""
    head = user.lstrip()[:_HEAD_CHARS].split("\n", 1)[0]
    if "```" in assistant and _EXIT_STATUS.match(head) and _SHELL_BLOCK.search(assistant):
        return True
    if _CODE_OBSERVATION.match(head) and (
            _CODE_TO_RUN.search(assistant) or _CALL_RECORD.search(assistant)):
        return True
    if _names_record_id(head, assistant):
        return True
    if len(user) < TEXT_RESULT_MIN_CHARS:
        return False
    if "(" in assistant and any(m.group(0) in assistant for m in _CALL_NAME.finditer(head)):
        return True
    if "[" in assistant and _OBSERVATION.match(head) and _REACT_ACTION.search(assistant):
        return True
    words = set(re.findall(r"\b[A-Z]+\b", head))
    return any(m.group(1) in words for m in _HTTP_CALL.finditer(assistant))


def _names_record_id(head: str, assistant: str) -> bool:
    """Whether a turn's first line names the id of a call the assistant turn before it
    recorded (`Call id: call_3` after `[{'id': 'call_3', 'function': ...}]`): a harness that
    runs the calls answers each by its id; a person does not quote it."""
    return "id" in assistant and any(
        re.search(rf"(?<![\w.:-]){re.escape(m.group(3))}(?![\w.:-])", head)
        for m in _RECORD_ID.finditer(assistant))


# A ReAct loop's labels at the start of a line (`Action:`, `Observation 2:`), and the prompt
# for the next thought that ends a scratchpad the harness sends back (LangChain's
# `llm_prefix`: `Thought:` and nothing after it).
LOOP_LABEL = re.compile(r"^(Thought|Action|Observation|Final Answer)(?: (\d+))?:", re.MULTILINE)
_LOOP_PROMPT = re.compile(r"\nThought(?: \d+)?:\s*\Z")


def scratchpad(text: str) -> bool:
    """Whether a user turn carries an agent's own steps: it ends in the loop's prompt for the
    next thought, and the labels before it close on an action and its `Observation:`, as a
    harness that keeps the whole episode in one user message writes it back (a structured
    or ReAct agent's scratchpad: the objective, then each step's thought, action and
    observation). Such a turn is tool history, the agent's calls and their results, though
    no message of the request carries a tool call. A prompt whose worked examples run into
    the task does not end on an observation then the prompt (the task comes between)."""
    if not _LOOP_PROMPT.search(text[-40:]):
        return False
    labels = [(m.group(1), m.group(2)) for m in LOOP_LABEL.finditer(text)]
    if [name for name, _ in labels[-3:-1]] != ["Action", "Observation"]:
        return False
    # numbered steps: the prompt is the next step's (`Observation 3:` then `Thought 4:`);
    # examples numbered from 1 again before the task are not the agent's own steps
    seen, prompt = labels[-2][1], labels[-1][1]
    return (seen is None) == (prompt is None) and (seen is None or int(prompt) == int(seen) + 1)


# A call an agent wrote as a JSON object (`"command": {"name": "read_file", "args": ...}`,
# `{"action": "search", ...}`): the name under one of these keys.
_JSON_CALL_NAME = re.compile(r'"(?:name|command|action|tool)"\s*:\s*"([A-Za-z_][\w.-]{2,})"')
# A harness's record of a call, as JSON or as a Python repr (`{'name': 'web_search', ...}`,
# a harness that logs its calls with `str()`): a name under one of those keys, either quote.
_CALL_RECORD = re.compile(
    r"""(['"])(?:name|command|action|tool)\1\s*:\s*(['"])[A-Za-z_][\w.-]{2,}\2""")
# The id a call record gives its call (`"id": "call_3"`, `'tool_call_id': 'call_3'`).
_RECORD_ID = re.compile(r"""(['"])(?:id|call_id|tool_call_id)\1\s*:\s*(['"])([\w.:-]{4,})\2""")
_HEAD_WORD = re.compile(r"[A-Za-z_][\w.-]{2,}")


# A code fence on a line of its own (```` ``` ````, ```` ```shell ````, ```` ```save main.py ````),
# and a closing tag alone on a turn's last line (`</tool-use>`, `</shell>`).
_FENCE_LINE = re.compile(r"^[ \t]*```", re.MULTILINE)
_CLOSING_TAG = re.compile(r"</([A-Za-z][\w.:-]*)>")


def ends_in_block(text: str) -> bool:
    """Whether a turn ends in a block written for a harness to run: its last line closes a
    fenced code block (an even count of fence lines), or is a closing tag alone whose element
    opens on a line of its own earlier in the turn (`<tool-use>` ... `</tool-use>`). An agent
    whose harness runs such blocks stops its turn there, and what comes next from the
    harness is the block's result; a turn that goes on in prose after its code (an answer
    showing code) does not end in one."""
    body = text.rstrip()
    last = body.rsplit("\n", 1)[-1].strip()
    if last == "```":
        return len(_FENCE_LINE.findall(body)) % 2 == 0
    tag = _CLOSING_TAG.fullmatch(last)
    return tag is not None and re.search(
        rf"^[ \t]*<{re.escape(tag.group(1))}[\s>]", body, re.MULTILINE) is not None


def system_observation(assistant: str, system: str) -> bool:
    """Whether a system message right after an assistant turn is the result of a call that
    turn wrote, as a harness that writes its results back as system messages sends it
    (`Command read_file returned: ...`): its first line names the call, as the assistant
    wrote it in a JSON object (`"name": "read_file"`) or in prose (`read_file(`); or the
    assistant's turn ends in a block for its harness to run (`ends_in_block`: a fenced
    ```` ```shell ```` block, a `<tool-use>` element), whose result comes back however it
    opens (`Ran command: ...`, `Saved to main.py`). Such a message is an observation of the
    conversation, not an instruction: it ages as a text tool's result does
    (`Layout.observations`). A system message that starts a new task or reminds the agent
    of its rules follows a turn that named no call and ended in prose."""
    head = system.lstrip()[:_HEAD_CHARS].split("\n", 1)[0]
    words = set(_HEAD_WORD.findall(head))
    return (any(m.group(1) in words for m in _JSON_CALL_NAME.finditer(assistant))
            or ("(" in assistant
                and any(m.group(0) in assistant for m in _CALL_NAME.finditer(head)))
            or ends_in_block(assistant))


def json_step_result(assistant: str, user: str) -> bool:
    """Whether a user turn right after an assistant turn answers it as a harness answers an
    agent that writes its steps as JSON: both turns are each one JSON object and nothing
    else (`{"kind": "search_action", ...}` then `{"kind": "search_results_observation",
    ...}`). A person's reply is not a JSON object; the caller checks the turn follows the
    assistant's at once (a later task's statement may be one too)."""
    return _json_object(assistant) and _json_object(user)


def _json_object(text: str) -> bool:
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return False
    try:
        return isinstance(orjson.loads(body), dict)
    except orjson.JSONDecodeError:
        return False


def first_line(text: str) -> str:
    """A message's first non-blank line, stripped: a queue harness opens every task's
    statement with its template's (`<pr_description>`, `Webshop`), never a reply of its own
    to the agent (`Please always provide EXACTLY ONE action…`)."""
    return text.lstrip().split("\n", 1)[0].strip()


@dataclass(slots=True)
class Layout:
    """What an item's flags depend on beyond its own message (pins, units, ages, the goal),
    extended as messages are appended: a session's next call only walks its new messages."""

    count: int = 0  # messages walked
    latest_user: int = -1
    open_from: int | None = None  # the last assistant message, when it made tool calls
    # (in API form, or in prose: a user turn after it is a call's result, `text_tool_result`)
    said: str = ""  # the last assistant message's text, when it made no API tool calls
    first_answer: int | None = None
    turns: list[int] = field(default_factory=list)  # indexes of assistant messages
    call_unit: dict[Any, str] = field(default_factory=dict)
    pins: set[int] = field(default_factory=set)  # messages marked PINNED
    clock: Clock = field(default_factory=Clock)  # len(turns), read by the items' ages
    task_files: set[str] = field(default_factory=set)  # file names the task statement names
    # file names the user messages of the current task name, when the agent had answered
    # before it (a queue's later task: `task_files` holds the first task's only)
    current_files: set[str] = field(default_factory=set)
    naming_calls: set[Any] = field(default_factory=set)  # ids of calls naming one of them
    api_turns: int = 0  # assistant turns with API tool calls since the latest user message
    # the later tasks' starts that open as the first task's statement did (its first line:
    # the harness's template, `first_line`), in order: the fold stops before the task it is
    # at (`fold.task_bound`)
    task_starts: list[int] = field(default_factory=list)
    first_line: str | None = None  # the first user message's first line
    first_run: int = 0  # user messages before the first answer (the first task's statement)
    # user messages before the agent's first call that open as the first one did: the
    # harness's further instructions for the task (a step schema), its statement too
    set_up: set[int] = field(default_factory=set)
    # system messages that are the results of the calls the assistant turn before each
    # wrote (`system_observation`): history that ages, not pinned instructions
    observations: set[int] = field(default_factory=set)

    def extend(self, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        """Walk messages[count:]; returns their units."""
        units = []
        for i in range(self.count, len(messages)):
            msg = messages[i]
            role = msg.get("role")
            unit = f"u{i}"
            if msg.get(PINNED):
                self.pins.add(i)
            if role == "user":
                self.latest_user = i
                text = content_text(msg.get("content"))
                template = self.first_line is not None and first_line(text) == self.first_line
                opens = template and _run_length(messages, i) >= self.first_run
                if template and self.first_answer is not None and not scratchpad(text):
                    # (a turn that carries its run's steps is history, not a statement)
                    self.clock.template_turns.add(i)
                    if not (opens or self.clock.api_calls or self.clock.text_calls):
                        self.set_up.add(i)
                if self.first_line is None:
                    self.first_line = first_line(text)
                if self.first_answer is None:
                    self.task_files.update(_FILE_NAME.findall(text))
                    self.first_run += 1
                else:
                    self.clock.replies += 1
                json_step = (self.open_from is None and bool(self.said)
                             and messages[i - 1].get("role") == "assistant"
                             and json_step_result(self.said, text))
                if json_step:
                    self.clock.json_steps = True
                if (self.open_from is None and self.said
                        and (json_step or text_tool_result(self.said, text))):
                    self.open_from = self.turns[-1]  # the calls it wrote in prose are open
                    self.clock.text_calls = True
                    self.clock.text_results += 1
                elif self.first_answer is not None:
                    # a new task starts (not the harness's prompt after a call's result)
                    if (messages[i - 1].get("role") != "user"
                            and i - 1 not in self.observations):
                        self.current_files = set()
                        self.clock.task_start = i
                        if self.clock.text_calls:
                            self.clock.called_start = i
                        if opens:
                            self.task_starts.append(i)
                            self.clock.queue_starts.append((i, len(self.turns)))
                        self.clock.task_turns = len(self.turns)
                        self.clock.task_statement = (
                            i if new_task_statement(self.api_turns, text) else -1)
                    self.current_files.update(_FILE_NAME.findall(text))
                self.api_turns = 0
            elif (role in ("system", "developer") and self.open_from is None and self.said
                    and messages[i - 1].get("role") == "assistant"
                    and system_observation(self.said, content_text(msg.get("content")))):
                self.observations.add(i)
                self.open_from = self.turns[-1]  # the call it answers is open
                self.clock.text_calls = True
                self.clock.text_results += 1
                self.clock.system_results = True
            elif role == "assistant":
                self.turns.append(i)
                self.open_from = i if msg.get("tool_calls") else None
                self.said = "" if msg.get("tool_calls") else content_text(msg.get("content"))
                if self.said and appended_observation(self.said) is not None:
                    # its harness appended the call's result to the turn: the exchange is
                    # open as a call answered by a user turn is, and the call reads it
                    self.open_from = i
                if self.first_answer is None:
                    self.first_answer = i
                if msg.get("tool_calls"):
                    self.clock.api_calls = True
                    self.api_turns += 1
                for call in msg.get("tool_calls") or ():
                    if isinstance(call, Mapping) and "id" in call:
                        self.call_unit[call["id"]] = unit
                        if ((self.task_files and _names_file(call, self.task_files))
                                or (self.current_files
                                    and _names_file(call, self.current_files))):
                            self.naming_calls.add(call["id"])
            elif role == "tool":
                unit = self.call_unit.get(msg.get("tool_call_id"), unit)
                if msg.get("tool_call_id") in self.naming_calls:
                    self.clock.named.add(i)
            units.append(unit)
        self.count = len(messages)
        self.clock.turns = len(self.turns)
        return units

    def pinned_message(self, i: int, kind: Kind) -> bool:
        """System messages but the calls' results among them (`observations`), marked
        ones and the tool exchange not yet answered."""
        return ((kind == "system" and i not in self.observations) or i in self.pins
                or (self.open_from is not None and i >= self.open_from))

    def restate(self, item: Item) -> Item:
        """`item` with the pin it has now (messages may have been appended since) and its
        age read from this layout (an item of this layout's has it already)."""
        i = item.message_index
        pinned = self.pinned_message(i, item.kind) or (
            i == self.latest_user and item.kind != "knowledge"
        )
        if pinned == item.pinned and item.clock is self.clock:
            return item
        return Item(item.id, item.kind, item.unit, i, item.segment, item.text, item.tokens,
                    item.fixed_tokens, item.turn, pinned, item.rewritable, item.goal,
                    item.score, self.clock)

    def current(self, item: Item) -> bool:
        """Whether `item`, of the messages this layout walked, is as `restate` states it:
        an unpinned item of this layout's stays so (only pins lapse as messages are added:
        the latest user message and the open exchange move on to new messages)."""
        return not item.pinned and item.clock is self.clock


def _run_length(messages: Sequence[Mapping[str, Any]], i: int) -> int:
    """The user messages from i to the next assistant message."""
    n = 0
    for msg in messages[i:]:
        if msg.get("role") == "assistant":
            break
        n += msg.get("role") == "user"
    return n


def _names_file(call: Mapping[str, Any], files: set[str]) -> bool:
    """Whether a tool call's arguments name one of `files` (whole, not inside a longer name)."""
    fn = call.get("function")
    raw = fn.get("arguments") if isinstance(fn, Mapping) else None
    if not isinstance(raw, str) or "." not in raw:
        return False
    return any(name in files for name in _FILE_NAME.findall(raw))


def _fixed_tokens(msg: Mapping[str, Any], counter: TokenCounter, encoding: str) -> int:
    fixed = TOKENS_PER_MESSAGE
    if msg.get("name"):
        fixed += TOKENS_PER_NAME + counter.count(str(msg["name"]), encoding)
    for call in msg.get("tool_calls") or ():
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        fixed += counter.count(str(fn.get("name", "")), encoding)
        fixed += counter.count(str(fn.get("arguments", "")), encoding) + 3
    return fixed


def message_id(i: int, role: str, text: str, msg: Mapping[str, Any]) -> str:
    """The id of a message sent as one item (its text, its tool calls, its place)."""
    return _digest(str(i), role, text, orjson.dumps(msg.get("tool_calls")).decode())


Part = tuple[str, bool, int, str, int, int, bool]  # id, knowledge, segment, text, tokens, fixed, rw


def _message_parts(
    i: int, msg: Mapping[str, Any], counter: TokenCounter, encoding: str
) -> list[Part]:
    """The segments of one message with their ids and counts (what does not depend on age)."""
    role = str(msg.get("role", "user"))
    content = msg.get("content")
    rewritable = isinstance(content, str) or text_parts(content)
    text = content_text(content)
    fixed = _fixed_tokens(msg, counter, encoding)
    if not rewritable and content is not None:
        fixed += counter.count(orjson.dumps(content).decode(), encoding) - counter.count(
            text, encoding
        )  # non-text parts: counted as sent, never rewritten
        fixed = max(fixed, TOKENS_PER_MESSAGE)
    spans = (
        find_documents(text, sections=role == "user")
        if rewritable and role in ("user", "tool")
        else None
    )
    if not spans or len(spans) == 1:
        item_id = message_id(i, role, text, msg)
        return [(item_id, False, 0, text, counter.count(text, encoding) + fixed, fixed, rewritable)]
    parts: list[Part] = []
    for k, span in enumerate(spans):
        piece = text[span.start : span.end]
        seg_fixed = fixed if k == 0 else 0
        parts.append(
            (
                _digest(str(i), role, str(k), piece),
                span.knowledge,
                k,
                piece,
                counter.count(piece, encoding) + seg_fixed,
                seg_fixed,
                True,
            )
        )
    return parts


def message_head(
    i: int, msg: Mapping[str, Any], counter: TokenCounter, encoding: str,
    memo: MutableMapping[tuple[Any, ...], list[Part]] | None = None,
) -> tuple[str, int]:
    """Message i's head item id and its tokens as sent (all its segments'), as parsed."""
    key = _parts_key(i, msg, encoding) if memo is not None else None
    parts = memo.get(key) if memo is not None and key is not None else None
    if parts is None:
        parts = _message_parts(i, msg, counter, encoding)
    return parts[0][0], sum(part[4] for part in parts)


def _parts_key(i: int, msg: Mapping[str, Any], encoding: str) -> tuple[Any, ...] | None:
    content = msg.get("content")
    if not isinstance(content, str | None):
        return None
    calls = msg.get("tool_calls")
    return (
        i,
        msg.get("role"),
        content,
        orjson.dumps(calls) if calls else None,
        msg.get("name"),
        encoding,
    )


def base_tokens(body: Mapping[str, Any], counter: TokenCounter, encoding: str) -> int:
    """Reply priming + tool definitions: always sent."""
    tools = body.get("tools")
    tool_tokens = counter.count(orjson.dumps(tools).decode(), encoding) if tools else 0
    return REPLY_PRIMING + tool_tokens


def parse_request(
    body: Mapping[str, Any],
    counter: TokenCounter,
    encoding: str,
    memo: MutableMapping[tuple[Any, ...], list[Part]] | None = None,
) -> ParsedRequest:
    """Items of a request. `memo` (kept by the caller across calls) makes a message already
    seen cost a dictionary lookup: a call then costs what its new messages cost."""
    messages: Sequence[Mapping[str, Any]] = body["messages"]
    layout = Layout()
    units = layout.extend(messages)
    items = message_items(messages, 0, units, layout, counter, encoding, memo)
    return ParsedRequest(items, base_tokens(body, counter, encoding), encoding, layout)


def message_items(
    messages: Sequence[Mapping[str, Any]],
    start: int,
    units: list[str],
    layout: Layout,
    counter: TokenCounter,
    encoding: str,
    memo: MutableMapping[tuple[Any, ...], list[Part]] | None = None,
) -> list[Item]:
    """Items of messages[start:], given the layout of all of `messages` and their units."""
    first_answer = len(messages) if layout.first_answer is None else layout.first_answer
    n_turns = len(layout.turns)
    seen = n_turns - bisect_left(layout.turns, start)  # assistant messages from start on
    clock = layout.clock
    items: list[Item] = []
    for i in range(start, len(messages)):
        if (i - start) % CHECK_EVERY == CHECK_EVERY - 1:
            check_deadline()  # a call's time budget (offload.py): parsing 100k messages takes s
        msg = messages[i]
        role = str(msg.get("role", "user"))
        kind: Kind = _ROLE_KIND.get(role, "user")
        if i in layout.observations:
            kind = "user"  # a call's result, as a text tool's harness sends it
        elif role == "assistant":
            seen -= 1
            if msg.get("tool_calls"):
                kind = "tool_call"
        key = _parts_key(i, msg, encoding) if memo is not None else None
        parts = memo.get(key) if memo is not None and key is not None else None
        if parts is None:
            parts = _message_parts(i, msg, counter, encoding)
            if memo is not None and key is not None:
                memo[key] = parts
        pinned_msg = layout.pinned_message(i, kind)
        for item_id, knowledge, segment, text, tokens, fixed, rewritable in parts:
            items.append(
                Item(
                    id=item_id,
                    kind="knowledge" if knowledge else kind,
                    unit=units[i - start],
                    message_index=i,
                    segment=segment,
                    text=text,
                    tokens=tokens,
                    fixed_tokens=fixed,
                    turn=n_turns - seen,
                    pinned=pinned_msg or (i == layout.latest_user and not knowledge),
                    rewritable=rewritable,
                    # the task statement's sections too (an issue's `### Steps to
                    # Reproduce`): their identifiers are the task's
                    goal=role == "user" and (i < first_answer or i in layout.set_up),
                    clock=clock,
                )
            )
    return items
