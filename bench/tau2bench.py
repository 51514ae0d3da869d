"""tau2-bench's recorded simulations as corpus folders `bench/replay.py` reads.

tau2-bench (sierra-research/tau2-bench, MIT) records each simulation run as one results
file: `{info, tasks, simulations}`, each simulation's `messages` being the whole dialogue of
the agent with the simulated user (and, in the telecom domain, the user's own tool calls on
their phone, which the agent never sees). This converter rebuilds, for every simulation, the
chat the agent sent its model (tau2's `LLMAgent`): the system prompt (its instruction and the
domain policy recorded in `info.environment_info.policy`), the greeting it opened with, then
the customer's text turns, the agent's answers and tool calls and its tools' results, in
order; the user's tool calls and their results are left out, as the agent never saw them.
The data is never copied into this repository: it reads results files from paths the user
gives and writes, outside the repository,

- `<out>/tau2-<domain>-<model>/sessions.jsonl`: every simulation as its own session;
- `<out>/tau2-<domain>-<model>-queue/sessions.jsonl`: ticket queues, one agent working the
  tickets of one trial one after another in one conversation
  (`bench.chat_corpus.join_queues`), cut into queues of about `--queue-calls` calls;

each with a `README.md` saying where it came from and how it was converted. Tool
definitions are rebuilt from the domain's toolkit (`src/tau2/domains/<domain>/tools.py`:
every method marked `@is_tool`, its signature and docstring, as tau2's `as_tool` turns them
into an OpenAI schema, with simple types), read from a tau2-bench checkout or git directory
(`--repo`) at the commit the results file names, or the readable commit nearest its date:

    python -m bench.tau2bench RESULTS.json [RESULTS.json ...] --repo TAU2_CHECKOUT_OR_GIT_DIR \\
        --out /tmp/tau2
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from docstring_parser import parse as parse_docstring

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

SOURCE = "sierra-research/tau2-bench"
AGENT_MODULE = "src/tau2/agent/llm_agent.py"
JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
              "list": "array", "List": "array", "dict": "object", "Dict": "object"}


class Source:
    """A tau2-bench checkout or git directory: the agent's prompt and the domains' tools at
    the commit a results file was made with (or the readable commit nearest its date)."""

    def __init__(self, root: Path) -> None:
        self.reader = RepoReader(root, "src/tau2")
        self._dated: list[tuple[int, str]] | None = None

    def revision(self, commit: str | None, timestamp: str | None) -> str:
        if not self.reader.git or (commit and self.reader.has(AGENT_MODULE, commit)):
            return commit or "HEAD"
        if self._dated is None:
            log = self.reader._git("log", "--all", "--format=%ct %H")
            self._dated = [(int(t), h) for t, h in (line.split() for line in log.splitlines())]
        when = datetime.fromisoformat(timestamp).timestamp() if timestamp else float("inf")
        for _, rev in sorted(self._dated, key=lambda d: abs(d[0] - when)):
            if self.reader.has(AGENT_MODULE, rev):
                return rev
        raise ValueError(f"no commit of the source has {AGENT_MODULE}")

    def system_prompt(self, policy: str, rev: str) -> str:
        """`LLMAgent.system_prompt`: `SYSTEM_PROMPT` filled with `AGENT_INSTRUCTION` and the
        domain policy (both literals of the agent module, `.strip()`ped)."""
        literals = {}
        for node in ast.parse(self.reader.read(AGENT_MODULE, rev)).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id in ("AGENT_INSTRUCTION", "SYSTEM_PROMPT")):
                value = node.value
                if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
                    value = value.func.value  # the `"""...""".strip()` form
                literals[node.targets[0].id] = ast.literal_eval(value).strip()
        return literals["SYSTEM_PROMPT"].format(
            agent_instruction=literals["AGENT_INSTRUCTION"], domain_policy=policy)

    def tools(self, domain: str, rev: str) -> list[dict[str, Any]]:
        return toolkit_tools(self.reader.read(f"src/tau2/domains/{domain}/tools.py", rev))


def _json_type(annotation: ast.expr | None) -> dict[str, Any]:
    if annotation is None:
        return {}
    if isinstance(annotation, ast.Subscript):
        outer = ast.unparse(annotation.value)
        if outer == "Optional":
            return {"anyOf": [_json_type(annotation.slice), {"type": "null"}]}
        if outer in ("list", "List"):
            return {"type": "array", "items": _json_type(annotation.slice)}
        if outer in ("dict", "Dict"):
            return {"type": "object"}
    name = ast.unparse(annotation)
    return {"type": JSON_TYPES[name]} if name in JSON_TYPES else {}


def toolkit_tools(source: str) -> list[dict[str, Any]]:
    """Every `@is_tool` method of a tau2 toolkit as an OpenAI tool schema, in source order:
    the docstring's short and long description, one property a parameter (title, JSON type
    from the annotation, the docstring's description), the ones without default required."""
    tools = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef) or not any(
                isinstance(d, ast.Call) and ast.unparse(d.func) == "is_tool"
                for d in node.decorator_list):
            continue
        doc = parse_docstring(ast.get_docstring(node) or "")
        described = {p.arg_name: p.description for p in doc.params}
        args = [a for a in node.args.args if a.arg != "self"]
        defaults = dict(zip([a.arg for a in args][len(args) - len(node.args.defaults):],
                            node.args.defaults, strict=True))
        props: dict[str, Any] = {}
        for a in args:
            prop: dict[str, Any] = {}
            if described.get(a.arg):
                prop["description"] = described[a.arg]
            prop["title"] = a.arg.replace("_", " ").title()
            prop.update(_json_type(a.annotation))
            if a.arg in defaults:
                prop["default"] = ast.literal_eval(defaults[a.arg])
            props[a.arg] = prop
        description = doc.short_description or node.name
        if doc.long_description:
            description += "\n\n" + doc.long_description
        tools.append({"type": "function", "function": {
            "name": node.name, "description": description,
            "parameters": {"properties": props,
                           "required": [a.arg for a in args if a.arg not in defaults],
                           "title": "parameters", "type": "object"}}})
    return tools


