"""Aider's own log of every request it sent (`.aider.llm.history`) as a corpus folder
`bench/replay.py` reads, each call as aider sent it.

Aider (`Aider-AI/aider`) is an **interactive pair-programming agent in the terminal**: a user
types requests, aider sends the model its system prompt (per chat mode: "ask" answers
questions, "code" edits with SEARCH/REPLACE blocks, "architect" proposes changes that a
second, "editor" model call turns into edits), then the chat so far, a map of the repository
(a user turn and an assistant acknowledgement), the full text of the files added to the chat
(again a user turn and an acknowledgement, **re-read from disk every call**, so an edited
file arrives with its new text) and the user's new request. With `--llm-history-file`, aider
appends every request and reply to a text log: `TO LLM <time>`, then each message as lines
prefixed by its role (`SYSTEM`, `USER`, `ASSISTANT`) with `-------` between messages, then
`LLM RESPONSE <time>` and the reply's lines prefixed `ASSISTANT`.

The source is the one such log found committed under a licence: `jkassemi/friendly_names`
(MIT), a small Python package built with aider on 2025-01-31 (33 requests; the log is
appended, its newest version holds every request). Here

- a *call* is a `TO LLM` block with the `LLM RESPONSE` that follows it (a block without one
  is left out); each message's text is its lines without the role prefix, joined by newlines;
- calls are chained into *runs*: a call follows the latest earlier call whose reply is among
  its assistant turns and that no other call follows yet. The system prompt is not compared:
  aider keeps the chat when the user switches mode (ask, then code: another system prompt),
  and it **rewrites its own system prompt within a chat** (its examples' code fences become
  four backticks once a file in the chat holds three). The architect's editor calls are fresh
  two-turn chats (the architect's reply as the user turn), each a run of one; runs of at
  least `MIN_CALLS` calls are kept;
- a run is written as a **per-call session** (`calls`: each call's message list exactly as
  logged and its reply; `messages`: the last call's list and its reply): the files' text is
  re-sent each call, so a run's calls are not prefixes of one chat.

No `-queue` folder: the log is one user's morning and afternoon, four runs of 2 to 13
calls; a queue of one agent's runs would be little more than its longest run.

    python -m bench.aider --repo /work/.mirror/jkassemi+friendly_names/repo --out /tmp/gen62/out
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.chat_corpus import RepoReader, corpus_stats, run_conversion, write_corpus

SOURCE = "jkassemi/friendly_names"
REV = "33ef87a9021de5c22b97abc6f7346ac4da45b3a9"
PATH = ".aider.llm.history"
CORPUS = "aider"
AGENT = "aider (terminal pair programmer: ask, code and architect chat modes)"
MIN_CALLS = 2
ROLES = {"SYSTEM": "system", "USER": "user", "ASSISTANT": "assistant"}
HEAD = re.compile(r"^(TO LLM|LLM RESPONSE) (\S+)\n", re.M)
SEPARATOR = "-------\n"


def lines_text(block: str, counts: Counter[str]) -> list[tuple[str, str]]:
    """A block's messages: `(role, text)` per run of lines with one role prefix, messages cut
    at the separator lines; a line with no known prefix is counted and kept in the text."""
    out: list[tuple[str, str]] = []
    for part in block.split(SEPARATOR):
        role, lines = None, []
        for line in part.split("\n"):
            if not line:
                continue
            prefix, _, rest = line.partition(" ")
            if prefix not in ROLES:
                counts["lines without a role prefix"] += 1
                lines.append(line)
                continue
            if role is not None and prefix != role:
                out.append((ROLES[role], "\n".join(lines)))
                lines = []
            role = prefix
            lines.append(rest)
        if role is not None:
            out.append((ROLES[role], "\n".join(lines)))
    return out


def parse(text: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The log's calls in order, each `{messages, reply, sent}`, and what was left out."""
    counts: Counter[str] = Counter()
    parts = HEAD.split(text)
    calls: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None
    for kind, when, block in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if kind == "TO LLM":
            if pending is not None:
                counts["requests without a logged reply"] += 1
            msgs = lines_text(block, counts)
            pending = {"messages": [{"role": r, "content": t} for r, t in msgs], "sent": when}
            continue
        if pending is None:
            counts["replies without a logged request"] += 1
            continue
        reply = lines_text(block, counts)
        if [r for r, _ in reply] != ["assistant"] or not pending["messages"]:
            counts["calls of another shape"] += 1
        else:
            calls.append({**pending, "reply": {"role": "assistant", "content": reply[0][1]}})
        pending = None
    if pending is not None:
        counts["requests without a logged reply"] += 1
    return calls, counts


