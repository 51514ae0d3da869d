"""Toolathlon's recorded agent runs as corpus folders `bench/replay.py` reads.

Toolathlon ("The Tool Decathlon", hkust-nlp) runs a general tool-using agent on 108 long
tasks over MCP servers (file system, terminal, Canvas, Notion, e-mail, Word/Excel/PDF,
Google Sheets/Forms/Maps, GitHub, Kubernetes, Snowflake, WooCommerce, a browser, ...). Its
authors publish the runs' trajectories (the Hugging Face dataset
`hkust-nlp/Toolathlon-Trajectories`); the public GitHub repository
`WaitHZ/toolathlon-traj-website` (the trajectory viewer of toolathlon.xyz) holds those of two
models as `trajs/<model>_<task>.json`: `{pass, messages, failure}`, `messages` being the
conversation in the OpenAI chat shape (the task's user turn, assistant messages with
`tool_calls`, `tool` results), without the system prompt and without the tool definitions.

This converter reads those files from a checkout or a mirror/bare git directory (`--repo`)
and writes, outside the repository,

- `<out>/toolathlon-<model>/sessions.jsonl`: every run as its own session;
- `<out>/toolathlon-<model>-queue/sessions.jsonl`: one agent working the model's tasks one
  after another in one conversation (task order: the file names'), cut at the task
  boundaries nearest each 1/N of the calls, N = calls / `--queue-calls` rounded
  (`bench.chat_corpus.join_queues`);

each with a `README.md` saying where it came from and how it was converted:

    python -m bench.toolathlon --repo /work/.mirror/WaitHZ+toolathlon-traj-website/repo \\
        --out /tmp/toolathlon
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.chat_corpus import (
    CallIds,
    Message,
    RepoReader,
    assistant_message,
    corpus_stats,
    join_queues,
    run_conversion,
    write_corpus,
)

SOURCE = "WaitHZ/toolathlon-traj-website"
TOOL_CHARS = 24_000
SYSTEM = ("You are a tool-using agent. Complete the user's task with the tools provided "
          "(MCP servers: files, terminal, documents, web and office applications).")
JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
              (list, "array"), (dict, "object"))


def cut(text: str, limit: int = TOOL_CHARS) -> str:
    """A text longer than `limit`: its first two thirds and last third of `limit`, with how
    many characters were cut in between (as the shared corpora's converters cut)."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def _json_type(value: Any) -> str | None:
    for kind, name in JSON_TYPES:
        if isinstance(value, kind):
            return name
    return None


def infer_tools(sessions: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """A tool definition for every tool name called in `sessions`, built from the calls
    (the runs do not record the definitions): one property per argument name seen, with
    the JSON types of its values; required: the arguments present in every parsed call."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for messages in sessions:
        for m in messages:
            for call in m.get("tool_calls") or ():
                fn = call["function"]
                try:
                    args = orjson.loads(fn.get("arguments") or "{}")
                except orjson.JSONDecodeError:
                    args = None
                seen.setdefault(fn["name"], [])
                if isinstance(args, dict):
                    seen[fn["name"]].append(args)
    tools = {}
    for name, calls in seen.items():
        props: dict[str, dict[str, Any]] = {}
        for args in calls:
            for key, value in args.items():
                types = props.setdefault(key, {}).setdefault("_types", [])
                kind = _json_type(value)
                if kind and kind not in types:
                    types.append(kind)
        for prop in props.values():
            types = prop.pop("_types")
            if len(types) == 1:
                prop["type"] = types[0]
            elif types:
                prop["type"] = types
        server, _, tool = name.partition("-")
        tools[name] = {"type": "function", "function": {
            "name": name,
            "description": f"{tool or name} ({server} server)" if tool else name,
            "parameters": {"type": "object", "properties": props,
                           "required": [k for k in props if calls and all(k in a for a in calls)]}}}
    return tools


def agent_messages(recorded: Sequence[Mapping[str, Any]], ids: CallIds
                   ) -> tuple[list[Message], int]:
    """A run's messages in the corpora's shape (unique call ids, tool results after the
    calls they answer, long tool results cut); returns them and how many were cut."""
    out: list[Message] = []
    renamed: dict[str, str] = {}
    cuts = 0
    for m in recorded:
        role = m["role"]
        if role == "assistant":
            out.append(assistant_message(m.get("content"), (
                (call["id"], call["function"]["name"], call["function"].get("arguments") or "{}")
                for call in m.get("tool_calls") or ()), ids, renamed))
        elif role == "tool":
            content = str(m.get("content") or "")
            cuts += len(content) > TOOL_CHARS
            out.append({"role": "tool", "tool_call_id": renamed.pop(m["tool_call_id"]),
                        "content": cut(content)})
        elif role == "user":
            out.append({"role": "user", "content": m.get("content")})
        else:
            raise ValueError(f"unexpected role {role!r}")
    return out, cuts


def load(repo: Path) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """Every run of the source, per model in task order: `{task, path, pass, messages}`;
    and the source's commit (a git directory's `HEAD`)."""
    reader = RepoReader(repo, "trajs")
    if reader.git:
        paths = reader._git("ls-tree", "--name-only", "HEAD", "trajs/").split()
    else:
        paths = sorted(f"trajs/{p.name}" for p in (repo / "trajs").glob("*.json"))
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(paths):
        match = re.fullmatch(r"trajs/([^_/]+)_(.+)\.json", path)
        if not match:
            continue
        data = orjson.loads(reader.read(path))
        runs.setdefault(match[1], []).append({"task": match[2], "path": path,
                                              "pass": data.get("pass"),
                                              "messages": data["messages"]})
    return runs, reader.commit()


README = """# Toolathlon, {model}: {shape}

Converted by `bench/toolathlon.py` (ctxgate) from `trajs/{model}_*.json` of {source} at
commit `{commit}` (the trajectory viewer of toolathlon.xyz; the repository has no licence
file; the Toolathlon authors publish the trajectories as the Hugging Face dataset
`hkust-nlp/Toolathlon-Trajectories`, CC-BY-4.0). Used for measurement only. Not part of the
ctxgate repository; do not commit it there.

{stats}.

- Runs of Toolathlon's agent with model `{model}` on its tasks (MCP tool servers), every run
  in the source whatever its result ({passed} passed).
- System message: a short neutral statement (the agent's own system prompt is not in the
  recorded data). `tools`: one definition per tool the session calls, inferred from the
  calls of all runs of the model (argument names and JSON types; the runs do not record
  the definitions).
- Messages as recorded (OpenAI chat shape): the task's user turn(s), the assistant's text
  and tool calls (arguments as the model sent them, {bad_args} not valid JSON kept as sent,
  {empty_args} empty ones as `{{}}`),
  the tools' results. Tool results longer than {limit:,} characters keep their first two
  thirds and last third of that budget with `[... N characters cut ...]` between
  ({cuts} of {tool_msgs}). Repeated call ids get `_N`: {renamed}.
{join}"""

JOIN_RUNS = "- One session per run (task), as recorded.\n"
JOIN_QUEUE = """- Task queues: the model's runs in task-name order, cut at the task boundaries
  nearest each 1/N of the calls, N = calls / {queue_calls} rounded. A session is the system message
  and then each run's messages in order, nothing added: the next task's user turn follows
  the previous run's last message.
"""


def convert(repo: Path, out: Path, *, queue_calls: int = 300) -> dict[str, int]:
    runs, commit = load(repo)
    written = {}
    for model, group in sorted(runs.items()):
        corpus = f"toolathlon-{re.sub(r'[^a-z0-9.]+', '-', model.lower())}"
        tools = infer_tools([r["messages"] for r in group])
        converted: dict[str, tuple[list[Message], int]] = {}
        bad_args = sum(1 for r in group for m in r["messages"] for c in m.get("tool_calls") or ()
                       if not _parses(c["function"].get("arguments") or "{}"))

        def session(sid: str, run: Mapping[str, Any], messages: list[Message],
                    corpus: str = corpus, tools: Mapping[str, Any] = tools,
                    model: str = model) -> dict[str, Any]:
            names = dict.fromkeys(c["function"]["name"] for m in messages
                                  for c in m.get("tool_calls") or ())
            return {"id": sid, "source": f"{SOURCE}@{(commit or 'HEAD')[:7]}",
                    "path": run.get("path"), "agent": "general tool use over MCP servers "
                    "(Toolathlon)", "model": model, "task_id": run.get("task"),
                    "tools": [tools[n] for n in names], "messages": messages}

        per_run, renamed_runs, cuts = [], 0, 0
        for r in group:
            ids = CallIds()
            messages, n_cut = agent_messages(r["messages"], ids)
            converted[r["task"]] = (messages, n_cut)
            cuts += n_cut
            renamed_runs += ids.renamed
            per_run.append(session(f"{corpus}/{r['task']}", r,
                                   [{"role": "system", "content": SYSTEM}, *messages]))
        joined, renamed_queues = join_queues(
            {0: group}, calls=lambda r: sum(m["role"] == "assistant" for m in r["messages"]),
            parts=lambda total: round(total / queue_calls), system=lambda _r: SYSTEM,
            messages=lambda r, ids: agent_messages(r["messages"], ids)[0],
            name=lambda _t, q, g, corpus=corpus: (
                f"{corpus}-queue/{g[0]['task']}--{g[-1]['task']}-q{q}"),
        )
        queues = [session(sid, {"path": f"trajs/{model}_*.json"}, messages)
                  for sid, messages in joined]
        empty_args = sum(1 for r in group for m in r["messages"]
                         for c in m.get("tool_calls") or () if not c["function"].get("arguments"))
        common = {"empty_args": empty_args, "model": model, "source": SOURCE, "commit": commit,
                  "limit": TOOL_CHARS,
                  "passed": sum(bool(r["pass"]) for r in group), "bad_args": bad_args,
                  "cuts": cuts, "tool_msgs": sum(m["role"] == "tool" for r in group
                                                 for m in r["messages"])}
        for folder, sessions, renamed, shape, join in (
                (corpus, per_run, renamed_runs, "one session per run", JOIN_RUNS),
                (f"{corpus}-queue", queues, renamed_queues, "task-queue sessions",
                 JOIN_QUEUE.format(queue_calls=queue_calls))):
            readme = README.format(shape=shape, stats=corpus_stats(sessions),
                                   renamed=renamed, join=join, **common)
            written[folder] = write_corpus(out / folder, sessions, readme)
    return written


def _parses(arguments: str) -> bool:
    try:
        orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True,
                        help=f"{SOURCE} checkout or git directory")
    parser.add_argument("--out", type=Path, default=Path("/tmp/toolathlon"))
    parser.add_argument("--queue-calls", type=int, default=300)
    args = parser.parse_args(argv)
    run_conversion(parser, args.repo, args.out,
                   lambda: convert(args.repo, args.out, queue_calls=args.queue_calls))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
