"""gptme's recorded eval runs (a terminal agent with shell, save, patch and python tools,
many models, three tool formats) as corpus folders `bench/replay.py` reads.

gptme (`gptme/gptme`, MIT) is a **terminal agent**: the user's request, then per step the
model's reply, which runs tools, and each tool's output as a message of its own. Its tools
come in three formats: `markdown` (a fenced block named after the tool, "```shell ...```",
"```save main.py ...```"), `xml` (the same blocks in XML tags) and `tool` (native tool
calls, shown in the chat as a line `@shell(<call id>): {"command": ...}`). gptme keeps its
own roles: a tool's output is a **`system` message in the middle of the chat**. For an
OpenAI-style API it sends those as they are (consecutive ones merged, "\\n\\n" between),
except in the `tool` format, where a result that answers a call becomes a `tool` message
and the `@name(id): {...}` lines of a reply become its `tool_calls` (`gptme/llm/
llm_openai.py`, `_handle_tools`).

The repository committed the console output of its eval runs (`eval_results/<time>/
<provider>/<model>[@<format>]/<test>/gen_stdout.txt`, 2024-09 to 2025-11, on a branch that
carries the repository's `LICENSE`): gptme prints every message of the chat with its role,
`User: `, `Assistant: `, `System: `, after its hidden system prompt ("Skipped N hidden
system messages"). Here a run's chat is read back from that print:

- the text after `--- ^^^ past messages ^^^ ---` up to `--- Finished generation ---`, cut
  into messages at each role label that starts a line or follows a carriage return or a run
  of 40 or more spaces (the console overwrites its "Thinking..." spinner on the same line);
- a reply ends where the console's own output starts: a line `Preview` (gptme shows a tool
  use before running it, then the command's live output), a carriage return or a run of 40
  or more spaces;
- a spinner never replaced by a reply (the call failed or was cut off) ends the chat, at
  its last reply (and the `tool` messages answering it);
- texts as printed: the console wraps user and system messages at 80 columns (the line
  breaks are kept), the replies are streamed unwrapped;
- the hidden system prompt is not in the print: a run starts with the user's request;
- in the `tool` format each `@name(id): {json}` line of a reply is a tool call (arguments as
  printed; an empty text left out, as gptme does) and the system messages that follow
  answer the calls in order as `tool` messages; a run where a call has no recorded answer,
  or a line's JSON does not parse, is left out.

This converter writes, outside the repository, each with a `README.md`:

- `<out>/gptme/sessions.jsonl`: runs of at least `MIN_CALLS` calls, in path order;
- `<out>/gptme-queue/sessions.jsonl`: per tool format, its runs in that order one after
  another, cut at the run boundaries nearest each 1/N of its calls, N = calls /
  `--queue-calls` rounded (`bench.chat_corpus.join_queues`; no system prompt).

    python -m bench.gptme --repo /work/.mirror/gptme+gptme/repo --out /tmp/gen63/out
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.chat_corpus import (
    CallIds,
    Message,
    RepoReader,
    assistant_message,
    converter_main,
    join_queues,
    n_calls,
    write_runs_and_queues,
)

SOURCE = "gptme/gptme"
REV = "bfbb3eecaf87939a57dd55e876cb67c133d9c101"  # 2025-11-25, eval results and LICENSE
CORPUS = "gptme"
FOLDER = "eval_results/"
AGENT = "gptme (terminal agent: shell, save, patch, python tools)"
MIN_CALLS = 3
FORMATS = ("markdown", "xml", "tool")
START = "--- ^^^ past messages ^^^ ---\n"
END = "--- Finished generation ---"
ROLES = {"User": "user", "Assistant": "assistant", "System": "system"}
SPINNING = "Thinking..."
SPINNER = re.compile(r"Assistant: Thinking\.\.\.\s*(?=Assistant:)")
LABEL = re.compile(r"(?:^|[ \t\r]{40,}|\r)(User|Assistant|System):[ \t]?", re.M)
CONSOLE = re.compile(r"[ \t\r]{40,}|\r|^Preview$", re.M)
TOOL_LINE = re.compile(r"^@([\w.-]+)\(([^)\s]*)\): (.*)$", re.M)
RUN_PATH = re.compile(r"eval_results/(?P<time>[^/]+)/(?P<model>.+?)(?:@(?P<format>\w+))?/"
                      r"(?P<test>[^/]+)/gen_stdout\.txt")

Block = tuple[str, str]  # role, text as printed


def blocks(printed: str) -> list[Block] | None:
    """The chat's messages as printed (module docstring), or `None` when the run printed no
    chat (it failed before the first call)."""
    if START not in printed:
        return None
    text = SPINNER.sub("", printed.split(START, 1)[1].split(END, 1)[0])
    parts = LABEL.split(text)
    out = []
    for label, body in zip(parts[1::2], parts[2::2], strict=True):
        role = ROLES[label]
        if role == "assistant":
            body = CONSOLE.split(body, 1)[0]
            if body.strip() == SPINNING:
                break  # the spinner never replaced: that call got no reply
        out.append((role, body.strip()))
    return out


def tool_calls(reply: str) -> tuple[str, list[tuple[str, str, str]]] | None:
    """A `tool`-format reply's text without its `@name(id): {json}` lines and the calls
    `(id, name, arguments)`; `None` when a line's JSON does not parse."""
    calls = []
    for m in TOOL_LINE.finditer(reply):
        try:
            json.loads(m[3])
        except json.JSONDecodeError:
            return None
        calls.append((m[2], m[1], m[3]))
    return TOOL_LINE.sub("", reply).strip(), calls


