"""crewAI's recorded agent executions (the HTTP cassettes of its test suite) as corpus
folders `bench/replay.py` reads.

crewAI (`crewAIInc/crewAI`, MIT) is a framework for "crews" of role-playing agents. Its
test suite replays recorded HTTP traffic: VCR cassettes (`**/cassettes/**/*.yaml`), each
holding every request the tests sent to the model APIs and the recorded response, **the
exact request bodies**. An agent execution sends a system prompt (the agent's role,
backstory and goal, its tools described in text, and the format to answer in), a user turn
with the task, and, step after step, the growing history. In the text format (the
default), the model answers `Thought: ... Action: <tool> Action Input: {...}`; crewAI runs
the tool and sends the answer back **appended to the model's own assistant turn**
(`... Observation: <tool output>`), so a request ends with assistant turns, one per step,
and no `tool` or user turn carries the observations; the model ends with `Final Answer:`.
Newer tests use the API's tools (`tools`, `tool_calls`, `tool` messages) instead. The
tasks are the tests' (toy roles, `get_final_answer`-style tools, short research and writing
tasks), answered by OpenAI models (mostly `gpt-4o`, `gpt-4o-mini`).

The source is every version of every cassette reachable from `REV` (the cassettes are
re-recorded as crewAI changes: each version is another recorded execution), read from a
mirror/bare git directory (`--repo`). Per cassette version, the chat-completion requests
(`.../chat/completions`) are grouped into executions: a request continues the open
execution whose last request it extends (that request's messages, then more); else it
starts one. An execution is kept when it has at least `MIN_CALLS` calls and its requests
are exactly the prefixes of one chat that end right before each of its assistant turns
(then the replay's calls are the recorded requests, as sent); the chat is its last request
and the model's last reply (parsed from the recorded response, JSON or a server-sent event
stream). Identical chats (a cassette copied or moved) are kept once.

This converter writes, outside the repository,

- `<out>/crewai/sessions.jsonl`: each kept execution as its own session, in cassette path
  order, versions in the order `git rev-list` lists them;
- `<out>/crewai-queue/sessions.jsonl`: per agent (the same system prompt and tools), its
  executions in the same order, one after another in one conversation (the system prompt
  once), cut at the execution boundaries nearest each 1/N of the agent's calls,
  N = calls / `--queue-calls` rounded (`bench.chat_corpus.join_queues`);

each with a `README.md` saying where it came from and how it was converted:

    python -m bench.crewai --repo /work/.mirror/crewAIInc+crewAI/repo --out /tmp/gen53
"""

from __future__ import annotations

import gzip
import hashlib
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from bench.chat_corpus import (
    CallIds,
    Message,
    RepoReader,
    converter_main,
    join_queues,
    n_calls,
    write_runs_and_queues,
)
from bench.tapeagents import text_of

SOURCE = "crewAIInc/crewAI"
REV = "f4731f5025f861c78e3af0487cc80bf5e7c64782"
CORPUS = "crewai"
MIN_CALLS = 3
CHAT = "/chat/completions"
OBSERVATION = "\nObservation:"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
NOT_ONE_CHAT = ("executions not one chat (requests not its prefixes, or the last reply calls "
                "a tool)")


def is_cassette(path: str) -> bool:
    return "/cassettes/" in f"/{path}" and path.endswith((".yaml", ".yml"))


def cassette_blobs(reader: RepoReader, rev: str,
                   keep: Callable[[str], bool] = is_cassette) -> list[tuple[str, str]]:
    """`(blob, path)` of every version of the files `keep` selects (cassettes) reachable
    from `rev`, as `git rev-list` lists them (newest commit first), each blob once."""
    listing = reader._git("rev-list", "--objects", "--missing=allow-any", rev)
    seen: set[str] = set()
    out = []
    for line in listing.splitlines():
        blob, _, path = line.partition(" ")
        if path and keep(path) and blob not in seen:
            seen.add(blob)
            out.append((blob, path))
    return out


