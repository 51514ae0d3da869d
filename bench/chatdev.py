"""ChatDev's recorded software-company runs (role-playing agents in a chat chain) as corpus
folders `bench/replay.py` reads.

ChatDev (Qian et al., "ChatDev: Communicative Agents for Software Development", arXiv
2307.07924; `OpenBMB/ChatDev`, Apache-2.0) is a **multi-agent framework**: a virtual
software company whose role-playing agents (CEO, CPO, CTO, Programmer, Code Reviewer,
Software Test Engineer, ...) build a program from a one-line request by a chain of phases
(demand analysis, language choice, coding, code completion, review comments and
modifications, test error summaries and modifications, environment doc, manual). Each phase
is a chat between two agents: the instructing agent opens it with the phase prompt (the
task, the decisions so far, and from coding on **every source file as it now stands**, the
test reports, a human's comment), and the two agents answer each other in turn, each call
carrying the phase's chat so far. The harness writes the files, runs the program and puts
what it printed into the next phase's prompt: the code and the test output are the
observations this agent works from.

The runs are the `WareHouse/<project>/*.log` files on the `chatdev1.0` branch of the
repository (the logs of the 1.0 line, removed from `main` by the 2.0 rewrite). A log
records, per phase chat, the opening prompt as sent (`Name: **[Start Chat]**`: the receiving
agent's system prompt in brackets, then the phase prompt), every model call (`**[OpenAI_Usage_Info
Receive]**`) and every reply (`Name: **A<->B on : Phase, turn N**`, the addressee's system
prompt in brackets, then the reply; the task-improving `Prompt Engineer`'s reply bare).
Here each run is laid out as one chat:

- system message: ChatDev's background prompt (the first line of the agents' system
  prompts in the log, "ChatDev is a software company ...");
- per phase chat in log order: a user turn, the opening as logged (the bracketed system
  prompt of the agent that answers it, then the phase prompt), then each reply in order as
  an assistant turn, the reply's header and its addressee's bracketed prompt left out (two
  agents' replies in a row are two assistant turns, nothing between them: each call saw
  the chat so far);
- left out: what the harness logged for itself (`Seminar Conclusion`, `Update Codes`,
  `Software Info`, `Test Reports`, HTTP lines) — its effect reaches the model through the
  next phase prompt.

Logs whose model calls (`Receive` entries) do not match their logged replies one to one,
or that record no call, are not used; a log whose chat is the same as one already read is
kept once. `model`: from the log's rate-limit warnings (`Rate limit reached for <model>`),
else its `model_type` (`ModelType.X`, looked up in `camel/typing.py` of the same commit),
else `null`. No tools: the agents act in prose and fenced code.

This converter writes, outside the repository,

- `<out>/chatdev/sessions.jsonl`: one session per run, in the order the runs started
  (the log's `**Timestamp**`);
- `<out>/chatdev-queue/sessions.jsonl`: the runs in that order one after another in one
  conversation, cut at the run boundaries nearest each 1/N of the calls, N = calls /
  `--queue-calls` rounded (`bench.chat_corpus.join_queues`);

- `<out>/chatdev-phase/sessions.jsonl`: each phase chat as its own session, as the agents
  sent it (`phase_session`): the answering agent's bracketed system prompt as the system
  message, the phase prompt as the user turn, the replies after it;

each with a `README.md` saying where it came from and how it was converted:

    python -m bench.chatdev --repo /work/.mirror/OpenBMB+ChatDev/repo --out /tmp/gen58
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.chat_corpus import (
    CallIds,
    Message,
    RepoReader,
    converter_main,
    corpus_stats,
    join_queues,
    n_calls,
    write_corpus,
    write_runs_and_queues,
)

SOURCE = "OpenBMB/ChatDev"
REV = "31fd994416a251ecdeb1f0a73c329271743bfb56"  # tip of the `chatdev1.0` branch
WAREHOUSE = "WareHouse"
TYPING = "camel/typing.py"
CORPUS = "chatdev"
AGENT = "software company of role-playing agents, chat chain of phases (ChatDev)"
ENTRY = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (\w+)\] ", re.M)
START = re.compile(r"^([^\n*:]+): \*\*\[Start Chat\]\*\*\s*")
SPEAKER = re.compile(r"^([A-Z][^\n:*]*): (?!\*\*\[)")
HEADER = re.compile(r"^\*\*[^\n]*<->[^\n]* on : (\w+), turn \d+\*\*\s*")
RECEIVE = "**[OpenAI_Usage_Info Receive]**"
TIMESTAMP = re.compile(r"^\*\*Timestamp\*\*: (\d+)", re.M)
RATE_LIMITED = re.compile(r"Rate limit reached for (\S+) in organization")
MODEL_TYPE = re.compile(r"\*\*model_type\*\* \| ModelType\.(\w+) \|")
BACKGROUND = "ChatDev is a software company"


def entries(log: str) -> list[tuple[str, str]]:
    """The log's entries, `(level, text after the time stamp)`, in order."""
    marks = list(ENTRY.finditer(log))
    return [(m.group(1), log[m.end():nxt.start() if nxt else len(log)].strip())
            for m, nxt in zip(marks, [*marks[1:], None], strict=True)]