def messages_of(chat: Sequence[Block], fmt: str, ids: CallIds) -> list[Message] | None:
    """The chat as gptme sent it to an OpenAI-style API (module docstring); `None` when a
    tool call has no answer or does not parse."""
    out: list[Message] = []
    open_calls: list[str] = []
    for role, text in chat:
        if role == "assistant":
            if open_calls:
                return None
            parsed = tool_calls(text) if fmt == "tool" else (text, [])
            if parsed is None:
                return None
            renamed: dict[str, str] = {}
            msg = assistant_message(parsed[0] or None, parsed[1], ids, renamed)
            open_calls = [c["id"] for c in msg.get("tool_calls", ())]
            out.append(msg)
        elif role == "system" and open_calls:
            out.append({"role": "tool", "tool_call_id": open_calls.pop(0), "content": text})
        elif out and out[-1]["role"] == role == "system":
            out[-1]["content"] += "\n\n" + text
        else:
            out.append({"role": role, "content": text})
    return None if open_calls else out


def up_to_last_reply(messages: list[Message]) -> list[Message]:
    """The chat up to its last reply and the `tool` messages answering it: what follows (a
    chat ended by a standing spinner) went with a call that got no reply."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    end = last + 1
    while end < len(messages) and messages[end]["role"] == "tool":
        end += 1
    return messages[:end]


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Every run of `MIN_CALLS` calls or more, in path order, each with its printed chat
    (`blocks`) and format, and what was left out."""
    names = reader._git("ls-tree", "-r", "--name-only", rev, FOLDER).splitlines()
    runs, left = [], Counter[str]()
    for path in sorted(names):
        if not (m := RUN_PATH.fullmatch(path)):
            continue
        left["runs read"] += 1
        chat = blocks(reader.read(path, rev))
        if not chat:
            left["runs that printed no chat"] += 1
            continue
        fmt = m["format"] or "markdown"
        messages = messages_of(chat, fmt, CallIds())
        if messages is None:
            left["tool-format runs with a call unanswered or unparsed"] += 1
            continue
        if n_calls(messages) < MIN_CALLS:
            left[f"runs of fewer than {MIN_CALLS} calls"] += 1
            continue
        messages = up_to_last_reply(messages)
        runs.append({
            "id": f"{CORPUS}/{m['time']}/{m['model']}@{fmt}/{m['test']}",
            "source": f"{SOURCE}@{rev[:7]}", "path": path,
            "agent": f"{AGENT}, {fmt} tool format", "model": m["model"],
            "task_id": m["test"], "tools": [], "messages": messages,
            "_chat": chat, "_format": fmt})
    return runs, left


def public(run: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if not k.startswith("_")}


def queue_sessions(runs: Sequence[dict[str, Any]], queue_calls: int) -> list[dict[str, Any]]:
    """Per tool format its runs one after another (module docstring)."""
    by_format: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_format.setdefault(r["_format"], []).append(r)
    joined, _ = join_queues(
        by_format, calls=lambda r: n_calls(r["messages"]),
        parts=lambda total: round(total / queue_calls), system=lambda _r: None,
        messages=lambda r, ids: up_to_last_reply(
            messages_of(r["_chat"], r["_format"], ids) or []),
        name=lambda fmt, q, _g: f"{CORPUS}-queue/{fmt}/q{q:02d}")
    out = []
    for sid, messages in joined:
        group = [r for r in runs if r["_format"] == sid.split("/")[1]]
        out.append({**public(group[0]), "id": sid, "path": FOLDER,
                    "agent": f"{AGENT}, {group[0]['_format']} tool format", "model": None,
                    "task_id": None, "messages": messages})
    return out


README = """# gptme, a terminal agent (its eval runs, many models, three tool formats): {shape}

Converted by `bench/gptme.py` (ctxgate) from `eval_results/<time>/<provider>/<model>
[@<format>]/<test>/gen_stdout.txt` in {source} at commit `{commit}`. Licence of the
source: MIT (its `LICENSE` at that commit, "Copyright 2023 Erik Bjäreholt"). Used for
measurement only; not part of the ctxgate repository; do not commit it there.

{stats}.

- Read: {left}. Runs used: {runs} ({by_format}).
- Each run's chat is read back from gptme's console print of it (`bench/gptme.py`): the
  user's request, the replies, each tool's output as a `system` message (consecutive ones
  merged), in the `tool` format the `@name(id): {{json}}` lines as `tool_calls` answered by
  `tool` messages. The hidden system prompt is not in the print (no system prompt here);
  user and system texts keep the console's line breaks at 80 columns.
- No API tools in `tools`: the tool definitions of the `tool` format were not printed.
{join}"""

JOIN_RUNS = "- One session per run, in path order (time, provider, model, test).\n"
JOIN_QUEUE = """- Queues: per tool format, its runs in the runs folder's order, cut at the run
  boundaries nearest each 1/N of its calls, N = calls / {queue_calls} rounded (at least
  1): each run's messages after the last, nothing added (no system prompt).
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 50
            ) -> dict[str, int]:
    reader = RepoReader(repo, "README.md")
    if not reader.git:
        raise ValueError(f"{repo}: a git directory is needed (the runs are not on main)")
    commit = reader._git("rev-parse", rev).strip()
    runs, left = load(reader, rev)
    if not runs:
        raise ValueError(f"{repo}@{rev}: no run of {MIN_CALLS} calls or more")
    fields = {
        "source": SOURCE, "commit": commit, "runs": len(runs),
        "left": ", ".join(f"{why} {n:,}" for why, n in left.most_common()),
        "by_format": ", ".join(f"`{k}` {n}" for k, n in
                               sorted(Counter(r["_format"] for r in runs).items())),
    }
    return write_runs_and_queues(out, CORPUS, [public(r) for r in runs],
                                 queue_sessions(runs, queue_calls), README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen63/out", REV, 50, convert)


if __name__ == "__main__":
    raise SystemExit(main())