def _arguments(call: Mapping[str, Any], message: Mapping[str, Any]) -> str:
    """A call's arguments as the model sent them (the raw response's string when recorded),
    else as compact JSON."""
    raw = ((message.get("raw_data") or {}).get("message") or {}).get("tool_calls") or ()
    for r in raw:
        if r.get("id") == call.get("id") and isinstance(r.get("function"), dict):
            return str(r["function"]["arguments"])
    return orjson.dumps(call.get("arguments") or {}).decode()


def agent_messages(recorded: Sequence[Mapping[str, Any]], ids: CallIds) -> list[Message]:
    """What the agent's model saw of a simulation, in the corpora's chat shape: assistant
    messages (content, tool calls as `{id, type, function}`), the customer's text turns, and
    the results of the agent's own calls (each after the calls it answers, by id); the
    user's tool calls and their results (`requestor: user`) left out."""
    out: list[Message] = []
    renamed: dict[str, str] = {}
    for m in recorded:
        role = m["role"]
        if role == "assistant":
            out.append(assistant_message(m.get("content"), (
                (call["id"], call["name"], _arguments(call, m))
                for call in m.get("tool_calls") or ()), ids, renamed))
        elif role == "user":
            if not m.get("tool_calls"):
                out.append({"role": "user", "content": m.get("content")})
        elif role == "tool" and m.get("requestor", "assistant") == "assistant":
            if m["id"] not in renamed:
                raise ValueError("a tool message answers no call of the agent")
            out.append({"role": "tool", "tool_call_id": renamed.pop(m["id"]),
                        "content": m.get("content")})
    return out


def _session(sid: str, run: Mapping[str, Any], file: Mapping[str, Any],
             messages: list[Message]) -> dict[str, Any]:
    return {"id": sid, "source": f"{SOURCE}@{file['rev'][:7]}", "path": file["path"],
            "agent": f"customer service, {file['domain']} (tau2-bench LLMAgent)",
            "model": file["model"], "task_id": run.get("task_id"), "tools": file["tools"],
            "messages": messages}


def load(path: Path, source: Source) -> dict[str, Any]:
    """One results file: its domain, agent model, prompt, tools, and its simulations in the
    order of its task list (with each one's index there)."""
    data = orjson.loads(path.read_bytes())
    info = data["info"]
    env = info["environment_info"]
    if info["agent_info"].get("implementation") != "llm_agent":
        raise ValueError(f"{path.name}: agent {info['agent_info'].get('implementation')!r}, "
                         "not tau2's llm_agent (only its prompt is rebuilt here)")
    rev = source.revision(info.get("git_commit"), data.get("timestamp"))
    order = {t["id"]: i for i, t in enumerate(data.get("tasks") or ())}
    sims = sorted(data["simulations"],
                  key=lambda s: (s.get("trial", 0), order.get(s["task_id"], len(order))))
    return {"domain": env["domain_name"], "model": info["agent_info"].get("llm"),
            "user_model": info["user_info"].get("llm"), "rev": rev, "recorded": info.get(
                "git_commit"), "path": path.name, "order": order, "simulations": sims,
            "system": source.system_prompt(env["policy"], rev),
            "tools": source.tools(env["domain_name"], rev)}