def reply_text(text: str) -> str:
    """A logged reply without its `**A<->B on : Phase, turn N**` header and the bracketed
    system prompt of the agent it was addressed to (logged with it, not part of it)."""
    headed = HEADER.match(text)
    if not headed:
        return text
    text = text[headed.end():]
    if text.startswith("[" + BACKGROUND):
        end = text.find("]\n\n")
        text = text[end + 3:] if end >= 0 else ""
    return text.strip()


def parse(log: str) -> dict[str, Any]:
    """A run: its chats (`opening`, `phase`, `replies`), the model calls the log recorded,
    the replies logged outside any chat (`stray`), the model it names (or `None`), and
    its start time stamp."""
    chats: list[dict[str, Any]] = []
    calls = stray = 0
    phase = None
    for level, text in entries(log):
        if level != "INFO":
            continue
        if text.startswith(RECEIVE):
            calls += 1
        elif text.startswith("System: ") and "**phase_name** | " in text:
            phase = text.split("**phase_name** | ", 1)[1].split(" ", 1)[0]
        elif opened := START.match(text):
            chats.append({"opening": text[opened.end():], "phase": phase, "replies": []})
        elif (spoken := SPEAKER.match(text)) and not text.startswith("System: "):
            if not chats:
                stray += 1
                continue
            chats[-1]["replies"].append(reply_text(text[spoken.end():]))
    stamp = TIMESTAMP.search(log)
    named = RATE_LIMITED.search(log)
    typed = MODEL_TYPE.search(log)
    return {"chats": chats, "calls": calls, "stray": stray,
            "stamp": stamp.group(1) if stamp else "", "model": named.group(1) if named else None,
            "model_type": typed.group(1) if typed else None}


def background(run: Mapping[str, Any]) -> str:
    """ChatDev's background prompt as the run's agents were given it: the first line of
    the first opening that starts with it (bracketed, or bare in older logs)."""
    for chat in run["chats"]:
        opening: str = chat["opening"].removeprefix("[")
        if opening.startswith(BACKGROUND):
            return opening.split("\n", 1)[0]
    raise ValueError("no agent system prompt with ChatDev's background prompt")


def messages_of(run: Mapping[str, Any], _ids: CallIds | None = None) -> list[Message]:
    """A run as chat after the system prompt (module docstring): per phase chat its
    opening as a user turn, then its replies as assistant turns."""
    out: list[Message] = []
    for chat in run["chats"]:
        out.append({"role": "user", "content": chat["opening"]})
        out += [{"role": "assistant", "content": r} for r in chat["replies"]]
    return out


def phase_messages(run: Mapping[str, Any], chat: Mapping[str, Any]) -> list[Message]:
    """One phase chat as the agents sent it: the answering agent's system prompt (the
    opening's bracketed head; ChatDev's background prompt where an older log printed the
    opening without brackets), the phase prompt, then the replies (the second agent's
    reply was sent under its own system prompt; here under the first's)."""
    opening: str = chat["opening"]
    head, sep, prompt = opening[1:].partition("]\n\n")
    if not (opening.startswith("[") and sep):
        head, prompt = background(run), opening
    return [{"role": "system", "content": head}, {"role": "user", "content": prompt},
            *({"role": "assistant", "content": r} for r in chat["replies"])]


def model_names(typing_py: str) -> dict[str, str]:
    """`ModelType` member name -> model name, from `camel/typing.py` read as text."""
    body = typing_py.split("class ModelType", 1)[-1]
    return dict(re.findall(r'^    (\w+) = "([^"]+)"', body, re.M))


def log_paths(reader: RepoReader, rev: str) -> list[str]:
    if reader.git:
        names = reader._git("ls-tree", "-r", "-z", "--name-only", rev, "--",
                            WAREHOUSE).split("\0")
    else:
        names = [str(p.relative_to(reader.root)) for p in (reader.root / WAREHOUSE).rglob("*")]
    return sorted(n for n in names if n.endswith(".log"))


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The runs used, in start order, and why the other logs were not used."""
    models = model_names(reader.read(TYPING, rev)) if reader.has(TYPING, rev) else {}
    runs, left, seen = [], Counter[str](), set()
    for path in log_paths(reader, rev):
        run = parse(reader.read(path, rev))
        replies = sum(len(c["replies"]) for c in run["chats"])
        if run["calls"] == 0:
            left["no model call recorded"] += 1
            continue
        if replies != run["calls"] or run["stray"]:
            left["calls and replies do not match"] += 1
            continue
        key = repr(run["chats"])
        if key in seen:
            left["the same chat as another log"] += 1
            continue
        seen.add(key)
        run["path"] = path
        run["model"] = run["model"] or models.get(run["model_type"] or "")
        runs.append(run)
    runs.sort(key=lambda r: (r["stamp"], r["path"]))
    return runs, left


README = """# ChatDev, a software company of role-playing agents (chat chain): {shape}

