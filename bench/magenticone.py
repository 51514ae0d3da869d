"""Magentic-One's orchestrator, read back from the team's recorded logs, as a corpus folder
`bench/replay.py` reads: each ledger call of the orchestrator as it sent it.

Magentic-One (Microsoft, on AutoGen) is a **multi-agent team under a planning
orchestrator**: the orchestrator makes a plan, then each round asks its model for a
*progress ledger* (a JSON verdict: request satisfied? in a loop? progress made? who speaks
next, and the instruction for them), sends the instruction to one of its agents (WebSurfer,
a browser agent; FileSurfer; Assistant, a coder; ComputerTerminal) and adds the agent's
answer to its chat. When it stalls it replans: the facts and plan are rewritten and **its
chat is cut back to the user's request and the new plan**. What the orchestrator sends for
a ledger is its system message, its chat (the request as a user turn; the plan and every
instruction as its own assistant turns; every agent's answer as a user turn) and the ledger
question as a last user turn; the ledger reply is not kept in the chat.

The source is the "Hand-Crafted" half of the Who&When failure-attribution data
(`mingyin1/Agents_Failure_Attribution`, MIT): 58 Magentic-One logs on GAIA and AssistantBench
questions, each a `history` of the team's events with the orchestrator's own log labels
(`Orchestrator (thought)` for the plan, `Updated Ledger:` and status lines; `Orchestrator
(-> WebSurfer)` for an instruction; the agent's name for its answer). Here

- a run is one log; its calls are its `Updated Ledger:` events, each with the chat as it
  stood then (rebuilt from the events before it: `Initial plan:` / `New plan:` text as the
  orchestrator's turn, a replan cutting the chat back to the request) and the ledger as
  logged (`json.dumps(..., indent=2)` of the parsed reply) as the reply;
- **not recorded, so written here**: the system message (a short neutral statement naming
  the team) and the ledger question (a short neutral request for the five verdicts, with
  the user's request and the team's descriptions as the plan lists them, the same every
  call as the real one is);
  Magentic-One's own prompts are longer. The planning calls (facts and plan, at the start
  and at each replan) are not calls here: only their combined text is logged. Screenshots
  the WebSurfer attached to its answers are not in the logs (text only);
- status lines (`Next speaker X`, `Request satisfied.`, `Stalled.... Replanning...`,
  termination conditions) are log lines, not chat turns: left out;
- a run is written as a **per-call session** (`calls`: each call's list and its reply;
  `messages`: the last call's list and its reply): the ledger question is the last turn of
  every call and a replan cuts the chat, so a run's calls are not prefixes of one chat.
  Runs of fewer than `MIN_CALLS` ledger calls are left out.

`<corpus>-queue`: the runs in log order one after another (`prompt_queues`: one system
message, cut at run boundaries near every `--queue-calls` calls).

    python -m bench.magenticone --out /tmp/gen64/out \
        --repo /work/.mirror/mingyin1+Agents_Failure_Attribution/repo
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.chat_corpus import (
    Message,
    RepoReader,
    converter_main,
    git_commit,
    per_call_fields,
    prompt_queues,
    write_runs_and_queues,
)

SOURCE = "mingyin1/Agents_Failure_Attribution"
REV = "3d9d568840f004b389638f97adf3e0ab8b5a9514"
FOLDER = "Who&When/Hand-Crafted/"
CORPUS = "magentic-one"
AGENT = ("Magentic-One orchestrator (progress-ledger calls of a planner leading web, file and "
         "code agents)")
MIN_CALLS = 3
ORCHESTRATOR = "Orchestrator"
THOUGHT = f"{ORCHESTRATOR} (thought)"
TO_AGENT = re.compile(rf"^{ORCHESTRATOR} \(-> (.+)\)$")
PLAN = ("Initial plan:\n", "New plan:\n")
LEDGER = "Updated Ledger:\n"
TEAM = ("Assistant", "ComputerTerminal", "FileSurfer", "WebSurfer")
SYSTEM = ("You are the orchestrator of a team of agents ({team}). You plan how the team "
          "answers the user's request, keep track of its progress, and each round choose "
          "which agent acts next and what to ask it.")
QUESTION = ("We are working on this request:\n\n{task}\n\nThe team:\n\n{team}\n\nUpdate the "
            "progress ledger. Answer with a JSON object with the keys is_request_satisfied, "
            "is_in_loop, is_progress_being_made, next_speaker (one of: {names}) and "
            "instruction_or_question, each an object with a \"reason\" and an \"answer\".")
TEAM_TEXT = re.compile(r"assembled the following team:\n\n(.+?)\n\n", re.S)


def said(text: str) -> Message:
    return {"role": "assistant", "content": text}


def heard(text: str) -> Message:
    return {"role": "user", "content": text}


def ledger_calls(history: Sequence[Mapping[str, Any]], counts: Counter[str]
                 ) -> list[dict[str, Any]]:
    """A log's ledger calls in order, each `{messages, reply}` (module docstring); events
    that are neither chat turns nor ledgers are counted by kind."""
    chat: list[Message] = []
    names = ", ".join(TEAM)
    system = {"role": "system", "content": SYSTEM.format(team=names)}
    team, calls = names, []
    for event in history:
        role, text = str(event["role"]), str(event.get("content") or "")
        if role == "human":
            chat.append(heard(text))
        elif role == THOUGHT and text.startswith(PLAN):
            if text.startswith(PLAN[1]):
                chat = chat[:1]  # a replan keeps only the request
            chat.append(said(text.split("\n", 1)[1]))
            if found := TEAM_TEXT.search(text):
                team = found[1].strip()
        elif role == THOUGHT and text.startswith(LEDGER):
            question = QUESTION.format(task=str(chat[0]["content"]).strip(), team=team,
                                       names=names)
            calls.append({"messages": [system, *chat, heard(question)],
                          "reply": said(text[len(LEDGER):])})
        elif TO_AGENT.match(role):
            chat.append(said(text))
        elif role.startswith(ORCHESTRATOR):
            counts["status lines (not chat turns) left out"] += 1
        else:
            chat.append(heard(text))
    return calls


def order(path: str) -> tuple[int, str]:
    """Logs in the order of their number (`12.json` after `2.json`)."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".json")
    return (int(stem), "") if stem.isdigit() else (1 << 30, stem)


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Every log of the folder as a run `{path, task_id, calls}`, and what was left out."""
    paths = sorted((p for p in reader._git("ls-tree", "-r", "--name-only", rev, FOLDER)
                    .splitlines() if p.endswith(".json")), key=order)
    runs, counts = [], Counter[str]()
    for path in paths:
        log = orjson.loads(reader.read(path, rev))
        history = log["history"]
        if not history or history[0].get("role") != "human":
            counts["logs not opening with the request"] += 1
            continue
        calls = ledger_calls(history, counts)
        counts["ledger calls read"] += len(calls)
        if len(calls) < MIN_CALLS:
            counts[f"runs of fewer than {MIN_CALLS} ledger calls"] += 1
            continue
        runs.append({"path": path, "task_id": log.get("question_ID"), "calls": calls})
    return runs, counts


def run_session(run: Mapping[str, Any], commit: str) -> dict[str, Any]:
    """A run as a per-call session (module docstring)."""
    last = run["calls"][-1]
    return {"id": f"{CORPUS}/{order(run['path'])[0]:03d}", "source": f"{SOURCE}@{commit[:7]}",
            "path": run["path"], "agent": AGENT, "model": None, "task_id": run["task_id"],
            "tools": [], "messages": [*last["messages"], last["reply"]],
            "calls": [dict(c) for c in run["calls"]]}


README = """# Magentic-One's orchestrator (progress-ledger calls, read back from the team's
logs): {shape}, per call

