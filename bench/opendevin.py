"""OpenDevin's fresh-prompt agents (the mock LLM logs of its integration tests) as corpus
folders `bench/replay.py` reads, each call as the agent sent it.

OpenDevin (now OpenHands, `All-Hands-AI/OpenHands`, MIT) shipped, beside its chat agents
(CodeActAgent and CodeActSWEAgent: `bench/openhands.py`), agents that **write one fresh
prompt per step** from their state, so consecutive calls share no growing chat:

- *MonologueAgent*: one user message, "You're a thoughtful robot ... This is your internal
  monologue, in JSON format:" and the whole monologue so far (every earlier action and
  observation as a JSON list), then the rules; the reply is one JSON action;
- *PlannerAgent*: one user message, the task, the plan as JSON and the recent history of
  actions and observations as JSON; the reply one JSON action;
- *DelegatorAgent* and *ManagerAgent* (micro-agents): one user message rendered from a
  template, the task and the history as JSON, delegating to other micro-agents (whose calls
  are in the same log folder, in the order made);
- *SWEAgent* (OpenDevin's port of SWE-agent): a system prompt, "These are your past N
  actions" (memory of earlier actions and their output) and the response format as user
  messages;
- *BrowsingAgent*: a system prompt and one user message with the current accessibility tree
  and the previous actions.

The roles are the agents' own (their `agent.py` at the logs' commits): a one-message prompt
is a user message; in a longer one the first is the system prompt, the rest user messages.
The logs written from 2024-05-16 on do not mark where a message starts: for the agents that
always send one message (Monologue, Planner, Delegator, Manager) the log is that message; the
SWEAgent's and BrowsingAgent's runs logged so are left out.

The source is every version of the mock folders of those agents in the history of `REV`
(`bench.openhands.folder_versions`, `numbered_logs`): per commit, each test folder's set of logs
`prompt_NNN.log` / `response_NNN.log` (contents flattened behind a separator, roles not
written) is one recorded run, read again only when it changed. A run is kept when its logs are
`prompt_001 .. prompt_N` with `response_001 .. response_N`, N >= `MIN_CALLS`; the same calls
recorded again (a folder copied to another runtime, or re-recorded unchanged) are kept once.
Each run is a **per-call session** (`calls`: each prompt's messages exactly as sent and the
response; `messages`: the last call's and its response).

This converter writes, outside the repository, each with a `README.md`:

- `<out>/opendevin/sessions.jsonl`: one session per run, folders in path order, versions
  oldest first;
- `<out>/opendevin-queue/sessions.jsonl`: per agent (and system prompt, where it has one), its
  runs in that order one after another, cut at the run boundaries nearest each 1/N of its
  calls, N = calls / `--queue-calls` rounded (at least 1): the system prompt once (if any),
  then each run's last prompt and response, nothing added; per call, the earlier runs' turns
  then the call's own messages (as `bench/hyperagent.py` lays out its queues);

    python -m bench.opendevin --out /tmp/gen61/out \\
        --repo /work/.mirror/All-Hands-AI+OpenHands/repo
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.chat_corpus import (
    Message,
    RepoReader,
    converter_main,
    queue_slices,
    write_runs_and_queues,
)
from bench.openhands import (
    MOCK,
    REV,
    SOURCE,
    agent_of,
    folder_versions,
    log_texts,
    messages_of,
    numbered_logs,
)

CORPUS = "opendevin"
FRESH = ("MonologueAgent", "PlannerAgent", "DelegatorAgent", "ManagerAgent", "SWEAgent",
         "BrowsingAgent")
ONE_MESSAGE = FRESH[:4]  # their prompt is always one user message (their `agent.py`)
MIN_CALLS = 2


def sent_as(blocks: Sequence[str]) -> list[Message]:
    """A prompt log's contents as the agent sent them: one message is a user message; of
    more, the first is the system prompt and the rest user messages."""
    if len(blocks) == 1:
        return [{"role": "user", "content": blocks[0]}]
    return [{"role": "system", "content": blocks[0]},
            *({"role": "user", "content": b} for b in blocks[1:])]


def calls_of(prompts: Sequence[str], responses: Sequence[str], *, one_message: bool
             ) -> list[dict[str, Any]] | None:
    """Per call, `{"messages", "reply"}` (`bench/corpora.py`'s per-call shape; line ends
    `\\r\\n` read as `\\n`). A log not laid out as separator-led messages (the later
    logs) is the one message of an agent that sends one (`one_message`); of another agent
    its messages cannot be told apart: `None`."""
    out = []
    for prompt, response in zip(prompts, responses, strict=True):
        blocks = messages_of(prompt)
        if blocks is None and one_message:
            blocks = [prompt.replace("\r\n", "\n")]
        if blocks is None:
            return None
        out.append({"messages": sent_as(blocks),
                    "reply": {"role": "assistant", "content": response.replace("\r\n", "\n")}})
    return out


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The kept runs of the fresh-prompt agents, in folder path order (versions oldest
    first), and what was left out, per agent and why."""
    left: Counter[str] = Counter()
    versions = [v for v in folder_versions(reader, rev)
                if agent_of(v[0]).rpartition("/")[2] in FRESH]
    texts = log_texts(reader, versions)
    runs: list[dict[str, Any]] = []
    seen: set[bytes] = set()
    for folder, commit, date, files in versions:
        agent = agent_of(folder).rpartition("/")[2]
        left[f"{agent}: runs read"] += 1
        logs = numbered_logs(files, texts)
        if logs is None:
            left[f"{agent}: prompt/response logs not numbered 1..N"] += 1
            continue
        if len(logs[0]) < MIN_CALLS:
            left[f"{agent}: fewer than {MIN_CALLS} calls"] += 1
            continue
        calls = calls_of(*logs, one_message=agent in ONE_MESSAGE)
        if calls is None:
            left[f"{agent}: a prompt not laid out as messages"] += 1
            continue
        key = hashlib.blake2b(orjson.dumps(calls), digest_size=16).digest()
        if key in seen:
            left[f"{agent}: calls seen already"] += 1
            continue
        seen.add(key)
        test = folder.rpartition("/")[2]
        last = calls[-1]
        runs.append({"id": f"{CORPUS}/{agent_of(folder)}/{test}/{commit[:10]}",
                     "source": f"{SOURCE}@{commit[:7]}", "path": folder,
                     "agent": f"OpenDevin {agent} (a fresh prompt per step)", "model": None,
                     "task_id": test, "date": date, "tools": [],
                     "messages": [*last["messages"], last["reply"]], "calls": calls})
    runs.sort(key=lambda r: r["path"])  # stable: versions stay oldest first
    return runs, left


