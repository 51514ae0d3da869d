"""TapeAgents' recorded GAIA runs (a web-research agent answering GAIA questions) as corpus
folders `bench/replay.py` reads.

TapeAgents (ServiceNow, "TapeAgents: a Holistic Framework for Agent Development and
Optimization", arXiv 2410.08343) runs a **web-research agent** on GAIA level-1 questions:
a system prompt, a user turn listing what it may do (search the web, read a web page or
document, run Python, reason) with the JSON schema of every step it may write, the question
(with the text of an attached file, if any), then, node after node, a user turn saying what
to do now (write a plan, list the facts, execute the plan step by step, ...). The model
answers with one JSON step (`plan_thought`, `search_action`, `read_document_action`,
`python_code_action`, `reasoning_thought`, `gaia_answer_action`, ...); the environment's
answer comes back as a user turn holding a JSON observation (`search_results_observation`,
`page_observation`, `code_execution_result`, ...). No API tools, no `tool` messages.

The source is `tests/examples/res/gaia_agent/tapedata.sqlite.gz` of `ServiceNow/TapeAgents`
(Apache-2.0) at `REV`: the `LLMCalls` table of the test recording, every call's exact
request (`prompt.messages`, no `tools`) and the model's reply (`output.content`). The model
is not recorded (`llm_info` is empty; the repository's `conf/gaia_openai.yaml` names
`gpt4o`).

The agent does not send one growing history: each node sends its own schema turn (the step
kinds it may write), the question, the steps so far (the model's earlier steps,
re-serialized; earlier page observations shortened) and its own instruction turn last; a
later call drops the earlier nodes' schema and instruction turns. Each run is laid out as
one growing chat instead, nothing invented and nothing dropped: the first call's request as
sent, then per call the model's reply (assistant; as the next request re-sent it where that
holds the same JSON step, else as returned) and the next request's turns the chat lacks: a
new schema turn, then the turns after its last assistant turn (the new observation and the
node's instruction), as sent. A call's request
in this layout is the recorded one where the agent only appended; where it dropped an
instruction turn or re-serialized a step, the layout keeps what was sent first (the README
counts both). A run starts at a request with no assistant turn; the calls of a run are those
on its question, in time order.

This converter reads the recording from a mirror/bare git directory (`--repo`, at `--rev`)
or a checkout, and writes, outside the repository,

- `<out>/tapeagents-gaia/sessions.jsonl`: each run as its own session, runs in the order of
  their first call;
- `<out>/tapeagents-gaia-queue/sessions.jsonl`: the runs in the same order, one after
  another in one conversation (the system prompt once), cut at the run boundaries nearest
  each 1/N of the calls, N = calls / `--queue-calls` rounded
  (`bench.chat_corpus.join_queues`);

each with a `README.md` saying where it came from and how it was converted:

    python -m bench.tapeagents --repo /work/.mirror/ServiceNow+TapeAgents/repo --out /tmp/gen52
"""

from __future__ import annotations

import gzip
import sqlite3
import subprocess
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.chat_corpus import (
    Message,
    RepoReader,
    converter_main,
    join_queues,
    n_calls,
    write_runs_and_queues,
)

SOURCE = "ServiceNow/TapeAgents"
REV = "04ae31d5604a601fd5b0acc3342402ab308804e7"
RECORDING = "tests/examples/res/gaia_agent/tapedata.sqlite.gz"
CORPUS = "tapeagents-gaia"
QUESTION = '"kind": "question"'


def read_gz(reader: RepoReader, rev: str) -> bytes:
    """The gzipped recording's bytes (binary: not through `RepoReader.read`)."""
    if reader.git:
        return subprocess.run(
            ["git", "--git-dir", str(reader.root), "show", f"{rev}:{RECORDING}"],
            check=True, capture_output=True).stdout
    return (reader.root / RECORDING).read_bytes()