Converted by `bench/chatdev.py` (ctxgate) from `{warehouse}/<project>/*.log` of {source} at
commit `{commit}` (tip of its `chatdev1.0` branch). Licence of the source: Apache License
2.0 (its `LICENSE`). Used for measurement only; not part of the ctxgate repository; do not
commit it there.

{stats}.

- Runs: {runs} of {logs} logs (not used: {left}). Models: {models}. Phase chats: {chats};
  replies by phase: {phases}.
- System message: ChatDev's background prompt as logged ({system:,} characters). Per phase
  chat: its opening as logged (the answering agent's system prompt in brackets, then the
  phase prompt: task, decisions, every source file, test reports), as a user turn; each
  reply as an assistant turn (header and addressee's bracketed prompt left out); two
  replies in a row are two assistant turns. Each phase chat started afresh (the agents
  kept no memory across phases); here a run is one growing chat. No tools.
{join}"""

JOIN_RUNS = "- One session per run, runs in start order.\n"
JOIN_QUEUE = """- Queues: the runs in that order, cut at the run boundaries nearest each 1/N of
  the calls, N = calls / {queue_calls} rounded. A session is the system prompt once, then
  each run's messages after it in order, nothing added.
"""

JOIN_PHASES = """- **Phase sessions**: each phase chat with a reply as its own session, as the
  agents sent it: the answering agent's system prompt (the opening's bracketed head), the
  phase prompt as the user turn, the replies after it. The runs' and queues' layout above
  does not apply to this folder.
"""

def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 300
            ) -> dict[str, int]:
    reader = RepoReader(repo, WAREHOUSE)
    commit = reader._git("rev-parse", rev).strip() if reader.git else rev
    runs, left = load(reader, rev)
    if not runs:
        raise ValueError(f"{WAREHOUSE}: no usable log")

    def session(sid: str, run: Mapping[str, Any] | None, messages: list[Message]
                ) -> dict[str, Any]:
        return {"id": sid, "source": f"{SOURCE}@{commit[:7]}",
                "path": run["path"] if run else WAREHOUSE, "agent": AGENT,
                "model": run["model"] if run else None,
                "task_id": Path(run["path"]).parent.name if run else None, "tools": [],
                "messages": messages}

    per_run = [session(f"{CORPUS}/{Path(r['path']).parent.name}", r,
                       [{"role": "system", "content": background(r)}, *messages_of(r)])
               for r in runs]
    joined, _ = join_queues(
        {0: runs}, calls=lambda r: n_calls([{"role": "system"}, *messages_of(r)]),
        parts=lambda total: round(total / queue_calls), system=background,
        messages=messages_of, name=lambda _t, q, g: f"{CORPUS}-queue/q{q}")
    queues = [session(sid, None, messages) for sid, messages in joined]
    phases: Counter[str] = Counter()
    for r in runs:
        for c in r["chats"]:
            phases[c["phase"] or "(task improvement)"] += len(c["replies"])
    fields = {
        "warehouse": WAREHOUSE, "source": SOURCE, "commit": commit, "runs": len(runs),
        "logs": len(runs) + sum(left.values()),
        "left": ", ".join(f"{why} {n}" for why, n in left.most_common()) or "none",
        "models": ", ".join(f"`{m}` {n}" for m, n in
                            Counter(str(r["model"]) for r in runs).most_common()),
        "chats": sum(len(r["chats"]) for r in runs), "system": len(background(runs[0])),
        "phases": ", ".join(f"`{p}` {n}" for p, n in phases.most_common()),
    }
    written = write_runs_and_queues(out, CORPUS, per_run, queues, README,
                                    (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                    **fields)
    phase_sessions = [session(f"{CORPUS}-phase/{Path(r['path']).parent.name}/{k:03d}", r,
                      phase_messages(r, c))
              for r in runs for k, c in enumerate(r["chats"]) if c["replies"]]
    written[f"{CORPUS}-phase"] = write_corpus(
        out / f"{CORPUS}-phase", phase_sessions,
        README.format(shape="one session per phase chat, as sent",
                      stats=corpus_stats(phase_sessions),
                      join=JOIN_PHASES, **fields))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen58", REV, 300, convert)


if __name__ == "__main__":
    raise SystemExit(main())