def system_of(run: Mapping[str, Any]) -> str | None:
    first = run["messages"][0]
    return str(first["content"]) if first["role"] == "system" else None


def queue_sessions(runs: Sequence[dict[str, Any]], queue_calls: int) -> list[dict[str, Any]]:
    """Per agent and system prompt (none for one-message prompts), its runs one after
    another (module docstring), per call."""
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["agent"], system_of(r)), []).append(r)
    by_name = {f"{agent.split()[1]}/s{i:02d}": group
               for i, ((agent, _), group) in enumerate(groups.items())}
    out = []
    for name, q, group in queue_slices(by_name, lambda r: len(r["calls"]),
                                       lambda total: round(total / queue_calls)):
        head = group[0]["messages"][:1] if system_of(group[0]) is not None else []
        before, per_call = list(head), []
        for r in group:
            per_call += [{**c, "messages": before + c["messages"][len(head):]}
                         for c in r["calls"]]
            before += r["messages"][len(head):]
        out.append({**group[0], "id": f"{CORPUS}-queue/{name}/q{q:02d}", "path": None,
                    "task_id": [r["task_id"] for r in group], "messages": before,
                    "calls": per_call})
    return out


README = """# OpenDevin's fresh-prompt agents from its integration tests' mock LLM logs: {shape},
per call

Converted by `bench/opendevin.py` (ctxgate) from every version of `{mock}/**/prompt_NNN.log`
and `response_NNN.log` of {agents_list} in the history of `{commit}` of {source}. Licence of
the source: MIT (its `LICENSE`). Used for measurement only; not part of the ctxgate
repository; do not commit it there.

{stats}; calls per run min / median / max {per_run}.

- One recorded run per (test folder, version of its logs); read and left out, per agent:
  {left}. Kept per agent: {kept}. Test versions from {first} to {last}.
- Each session carries `calls`: every prompt's messages exactly as the agent sent them (one
  message: a user message; more: the system prompt, then user messages) and the response
  recorded for it; `messages` is the last call's and its response. The agents write a
  fresh prompt every step (their monologue, plan, history or memory rendered into it), so
  the calls of a run are not prefixes of one another. `model` is `null` (the logs do not
  name it). **No `tools`**: actions are JSON objects or text commands in the replies.
{join}"""

JOIN_RUNS = "- One session per run, test folders in path order, versions oldest first.\n"
JOIN_QUEUE = """- Queues: per agent and system prompt (none for one-message prompts), its runs in
  that order, cut at the run boundaries nearest each 1/N of its calls, N = calls /
  {queue_calls} rounded (at least 1). A session's `messages` is the system prompt once (if
  any), then each run's last prompt and response, nothing added; its calls are each run's
  calls with the earlier runs' turns before the call's own messages.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 50
            ) -> dict[str, int]:
    reader = RepoReader(repo, "README.md")
    if not reader.git:
        raise ValueError(f"{repo}: a git directory is needed (every version of the logs)")
    runs, left = load(reader, rev)
    if not runs:
        raise ValueError(f"{repo}@{rev}: no fresh-prompt run of {MIN_CALLS} calls or more")
    sizes = sorted(len(r["calls"]) for r in runs)
    fields = {
        "mock": MOCK, "source": SOURCE, "commit": reader._git("rev-parse", rev).strip(),
        "agents_list": ", ".join(FRESH),
        "per_run": f"{sizes[0]} / {sizes[len(sizes) // 2]} / {sizes[-1]}",
        "left": "; ".join(f"{k} {v:,}" for k, v in sorted(left.items())),
        "kept": ", ".join(f"`{a.split()[1]}` {n}" for a, n in
                          sorted(Counter(r["agent"] for r in runs).items())),
        "first": min(r["date"] for r in runs), "last": max(r["date"] for r in runs),
    }
    sessions = [{k: v for k, v in r.items() if k != "date"} for r in runs]
    queues = [{k: v for k, v in q.items() if k != "date"}
              for q in queue_sessions(runs, queue_calls)]
    return write_runs_and_queues(out, CORPUS, sessions, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen61/out", REV, 50, convert)


if __name__ == "__main__":
    raise SystemExit(main())