def llm_calls(data: bytes) -> list[dict[str, Any]]:
    """The `LLMCalls` rows in time order: id, request messages, reply text."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "tapedata.sqlite"
        db.write_bytes(gzip.decompress(data))
        con = sqlite3.connect(db)
        try:
            rows = con.execute("SELECT prompt_id, timestamp, prompt, output FROM LLMCalls "
                               "ORDER BY timestamp, prompt_id").fetchall()
        finally:
            con.close()
    calls = []
    for prompt_id, _ts, prompt, output in rows:
        request = orjson.loads(prompt)
        if request.get("tools"):
            raise ValueError(f"{prompt_id}: a request with tools")
        messages = []
        for m in request["messages"]:
            if m["role"] not in ("system", "user", "assistant"):
                raise ValueError(f"{prompt_id}: unexpected message {m['role']!r}")
            messages.append({"role": m["role"], "content": text_of(m["content"])})
        reply = orjson.loads(output)
        if reply.get("tool_calls") or not isinstance(reply.get("content"), str):
            raise ValueError(f"{prompt_id}: a reply that is not text")
        calls.append({"id": prompt_id, "messages": messages, "reply": reply["content"]})
    return calls


def text_of(content: str | Sequence[Mapping[str, Any]]) -> str:
    """A turn's text: as sent, or its content parts joined by newlines, each image part
    (base64 in a data URL) replaced by `[image: <media type>, N base64 characters]`."""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part.get("type") == "text":
            parts.append(str(part["text"]))
        elif part.get("type") == "image_url":
            url = str(part["image_url"]["url"])
            media = url[5:url.index(";")] if url.startswith("data:") and ";" in url else "url"
            parts.append(f"[image: {media}, {len(url.split(',', 1)[-1])} base64 characters]")
        else:
            raise ValueError(f"unexpected content part {part.get('type')!r}")
    return "\n".join(parts)


def question(messages: Sequence[Message]) -> str:
    """The request's question turn (the key of its run)."""
    for m in messages:
        if m["role"] == "user" and QUESTION in m["content"]:
            return str(m["content"])
    raise ValueError("a request without a question turn")


