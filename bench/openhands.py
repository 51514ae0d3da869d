"""OpenHands' recorded agent prompts (the mock LLM logs of its integration tests) as corpus
folders `bench/replay.py` reads.

OpenHands (formerly OpenDevin, `All-Hands-AI/OpenHands`, MIT) ran its integration tests
against a mock LLM that answers from recorded logs: per agent and test,
`tests/integration/mock/[<runtime>/]<Agent>/<test>/prompt_NNN.log` is **the N-th prompt the
agent sent**, its messages' contents flattened (each preceded by the separator
`\\n\\n----------\\n\\n`, roles not written), and `response_NNN.log` the model's recorded
answer. The logs were re-recorded as the agents changed (each version another recorded run
of the test, by a real model: the logs do not name it). The chat agents (CodeActAgent,
CodeActSWEAgent) send a system prompt, the in-context example and the task as user turns
("NOW, LET'S START! ..."), then per step the model's reply (assistant: text with
`<execute_bash>`, `<execute_ipython>`, `<execute_browse>` blocks or `<finish>`) and the
observation (user: `OBSERVATION: ...`); the newest observation carries "ENVIRONMENT
REMINDER: You have N turns left ...", which the agent **removes again on the next call** (the
reminder is only ever on the last turn). The other agents (PlannerAgent, MonologueAgent,
BrowsingAgent, DelegatorAgent, ManagerAgent, SWEAgent) write one fresh prompt per step:
not a growing chat, not kept.

The source is every version of the mock folders in the history of `REV` (`git log REV --
tests/integration/mock`; `--rev --all`: every ref of the mirror), read from a mirror/bare git
directory (`--repo`). Per commit, each test folder's set of logs is one recorded run (a set
seen at an earlier commit is not read again). A run is kept when its prompts are
`prompt_001 ... prompt_N` with `response_001 ... response_N`, N >= `MIN_CALLS`, and each
prompt is the previous one plus two messages (the reply, the next observation), the previous
prompt's last message allowed to lose an appended "ENVIRONMENT REMINDER" paragraph and the
line end its log file closed with (nothing else). The chat is the last prompt (the first
message the system prompt, the rest of the first prompt user turns, then assistant and user
in turn) and `response_N` as the last assistant turn. So every replayed call is the
recorded prompt as sent, except that the reminder on its last turn (calls 1 .. N-1) is
absent. Identical chats (a folder copied to another runtime, or re-recorded unchanged) are
kept once.

This converter writes, outside the repository,

- `<out>/openhands/sessions.jsonl`: each kept run as its own session, in folder path order,
  versions oldest first;
- `<out>/openhands-queue/sessions.jsonl`: per agent and system prompt, its runs in the same
  order, one after another in one conversation (the system prompt once), cut at the run
  boundaries nearest each 1/N of the group's calls, N = calls / `--queue-calls` rounded
  (`bench.chat_corpus.join_queues`);

each with a `README.md` saying where it came from and how it was converted. With
`--reminders`, the folders are `openhands-reminders` and `openhands-reminders-queue`, the same
runs and ids with each turn keeping the reminder it was sent with while it was the newest: then
every replayed call's last turn is the recorded one (the count of turns left, which the engine
reads, on every call), and its older turns carry reminders the agent had removed. The one
chat the corpora hold cannot carry both (the agent rewrote its previous last turn each call).
With `--per-call`, the folders are `openhands-percall` and `openhands-percall-queue`: the
same runs, ids and `messages` as the default folders, each session also carrying `calls`
(`bench/corpora.py`): per call, the recorded prompt's messages exactly as sent (the reminder
on its newest turn, gone from that turn on the next call) and the recorded response; in a
queue, a run's calls follow the earlier runs' chats as `messages` holds them. The replay
replays those lists call by call (`--prefix-replay`: the prefixes of `messages`, as
`openhands`):

    python -m bench.openhands --repo /work/.mirror/All-Hands-AI+OpenHands/repo --out /tmp/gen55
    python -m bench.openhands --repo /work/.mirror/All-Hands-AI+OpenHands/repo --out /tmp/gen55 \
        --reminders
    python -m bench.openhands --repo /work/.mirror/All-Hands-AI+OpenHands/repo --out /tmp/gen55 \
        --per-call
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.chat_corpus import (
    Message,
    RepoReader,
    join_queues,
    n_calls,
    queue_slices,
    run_conversion,
    write_runs_and_queues,
)
from bench.crewai import read_blobs

SOURCE = "All-Hands-AI/OpenHands"
REV = "156d0686c46aafb0fa9d291da6421fb6f64dddc0"
CORPUS = "openhands"
MOCK = "tests/integration/mock"
MIN_CALLS = 3
SEPARATOR = "\n\n----------\n\n"
REMINDER = re.compile(r"(\s*ENVIRONMENT REMINDER: You have \d+ turns? left[^\n]*)?\n?")
LOG = re.compile(r"(prompt|response)_(\d{3})\.log")
NOT_ONE_CHAT = "runs whose prompts are not one growing chat"


def messages_of(text: str) -> list[str] | None:
    """A prompt log's message contents (line ends `\\r\\n` read as `\\n`), `None` if it is
    not laid out as separator-led messages."""
    text = text.replace("\r\n", "\n")
    if not text.startswith(SEPARATOR):
        return None
    return text[len(SEPARATOR):].split(SEPARATOR)


def chat_of(prompts: Sequence[str], response: str, *, reminders: bool = False
            ) -> list[Message] | None:
    """The run as one chat (module docstring), `None` if its prompts are not one growing
    chat: each the previous plus a reply and an observation, the previous last message
    differing at most by a trailing environment reminder and the line end the log file
    ended with. With `reminders`, each turn keeps the reminder it was sent with when it was
    the newest (the later prompts had removed it)."""
    blocks = [messages_of(p) for p in prompts]
    first = blocks[0]
    if first is None or len(first) < 2 or not response.strip():
        return None
    added: dict[int, str] = {}
    for before, after in itertools.pairwise(blocks):
        if before is None or after is None or len(after) != len(before) + 2:
            return None
        n = len(before) - 1
        if after[:n] != before[:n]:
            return None
        kept, sent = after[n], before[n]
        cut = REMINDER.fullmatch(sent[len(kept):]) if sent.startswith(kept) else None
        if sent != kept and cut is None:
            return None
        if reminders and cut is not None and cut[1]:
            added[n] = cut[1]
    last = blocks[-1]
    assert last is not None
    last = [c + added.get(n, "") for n, c in enumerate(last)]
    chat = roles_of(last, len(first))
    chat.append({"role": "assistant", "content": response.replace("\r\n", "\n")})
    return chat


def roles_of(blocks: Sequence[str], first: int) -> list[Message]:
    """A prompt's message contents as chat messages: the system prompt, the first prompt's
    other `first - 1` messages as user turns, then assistant and user in turn."""
    out: list[Message] = [{"role": "system", "content": blocks[0]}]
    out += [{"role": "user", "content": c} for c in blocks[1:first]]
    for k, content in enumerate(blocks[first:]):
        out.append({"role": "user" if k % 2 else "assistant", "content": content})
    return out


def calls_of(prompts: Sequence[str], responses: Sequence[str]) -> list[dict[str, Any]]:
    """Per call of a run `chat_of` accepts: the prompt's messages as sent and the response
    (`{"messages", "reply"}`, `bench/corpora.py`'s per-call shape)."""
    blocks = [messages_of(p) for p in prompts]
    first = blocks[0]
    assert first is not None
    out = []
    for block, response in zip(blocks, responses, strict=True):
        assert block is not None
        out.append({"messages": roles_of(block, len(first)),
                    "reply": {"role": "assistant", "content": response.replace("\r\n", "\n")}})
    return out


def folder_versions(reader: RepoReader, rev: str
                    ) -> list[tuple[str, str, str, dict[str, str]]]:
    """`(folder, commit, date, {log name: blob})` of every version of every mock test
    folder in the history of `rev` (oldest commit first), each set of blobs once."""
    revs = ["--all"] if rev == "--all" else [rev]
    log = reader._git("log", "--format=%H %cs", *revs, "--", MOCK).split()
    commits = list(zip(log[::2], log[1::2], strict=True))[::-1]
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    out = []
    for commit, date in commits:
        folders: dict[str, dict[str, str]] = {}
        for line in reader._git("ls-tree", "-r", commit, "--", MOCK).splitlines():
            meta, _, path = line.partition("\t")
            folder, _, name = path.rpartition("/")
            folders.setdefault(folder, {})[name] = meta.split()[2]
        for folder, files in sorted(folders.items()):
            key = (folder, tuple(sorted(files.items())))
            if key not in seen:
                seen.add(key)
                out.append((folder, commit, date, files))
    return out


def log_texts(reader: RepoReader, versions: Sequence[tuple[str, str, str, dict[str, str]]]
              ) -> dict[str, str]:
    """The text of every log blob of `versions` (`folder_versions`), read in one pass; a
    blob the snapshot lacks reads as empty."""
    wanted = sorted({blob for *_, files in versions for blob in files.values()})
    return {blob: (data or b"").decode("utf-8", "replace")
            for blob, data in zip(wanted, read_blobs(reader.root, wanted), strict=True)}


def numbered_logs(files: Mapping[str, str], texts: Mapping[str, str]
                  ) -> tuple[list[str], list[str]] | None:
    """A test folder's prompt and response logs in call order (`{log name: blob}` and the
    blobs' texts), `None` unless they are `prompt_001 .. prompt_N` with `response_001 ..
    response_N`, N >= 1."""
    logs: dict[str, dict[int, str]] = {"prompt": {}, "response": {}}
    for name, blob in files.items():
        if m := LOG.fullmatch(name):
            logs[m[1]][int(m[2])] = texts[blob]
    numbers = range(1, len(logs["prompt"]) + 1)
    if not numbers or set(logs["prompt"]) != set(numbers) or set(logs["response"]) != set(numbers):
        return None
    return [logs["prompt"][k] for k in numbers], [logs["response"][k] for k in numbers]


def agent_of(folder: str) -> str:
    """`[<runtime>/]<Agent>` of a mock test folder."""
    return folder[len(MOCK) + 1:].rpartition("/")[0]


def load(reader: RepoReader, rev: str, *, reminders: bool = False, per_call: bool = False
         ) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The kept runs (`chat_of`), in folder path order (versions oldest first), and what was
    counted on the way (per agent, why a run was left out). The ids are the same with and
    without `reminders` (the replay's split follows the id); with `per_call`, each run
    also has its `calls` (`calls_of`)."""
    counts: Counter[str] = Counter()
    versions = folder_versions(reader, rev)
    texts = log_texts(reader, versions)
    runs: list[dict[str, Any]] = []
    seen: set[bytes] = set()
    for folder, commit, date, files in versions:
        agent = agent_of(folder)
        counts["runs"] += 1
        logs = numbered_logs(files, texts)
        if logs is None:
            counts[f"{agent}: prompt/response logs not numbered 1..N"] += 1
            continue
        prompts, responses = logs
        if len(prompts) < MIN_CALLS:
            counts[f"{agent}: fewer than {MIN_CALLS} calls"] += 1
            continue
        chat = chat_of(prompts, responses[-1], reminders=reminders)
        if chat is None:
            counts[f"{agent}: {NOT_ONE_CHAT}"] += 1
            continue
        key = hashlib.blake2b(orjson.dumps(chat), digest_size=16).digest()
        if key in seen:
            counts[f"{agent}: chat seen already"] += 1
            continue
        seen.add(key)
        test = folder.rpartition("/")[2]
        runs.append({"id": f"{CORPUS}/{agent}/{test}/{commit[:10]}", "path": folder,
                     "agent": agent, "commit": commit, "date": date, "messages": chat})
        if per_call:
            runs[-1]["calls"] = calls_of(prompts, responses)
    runs.sort(key=lambda r: r["path"])  # stable: versions stay oldest first
    return runs, counts


def tally(runs: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Assistant turns by the action they carry, and the observations carrying a
    reminder."""
    out: Counter[str] = Counter()
    for r in runs:
        for m in r["messages"]:
            content = m["content"]
            if m["role"] == "assistant":
                out["assistant"] += 1
                out["bash"] += "<execute_bash>" in content
                out["ipython"] += "<execute_ipython>" in content
                out["browse"] += "<execute_browse>" in content
                out["finish"] += "<finish>" in content
            elif m["role"] == "user":
                out["reminder"] += "ENVIRONMENT REMINDER" in content
    return dict(out)


README = """# OpenHands chat agents from its integration tests' mock LLM logs: {shape}

Converted by `bench/openhands.py` (ctxgate) from every version of `{mock}/**/prompt_NNN.log`
and `response_NNN.log` in the history of `{commit}` of {source}. Licence of the source:
MIT (its `LICENSE`). Used for measurement only; not part of the ctxgate repository; do not
commit it there.

{stats}.

- One recorded run per (test folder, version of its logs); kept: {kept} runs of at least
  {min_calls} calls whose prompts are one growing chat (each prompt the previous plus the
  reply and the next observation; the previous last turn may lose its appended
  "ENVIRONMENT REMINDER", which the agent keeps on the newest turn only, and the line end
  its log file closed with). The chat is the
  last prompt (system prompt, then the example and task as user turns, then assistant and
  user in turn) plus `response_N` as the last reply{turns} Left out, per agent: {counts}.
- Kept per agent: {agents}. Test versions from {first} to {last}.
- `model` is `null` (the logs do not name it). **No `tools`, no `tool_calls`, no `tool`
  messages**: actions are text blocks in the assistant turns, observations user turns.
- Assistant turns: {assistant}; with `<execute_bash>` {bash}, `<execute_ipython>`
  {ipython}, `<execute_browse>` {browse}, `<finish>` {finish}. User turns with a reminder
  {reminder}.
- The tasks are the test suite's (fix typos in a file, write a script, use IPython, install
  a module, browse a local page, reject a task): small contexts.
{join}"""

STRIPPED = (": every replayed call is the recorded prompt, except that calls 1 .. N-1 "
            "lack the reminder their last turn carried.")
KEPT = (", each turn with the reminder it carried while it was the newest: every replayed "
        "call's last turn is the recorded one, and its older turns carry the reminders the "
        "agent had removed.")
PER_CALL = (STRIPPED + " **Per call:** each session also has `calls`, per call the recorded "
            "prompt's messages exactly as sent (the reminder on its newest turn, removed again "
            "on the next call) and the recorded response as `reply`; a queue's calls follow the "
            "earlier runs' chats as `messages` holds them. `bench/replay.py` replays those.")
JOIN_RUNS = ("- One session per run, test folders in path order, versions oldest first.\n")
JOIN_QUEUE = """- Queues: per agent and system prompt, its runs in the same order, cut at the run
  boundaries nearest each 1/N of the group's calls, N = calls / {queue_calls} rounded. A
  session is the system prompt once, then each run's messages after it in order, nothing
  added: the next run's example and task follow the previous run's last reply.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 250,
            reminders: bool = False, per_call: bool = False) -> dict[str, int]:
    reader = RepoReader(repo, "README.md")
    if not reader.git:
        raise ValueError(f"{repo}: a git directory is needed (every version of the logs)")
    commit = "every ref" if rev == "--all" else reader._git("rev-parse", rev).strip()
    if reminders and per_call:
        raise ValueError("--reminders and --per-call are two different folders: one at a time")
    corpus = f"{CORPUS}-reminders" if reminders else f"{CORPUS}-percall" if per_call else CORPUS
    runs, counts = load(reader, rev, reminders=reminders, per_call=per_call)
    if not runs:
        raise ValueError(f"{repo}@{rev}: no chat run of {MIN_CALLS} calls or more")

    def session(sid: str, r: Mapping[str, Any], messages: list[Message],
                calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        out = {"id": sid, "source": f"{SOURCE}@{r['commit'][:7]}",
               "path": r["path"] if sid == r["id"] else None,
               "agent": f"OpenHands {r['agent'].rpartition('/')[2]} (text actions)",
               "model": None, "task_id": r["path"].rpartition("/")[2], "tools": [],
               "messages": messages}
        if calls is not None:
            out["calls"] = calls
        return out

    per_run = [session(r["id"], r, r["messages"], r.get("calls")) for r in runs]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["agent"].rpartition("/")[2], r["messages"][0]["content"]),
                          []).append(r)
    by_name = {f"{agent}/s{i:03d}": group
               for i, ((agent, _), group) in enumerate(groups.items())}
    def parts(total: int) -> int:
        return round(total / queue_calls)

    joined, _ = join_queues(
        by_name, calls=lambda r: n_calls(r["messages"]), parts=parts,
        system=lambda r: str(r["messages"][0]["content"]),
        messages=lambda r, _ids: list(r["messages"][1:]),
        name=lambda key, q, _g: f"{CORPUS}-queue/{key}/q{q:02d}",
    )
    slices = queue_slices(by_name, lambda r: n_calls(r["messages"]), parts)
    queues = []
    for (sid, messages), (_, _, group) in zip(joined, slices, strict=True):
        first = by_name[sid.split("/", 1)[1].rpartition("/")[0]][0]
        queue_calls_: list[dict[str, Any]] | None = None
        if per_call:  # each run's calls after the earlier runs' chats, the system prompt once
            queue_calls_, before = [], [messages[0]]
            for r in group:
                queue_calls_ += [{**c, "messages": before + c["messages"][1:]}
                                 for c in r["calls"]]
                before = before + r["messages"][1:]
            assert before == messages  # the last call and its reply are the joined chat
        queues.append(session(sid, first, messages, queue_calls_))
    per_agent: Counter[str] = Counter(r["agent"] for r in runs)
    fields = {
        "mock": MOCK, "source": SOURCE, "commit": commit, "kept": len(runs),
        "min_calls": MIN_CALLS, "turns": KEPT if reminders else PER_CALL if per_call else STRIPPED,
        "counts": "; ".join(f"{k} {v:,}" for k, v in sorted(counts.items()) if k != "runs")
                  + f" (of {counts['runs']:,} runs)",
        "agents": ", ".join(f"`{a}` {n}" for a, n in sorted(per_agent.items())),
        "first": min(r["date"] for r in runs), "last": max(r["date"] for r in runs),
        **{k: tally(runs).get(k, 0) for k in
           ("assistant", "bash", "ipython", "browse", "finish", "reminder")},
    }
    return write_runs_and_queues(out, corpus, per_run, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help=f"{SOURCE} git directory")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gen55"))
    parser.add_argument("--rev", default=REV, help="history read (`--all`: every ref)")
    parser.add_argument("--queue-calls", type=int, default=250)
    parser.add_argument("--reminders", action="store_true",
                        help="keep each turn's reminder (`openhands-reminders` folders)")
    parser.add_argument("--per-call", action="store_true",
                        help="each session with its calls as sent (`openhands-percall` folders)")
    args = parser.parse_args(argv)
    run_conversion(parser, args.repo, args.out, lambda: convert(
        args.repo, args.out, rev=args.rev, queue_calls=args.queue_calls,
        reminders=args.reminders, per_call=args.per_call))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