Converted by `bench/magenticone.py` (ctxgate) from `{folder}*.json` in {source} at commit
`{commit}`. Licence of the source: MIT (its `LICENSE` at that commit, "Copyright (c) 2025
Ming Yin"). Used for measurement only; not part of the ctxgate repository; do not commit it
there.

{stats}; calls per run (a run's `calls`) min / median / max {per_call}.

- Read: {logs} logs; {left}. Runs used: {runs}. The model is not recorded (`model` null;
  the source's README evaluates with GPT-4o).
- Each session carries `calls`: per ledger call the orchestrator's chat as it stood (the
  request; the plan and each instruction as assistant turns; each agent's answer as a user
  turn; cut back to the request and the new plan at a replan) between a short neutral
  system message and a short neutral ledger question with the request and the team as the
  plan lists it (both written by the converter: the logs do not hold the prompts), and the
  ledger logged as the reply. `messages` is the last
  call's list and its reply. No tools. Screenshots are not in the logs.
{join}"""

JOIN_RUNS = "- One session per log, in the order of the log's number.\n"
JOIN_QUEUE = """- Queues: the runs in log order, cut at the run boundaries nearest each 1/N of
  their calls, N = calls / {queue_calls} rounded (at least 1). A session's `messages` is the
  system message once, then each run's last list after it and its reply, nothing added; its
  calls are each run's calls with the earlier runs' turns before the call's own list.
"""


def queue_sessions(runs: Sequence[dict[str, Any]], queue_calls: int) -> list[dict[str, Any]]:
    """The runs one after another (module docstring), per call."""
    return prompt_queues(runs, queue_calls, corpus=CORPUS, size=lambda r: len(r["calls"]),
                         key=lambda _prompt, i: f"team{i:02d}")


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 50
            ) -> dict[str, int]:
    reader, commit = git_commit(repo, rev)
    runs, left = load(reader, rev)
    if not runs:
        raise ValueError(f"{repo}@{rev}: no run of {MIN_CALLS} ledger calls or more")
    sessions = [run_session(r, commit) for r in runs]
    logs = left[f"runs of fewer than {MIN_CALLS} ledger calls"] + len(runs) + left[
        "logs not opening with the request"]
    return write_runs_and_queues(
        out, CORPUS, sessions, queue_sessions(sessions, queue_calls), README,
        (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)), folder=FOLDER,
        source=SOURCE, commit=commit, logs=logs, runs=len(runs),
        **per_call_fields(runs, left))


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen64/out", REV, 50, convert)


if __name__ == "__main__":
    raise SystemExit(main())