def runs_of(calls: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The calls grouped into runs: a request with no assistant turn starts a run on its
    question; every other request continues the open run on its question."""
    runs: list[list[Mapping[str, Any]]] = []
    open_run: dict[str, list[Mapping[str, Any]]] = {}
    for call in calls:
        key = question(call["messages"])
        if not any(m["role"] == "assistant" for m in call["messages"]):
            open_run[key] = []
            runs.append(open_run[key])
        elif key not in open_run:
            raise ValueError(f"{call['id']}: continues no run")
        open_run[key].append(call)
    return runs


def same_step(returned: str, sent: str) -> bool:
    """Whether a reply and a turn the agent sent hold the same JSON step (re-serialized)."""
    try:
        return bool(orjson.loads(returned) == orjson.loads(sent))
    except orjson.JSONDecodeError:
        return returned == sent


def within(sent: Sequence[Message], chat: Sequence[Message]) -> bool:
    """Whether every turn of `sent` is in `chat`."""
    return all(m in chat for m in sent)


def layout(run: Sequence[Mapping[str, Any]]) -> tuple[list[Message], int, int]:
    """A run as one growing chat (module docstring), how many of its calls' recorded
    requests it reproduces exactly, and how many more it holds every turn of."""
    chat: list[Message] = []
    exact = dropped = 0
    for k, call in enumerate(run):
        sent = call["messages"]
        if k == 0:
            new = list(sent)
        else:
            last = max(i for i, m in enumerate(sent) if m["role"] == "assistant")
            if same_step(str(chat[-1]["content"]), str(sent[last]["content"])):
                chat[-1] = dict(sent[last])  # the previous reply as the agent re-sent it
            ask = next(i for i, m in enumerate(sent) if m["role"] == "user"
                       and QUESTION in m["content"])
            new = [m for m in sent[:ask] if m not in chat] + list(sent[last + 1:])
        chat += new
        exact += chat == list(sent)
        dropped += chat != list(sent) and within(sent, chat)
        chat.append({"role": "assistant", "content": call["reply"]})
    return chat, exact, dropped


def step_kind(text: str) -> str:
    """A turn's JSON step kind (`"kind"` of the object it holds), else its opening words."""
    try:
        step = orjson.loads(text)
    except orjson.JSONDecodeError:
        return " ".join(text.split()[:4])
    if isinstance(step, dict) and isinstance(step.get("kind"), str):
        return step["kind"]
    if isinstance(step, list):
        return "[" + ", ".join(sorted({s.get("kind", "?") for s in step
                                       if isinstance(s, dict)})) + "]"
    return type(step).__name__


def kinds(sessions: Sequence[Mapping[str, Any]], role: str, top: int = 10) -> str:
    count: Counter[str] = Counter()
    chars: Counter[str] = Counter()
    for s in sessions:
        turns = [m for m in s["messages"] if m["role"] == role]
        for m in turns[2:] if role == "user" else turns:
            kind = step_kind(m["content"])
            count[kind] += 1
            chars[kind] += len(m["content"])
    total = max(sum(chars.values()), 1)
    return "\n".join(f"  - `{kind}`: {n} turns, {chars[kind] / total:.1%} of the characters"
                     for kind, n in count.most_common(top))


README = """# TapeAgents, GAIA web-research agent (JSON steps): {shape}

Converted by `bench/tapeagents.py` (ctxgate) from `{recording}` (the `LLMCalls` table) of
{source} at commit `{commit}`. Licence of the source: Apache License 2.0 (its `LICENSE`).
Used for measurement only; not part of the ctxgate repository; do not commit it there.

{stats}.

- Every recorded call ({calls}) of the GAIA agent's test recording, grouped into {runs} runs
  (a run starts at a request without an assistant turn; {questions} questions). The model is
  not recorded (the repository's `conf/gaia_openai.yaml` names `gpt4o`).
- Messages as recorded: the system prompt, the user turn listing the step schemas, the
  question, the nodes' instruction turns and the observations (user), the model's replies
  (assistant, one JSON step each). **No `tools`, no `tool_calls`, no `tool` messages.**
- The agent re-sends its steps per node and drops earlier nodes' instruction turns; laid out
  as one growing chat (the first request, then per call the reply and the next request's
  turns after its last assistant turn; a schema turn, sent before the question, that the
  chat does not hold yet comes first). Of the {calls} calls, the layout reproduces the
  recorded request exactly for {exact}; for {dropped} it holds every turn sent, and turns
  the agent left out (earlier nodes' instruction and schema turns); for {other} a turn was
  sent otherwise than the layout keeps it (a step re-serialized, an observation shortened:
  the layout keeps it as first sent).
- The model's replies, by step kind:
{replies}
- The user turns after the step schemas and the question, by step kind or opening words:
{users}
{join}"""

JOIN_RUNS = "- One session per run, in the order of their first call.\n"
JOIN_QUEUE = """- Queues: the runs in the same order, cut at the run boundaries nearest each 1/N of
  the calls, N = calls / {queue_calls} rounded. A session is the system prompt once, then
  each run's messages after it in order, nothing added: the next run's schema turn and
  question follow the previous run's last reply.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 250
            ) -> dict[str, int]:
    reader = RepoReader(repo, RECORDING)
    commit = reader._git("rev-parse", rev).strip() if reader.git else None
    calls = llm_calls(read_gz(reader, rev))
    runs = runs_of(calls)
    laid = []
    exact = dropped = 0
    for run in runs:
        chat, same, fewer = layout(run)
        exact += same
        dropped += fewer
        laid.append({"first": run[0]["id"], "messages": chat})
    source = f"{SOURCE}@{(commit or rev)[:7]}"

    def session(sid: str, task: str | None, messages: list[Message]) -> dict[str, Any]:
        return {"id": sid, "source": source, "path": RECORDING,
                "agent": "web research, JSON steps (TapeAgents GAIA agent)", "model": None,
                "task_id": task, "tools": [], "messages": messages}

    per_run = [session(f"{CORPUS}/r{i:03d}", r["first"], r["messages"])
               for i, r in enumerate(laid)]

    def system(r: Mapping[str, Any]) -> str | None:
        first = r["messages"][0]
        return str(first["content"]) if first["role"] == "system" else None

    def body(r: Mapping[str, Any], _ids: object) -> list[Message]:
        return list(r["messages"][1:] if system(r) is not None else r["messages"])

    joined, _ = join_queues(
        {CORPUS: laid}, calls=lambda r: n_calls(r["messages"]),
        parts=lambda total: round(total / queue_calls), system=system, messages=body,
        name=lambda _t, q, _g: f"{CORPUS}-queue/q{q:02d}",
    )
    queues = [session(sid, None, messages) for sid, messages in joined]
    fields = {"source": SOURCE, "commit": commit or rev, "recording": RECORDING,
              "calls": len(calls), "runs": len(runs), "exact": exact, "dropped": dropped,
              "other": len(calls) - exact - dropped,
              "questions": len({question(r[0]["messages"]) for r in runs}),
              "replies": kinds(per_run, "assistant"), "users": kinds(per_run, "user")}
    return write_runs_and_queues(out, CORPUS, per_run, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen52", REV, 250, convert)


if __name__ == "__main__":
    raise SystemExit(main())