def said(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in messages if m["role"] == "assistant"]


def chain(calls: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Runs as lists of call indexes (module docstring), in the order their first call was
    logged; each call in one run. Not `bench.autogpt.chain`: aider sends the chat so far
    before the repository map and the files' acknowledgements, so a call's assistant turns
    are not the previous call's followed by its reply."""
    follows: dict[int, int] = {}
    for j, c in enumerate(calls):
        turns = said(c["messages"])
        for i in range(j - 1, -1, -1):
            a = calls[i]
            if i not in follows.values() and a["reply"]["content"] in turns:
                follows[j] = i
                break
    runs: dict[int, list[int]] = {}
    start: dict[int, int] = {}
    for j in range(len(calls)):
        first = start[follows[j]] if j in follows else j
        start[j] = first
        runs.setdefault(first, []).append(j)
    return list(runs.values())


README = """# Aider, a terminal pair programmer (one user's log of every request): per run, per call

Converted by `bench/aider.py` (ctxgate) from `{path}` in {source} at commit `{commit}`.
Licence of the source: MIT (its `LICENSE.txt`, "Copyright (c) 2025-present James Kassemi").
Used for measurement only; not part of the ctxgate repository; do not commit it there.

{stats}.

- Read: {calls} calls{left}; runs: {runs_all} ({runs} of {min_calls}+ calls used, {single}
  runs of fewer not used: {single_calls} calls, the architect's editor calls among them).
  System prompts of the runs used: {modes}. The log does not name the model.
- Each session carries `calls`: every call's message list exactly as aider logged it
  (system prompt; the chat so far; the repository map and the files added to the chat, each
  a user turn with an assistant acknowledgement, the files' text re-read each call; the
  user's request) and the reply logged for it. `messages` is the last call's list and its
  reply. {rebuilt} of the runs' {used} calls are not a prefix of their run's last list.
  No tools (edits are SEARCH/REPLACE blocks in the replies).
- One session per run, in the order their first call was logged.
"""


def run_session(sid: str, run: Sequence[int], calls: Sequence[Mapping[str, Any]],
                commit: str) -> dict[str, Any]:
    """A run as a per-call session (module docstring)."""
    last = calls[run[-1]]
    return {"id": sid, "source": f"{SOURCE}@{commit[:7]}", "path": PATH, "agent": AGENT,
            "model": None, "task_id": calls[run[0]]["sent"], "tools": [],
            "messages": [*last["messages"], last["reply"]],
            "calls": [{"messages": calls[i]["messages"], "reply": calls[i]["reply"]}
                      for i in run]}


def mode(prompt: str) -> str:
    """A system prompt's first sentence, to name the runs' modes in the README."""
    return prompt.split(".")[0]


def convert(repo: Path, out: Path, *, rev: str = REV) -> dict[str, int]:
    reader = RepoReader(repo, PATH)
    commit = reader._git("rev-parse", rev).strip() if reader.git else rev
    calls, left = parse(reader.read(PATH, rev))
    runs = chain(calls)
    kept = [r for r in runs if len(r) >= MIN_CALLS]
    if not kept:
        raise ValueError(f"{repo}@{rev}: no run of {MIN_CALLS} calls or more")
    sessions = [run_session(f"{CORPUS}/r{n:03d}", r, calls, commit) for n, r in enumerate(kept)]
    rebuilt = sum(c["messages"] != s["messages"][:len(c["messages"])]
                  for s in sessions for c in s["calls"])
    modes = Counter(mode(str(calls[r[0]]["messages"][0]["content"])) for r in kept)
    readme = README.format(
        path=PATH, source=SOURCE, commit=commit, stats=corpus_stats(sessions),
        calls=len(calls), left="".join(f", {why} {n}" for why, n in left.most_common()),
        runs_all=len(runs), runs=len(kept), min_calls=MIN_CALLS,
        single=len(runs) - len(kept), single_calls=sum(len(r) for r in runs if len(r) < MIN_CALLS),
        modes=", ".join(f'"{m}" {n}' for m, n in modes.most_common()), rebuilt=rebuilt,
        used=sum(len(r) for r in kept))
    return {CORPUS: write_corpus(out / CORPUS, sessions, readme)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True,
                        help=f"{SOURCE} git directory (or a checkout of --rev)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gen62/out"))
    parser.add_argument("--rev", default=REV, help="commit holding the log (git only)")
    args = parser.parse_args(argv)
    run_conversion(parser, args.repo, args.out,
                   lambda: convert(args.repo, args.out, rev=args.rev))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