README = """# tau2-bench {domain}: {shape}

Converted by `bench/tau2bench.py` (ctxgate) from the results file `{path}` of {source}
(MIT licence, Copyright (c) 2025 Sierra Research: https://github.com/sierra-research/tau2-bench).
Not part of the ctxgate repository; do not commit it there.

{stats}.

- Simulations of tau2-bench's `LLMAgent` (`src/tau2/agent/llm_agent.py`), model `{model}`,
  with its simulated customer (`{user_model}`); every simulation in the file, whatever its
  reward. Recorded with tau2-bench at commit `{recorded}`; prompt and tools read at `{rev}`
  ({rev_note}).
- System message: `SYSTEM_PROMPT` filled with `AGENT_INSTRUCTION` and the domain policy as
  recorded in the file (`info.environment_info.policy`), as `LLMAgent.system_prompt` builds
  it ({system_chars:,} characters). `tools`: all {n_tools} `@is_tool` methods of
  `src/tau2/domains/{domain}/tools.py`, rebuilt from their signatures and docstrings the
  way tau2's `as_tool` does (simple types; not byte for byte what was sent).
- Messages: what the agent's model saw, in order: the greeting it opened with ("Hi! How can
  I help you today?"), the customer's text turns, the agent's answers and tool calls
  (reshaped to `{{id, type, function}}`, arguments as the model sent them), the results of
  its calls; the customer's own tool calls and their results (telecom: the user acts on
  their phone) are left out, as the agent never saw them: {user_tools} messages. Repeated
  call ids get `_N`: {renamed} of {total_calls} calls.
{join}"""

JOIN_TASKS = "- One session per simulation (task × trial), as recorded.\n"
JOIN_QUEUE = """- Ticket queues: the simulations of one trial in the file's task order, cut at the
  task boundaries nearest each 1/N of the trial's calls, N = its calls / {queue_calls}
  rounded. A session is one system message and then each simulation's messages, in order,
  nothing added: the next ticket's greeting follows the previous customer's last turn.
"""


def shapes(file: Mapping[str, Any], queue_calls: int
           ) -> list[tuple[str, list[dict[str, Any]], int, str, str]]:
    """A loaded results file's two corpus shapes: `(folder, sessions, renamed ids, shape,
    README line on the join)` for one session per simulation and for ticket queues."""
    domain, sims, order = file["domain"], file["simulations"], file["order"]
    corpus = f"tau2-{domain}-{re.sub(r'[^a-z0-9.]+', '-', str(file['model']).lower())}"

    def name(run: Mapping[str, Any]) -> str:
        return f"trial{run.get('trial', 0)}-task{order.get(run['task_id'], -1):03d}"

    tasks, renamed_tasks = [], 0
    for run in sims:
        ids = CallIds()
        tasks.append(_session(f"{corpus}/{name(run)}", run, file,
                              [{"role": "system", "content": file["system"]},
                               *agent_messages(run["messages"], ids)]))
        renamed_tasks += ids.renamed
    trials: dict[Any, list[Mapping[str, Any]]] = {}
    for run in sims:
        trials.setdefault(run.get("trial", 0), []).append(run)
    joined, renamed_queues = join_queues(
        trials, calls=lambda r: sum(m["role"] == "assistant" for m in r["messages"]),
        parts=lambda total: round(total / queue_calls),
        system=lambda _r: str(file["system"]),
        messages=lambda r, ids: agent_messages(r["messages"], ids),
        name=lambda _t, q, group: (f"{corpus}-queue/{name(group[0])}-"
                                   f"{name(group[-1]).split('-')[1]}-q{q}"),
    )
    queues = [_session(sid, {}, file, messages) for sid, messages in joined]
    return [
        (corpus, tasks, renamed_tasks, "one session per simulation", JOIN_TASKS),
        (f"{corpus}-queue", queues, renamed_queues, "ticket-queue sessions",
         JOIN_QUEUE.format(queue_calls=queue_calls)),
    ]


def convert(results: Sequence[Path], repo: Path, out: Path, *,
            queue_calls: int = 300) -> dict[str, int]:
    source = Source(repo)
    written = {}
    for path in results:
        file = load(path, source)
        user_tools = sum(1 for r in file["simulations"] for m in r["messages"]
                         if (m["role"] == "user" and m.get("tool_calls"))
                         or (m["role"] == "tool" and m.get("requestor") == "user"))
        rev_note = ("the recorded commit" if file["rev"] == file["recorded"] else
                    "the recorded commit is not in the source read; this is the readable "
                    "commit nearest the file's date")
        for folder, sessions, renamed, shape, join in shapes(file, queue_calls):
            total = sum(len(m.get("tool_calls") or ()) for s in sessions for m in s["messages"])
            readme = README.format(
                domain=file["domain"], shape=shape, path=file["path"], source=SOURCE,
                stats=corpus_stats(sessions), model=file["model"],
                user_model=file["user_model"], recorded=file["recorded"], rev=file["rev"],
                rev_note=rev_note, system_chars=len(file["system"]),
                n_tools=len(file["tools"]), user_tools=user_tools, renamed=renamed,
                total_calls=total, join=join)
            written[folder] = write_corpus(out / folder, sessions, readme)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="tau2-bench results files")
    parser.add_argument("--repo", type=Path, required=True,
                        help="tau2-bench checkout or git directory (prompt and tools)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/tau2"))
    parser.add_argument("--queue-calls", type=int, default=300)
    args = parser.parse_args(argv)
    run_conversion(parser, args.repo, args.out, lambda: convert(
        args.results, args.repo, args.out, queue_calls=args.queue_calls))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