def read_blobs(root: Path, blobs: Sequence[str]) -> Iterator[bytes | None]:
    """Each blob's bytes, `None` for one the snapshot lacks (its largest files)."""
    proc = subprocess.Popen(["git", "--git-dir", str(root), "cat-file", "--batch"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for blob in blobs:
            proc.stdin.write(f"{blob}\n".encode())
            proc.stdin.flush()
            header = proc.stdout.readline().split()
            if len(header) < 3:
                yield None
                continue
            data = proc.stdout.read(int(header[2]))
            proc.stdout.read(1)
            yield data
    finally:
        proc.stdin.close()
        proc.wait()


def body_of(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """A request's JSON body (`parsed_body`, or `body` as text), `None` if it has none."""
    body = request.get("parsed_body") or request.get("body")
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            body = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
    return body if isinstance(body, dict) else None


def response_text(response: Mapping[str, Any] | None) -> str | None:
    """A recorded response's body as text (`content`, or `body.string`, gunzipped)."""
    if not isinstance(response, Mapping):
        return None
    raw: Any = response.get("content")
    if raw is None and isinstance(response.get("body"), Mapping):
        raw = response["body"].get("string")
    if isinstance(raw, bytes):
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        raw = raw.decode("utf-8", "replace")
    return raw if isinstance(raw, str) else None


def reply_of(text: str | None) -> Message | None:
    """The model's reply (content and tool calls) in a chat-completion response, JSON or a
    server-sent event stream of chunks; `None` if there is none."""
    if not text:
        return None
    try:
        whole = orjson.loads(text)
    except orjson.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        choices = whole.get("choices") or []
        if not choices or not isinstance(choices[0].get("message"), dict):
            return None
        msg = choices[0]["message"]
        return message({"role": "assistant", "content": msg.get("content"),
                        "tool_calls": msg.get("tool_calls")})
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    chunks = 0
    for line in text.splitlines():
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        try:
            chunk = orjson.loads(line[5:])
        except orjson.JSONDecodeError:
            return None
        for choice in chunk.get("choices") or []:
            chunks += 1
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call.get("index", 0), {
                    "id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                slot["id"] = call.get("id") or slot["id"]
                fn = call.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
    if not chunks:
        return None
    return message({"role": "assistant", "content": "".join(content) or None,
                    "tool_calls": [calls[k] for k in sorted(calls)] or None})


def message(m: Mapping[str, Any]) -> Message:
    """A recorded message in the corpora's shape: role, content as text (parts joined),
    tool calls as `{id, type, function}`, the tool call id it answers."""
    role = m.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"unexpected message {role!r}")
    content = m.get("content")
    out: Message = {"role": role,
                    "content": text_of(content) if isinstance(content, list) else content}
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c.get("id"), "type": "function",
             "function": {"name": c["function"]["name"],
                          "arguments": c["function"].get("arguments") or ""}}
            for c in m["tool_calls"]]
    if role == "tool":
        out["tool_call_id"] = m.get("tool_call_id")
    return out


def executions(interactions: Sequence[Mapping[str, Any]], counts: Counter[str]
               ) -> list[dict[str, Any]]:
    """A cassette's chat-completion requests grouped into executions (module docstring):
    each with its requests' messages, its tools, model and the last response's reply."""
    open_runs: list[dict[str, Any]] = []
    for it in interactions:
        request = (it or {}).get("request") or {}
        if CHAT not in str(request.get("uri", "")):
            continue
        body = body_of(request)
        if not body or not isinstance(body.get("messages"), list) or not body["messages"]:
            continue
        if body.get("functions"):
            counts["requests with legacy `functions`"] += 1
            continue
        counts["requests"] += 1
        try:
            msgs = [message(m) for m in body["messages"]]
        except (ValueError, KeyError, TypeError):
            counts["requests with a message of another shape"] += 1
            continue
        tools = body.get("tools") or None
        run = next((r for r in reversed(open_runs)
                    if len(msgs) > len(r["requests"][-1])
                    and msgs[:len(r["requests"][-1])] == r["requests"][-1]
                    and r["tools"] == tools), None)
        if run is None:
            run = {"requests": [], "tools": tools, "model": body.get("model")}
            open_runs.append(run)
        run["requests"].append(msgs)
        run["response"] = it.get("response")
    return open_runs


def chat_of(run: Mapping[str, Any]) -> list[Message] | None:
    """The execution as one chat (its last request and the last reply), if its requests are
    exactly that chat's prefixes ending right before each assistant turn and the last reply
    calls no tool (its answer was never sent); else `None`."""
    reply = reply_of(response_text(run.get("response")))
    if reply is None:
        return None
    if reply.get("tool_calls"):
        return None  # the last call's tools never answered: not a chat the corpora hold
    chat = [*run["requests"][-1], reply]
    prefixes = [chat[:i] for i, m in enumerate(chat) if m["role"] == "assistant" and i > 0]
    return chat if prefixes == run["requests"] else None


def unique_ids(chat: Sequence[Message]) -> list[Message]:
    """Tool-call ids unique within the session (`CallIds`), results renamed alike."""
    ids, renamed, out = CallIds(), {}, []
    for m in chat:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                new = renamed[c["id"]] = ids.new(c["id"])
                calls.append({**c, "id": new})
            m["tool_calls"] = calls
        if m["role"] == "tool":
            m["tool_call_id"] = renamed.get(m["tool_call_id"], m["tool_call_id"])
        out.append(m)
    return out


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The kept executions, in cassette path order, and what was counted on the way."""
    counts: Counter[str] = Counter()
    blobs = cassette_blobs(reader, rev)
    runs: list[dict[str, Any]] = []
    seen: set[bytes] = set()
    for (blob, path), data in zip(blobs, read_blobs(reader.root, [b for b, _ in blobs]),
                                  strict=True):
        counts["cassette versions"] += 1
        if data is None:
            counts["cassette versions absent from the snapshot"] += 1
            continue
        try:
            doc = yaml.load(data, Loader=LOADER)
        except yaml.YAMLError:
            counts["cassette versions not YAML"] += 1
            continue
        if not isinstance(doc, dict):
            continue
        for k, run in enumerate(executions(doc.get("interactions") or [], counts)):
            counts["executions"] += 1
            calls = len(run["requests"])
            if calls < MIN_CALLS:
                counts[f"executions of fewer than {MIN_CALLS} calls"] += 1
                continue
            chat = chat_of(run)
            if chat is None:
                counts[NOT_ONE_CHAT] += 1
                continue
            key = hashlib.blake2b(orjson.dumps([chat, run["tools"]]), digest_size=16).digest()
            if key in seen:
                counts["executions seen already (a copied or moved cassette)"] += 1
                continue
            seen.add(key)
            name = Path(path).name.rsplit(".", 1)[0]
            runs.append({"id": f"{CORPUS}/{name}/{blob[:10]}/{k}", "path": path,
                         "model": run["model"], "tools": run["tools"],
                         "messages": unique_ids(chat), "calls": calls})
    runs.sort(key=lambda r: r["path"])  # stable: versions keep rev-list order
    return runs, counts


def agent_key(run: Mapping[str, Any]) -> bytes:
    first = run["messages"][0]
    return orjson.dumps([first["content"] if first["role"] == "system" else None,
                         run["tools"]], option=orjson.OPT_SORT_KEYS)


def tally(runs: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Assistant turns by layout: ReAct text carrying observations, final answers, tool
    calls; and the `tool` and user turns after the task."""
    out: Counter[str] = Counter()
    for r in runs:
        for i, m in enumerate(r["messages"]):
            content = m.get("content") or ""
            if m["role"] == "assistant":
                out["assistant"] += 1
                out["observation"] += OBSERVATION in content
                out["final"] += "Final Answer:" in content
                out["calls"] += bool(m.get("tool_calls"))
            elif m["role"] == "tool":
                out["tool"] += 1
            elif m["role"] == "user" and i > 1:
                out["user"] += 1
    return dict(out)


README = """# crewAI agents from its test cassettes (observations in assistant turns): {shape}

Converted by `bench/crewai.py` (ctxgate) from every version of every cassette
(`**/cassettes/**/*.yaml`) reachable from commit `{commit}` of {source}. Licence of the
source: MIT (its `LICENSE`). Used for measurement only; not part of the ctxgate repository;
do not commit it there.

{stats}.

- The exact request bodies crewAI's tests sent to `.../chat/completions`, grouped per
  cassette version into agent executions (a request continues the execution whose last
  request it extends). Kept: {kept} executions of at least {min_calls} calls whose requests
  are exactly the prefixes of one chat ending right before each assistant turn (so every
  replayed call is a recorded request as sent), plus the model's last reply. Counted on the
  way: {counts}.
- Models: {models}. With API `tools`: {with_tools} executions.
- Assistant turns: {assistant}; {observation} carry a tool's answer appended by crewAI
  (`... Observation: ...`: the text the next request sent, not only what the model wrote),
  {final} a `Final Answer:`, {calls} API tool calls. `tool` turns: {tool}; user turns after
  the task: {user}.
- The tasks are the test suite's (toy roles and tools, short research and writing tasks):
  small contexts.
{join}"""

JOIN_RUNS = ("- One session per execution, cassettes in path order, versions in the order "
             "`git rev-list` lists them.\n")
JOIN_QUEUE = """- Queues: per agent (the same system prompt and tools), its executions in the same
  order, cut at the execution boundaries nearest each 1/N of the agent's calls,
  N = calls / {queue_calls} rounded. A session is the system prompt once, then each
  execution's messages after it in order, nothing added: the next task's user turn follows
  the previous execution's last reply.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 250
            ) -> dict[str, int]:
    reader = RepoReader(repo, "README.md")
    if not reader.git:
        raise ValueError(f"{repo}: a git directory is needed (every cassette version)")
    commit = reader._git("rev-parse", rev).strip()
    runs, counts = load(reader, rev)
    if not runs:
        raise ValueError(f"{repo}@{rev}: no execution of {MIN_CALLS} calls or more")
    source = f"{SOURCE}@{commit[:7]}"

    def session(sid: str, path: str | None, model: str | None, tools: Any,
                messages: list[Message]) -> dict[str, Any]:
        return {"id": sid, "source": source, "path": path,
                "agent": "crewAI agent (ReAct text, observations in assistant turns)",
                "model": model, "task_id": None, "tools": tools or [], "messages": messages}

    per_run = [session(r["id"], r["path"], r["model"], r["tools"], r["messages"])
               for r in runs]
    agents: dict[bytes, list[dict[str, Any]]] = {}
    for r in runs:
        agents.setdefault(agent_key(r), []).append(r)
    order = {key: f"a{i:03d}" for i, key in enumerate(agents)}
    by_name = {order[k]: v for k, v in agents.items()}

    def system(r: Mapping[str, Any]) -> str | None:
        first = r["messages"][0]
        return str(first["content"]) if first["role"] == "system" else None

    def body(r: Mapping[str, Any], _ids: object) -> list[Message]:
        return list(r["messages"][1:] if system(r) is not None else r["messages"])

    joined, _ = join_queues(
        by_name, calls=lambda r: n_calls(r["messages"]),
        parts=lambda total: round(total / queue_calls), system=system, messages=body,
        name=lambda agent, q, _g: f"{CORPUS}-queue/{agent}/q{q:02d}",
    )
    queues = []
    for sid, messages in joined:
        group = by_name[sid.split("/")[1]]
        queues.append(session(sid, None, group[0]["model"], group[0]["tools"],
                              unique_ids(messages)))
    counted = {k: v for k, v in counts.items() if k not in ("requests", "executions")}
    fields = {
        "source": SOURCE, "commit": commit, "kept": len(runs), "min_calls": MIN_CALLS,
        "counts": f"{counts['requests']:,} requests, {counts['executions']:,} executions; "
                  + "; ".join(f"{k} {v:,}" for k, v in sorted(counted.items())),
        "models": ", ".join(f"`{m}` {n}" for m, n in
                            Counter(str(r["model"]) for r in runs).most_common()),
        "with_tools": sum(1 for r in runs if r["tools"]),
        **{k: tally(runs).get(k, 0) for k in
           ("assistant", "observation", "final", "calls", "tool", "user")},
    }
    return write_runs_and_queues(out, CORPUS, per_run, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen53", REV, 250, convert)


if __name__ == "__main__":
    raise SystemExit(main())
