"""AutoCodeRover's recorded runs as corpus folders `bench/replay.py` reads.

AutoCodeRover (nus-apr, arXiv 2404.05427) is a coding agent with its own protocol: no API
tools. Its model (`gpt-4-0125-preview` in these runs) writes search-API calls in prose
(`search_class("SQLCompiler")`, `search_method_in_class("get_order_by", "SQLCompiler")`),
a second model call turns them into JSON (the "proxy"), and the search results come back as
**user** messages (`Result of search_class("SQLCompiler"): ...`) between the harness's own
prompts ("Let's analyze collected context first", "Based on your analysis, answer below
questions: ..."). After the search it writes a patch in a `<file>/<original>/<patched>`
format and is told when the edit did not apply (up to three tries).

The public repository `nus-apr/auto-code-rover` holds its SWE-bench Lite runs under
`results/<run>/<outcome>/<task>_<time>/`: `conversation_round_N.json` (the search
conversation after round N, each extending the last) and `debug_agent_write_patch_K.json`
(the same conversation continued by the patch-writing turns, attempt K extending attempt
K-1). A run's session is the longest of these: the last patch attempt, else the last round.
The proxy calls (`agent_proxy_N.json`) are separate one-shot requests and are left out.

This converter reads them from a checkout or a mirror/bare git directory (`--repo`) and
writes, outside the repository,

- `<out>/acr-<run>/sessions.jsonl`: every task of the run as its own session;
- `<out>/acr-<run>-queue/sessions.jsonl`: the run's tasks one after another in one
  conversation (task-id order), cut at the task boundaries nearest each 1/N of the calls,
  N = calls / `--queue-calls` rounded (`bench.chat_corpus.join_queues`);

each with a `README.md` saying where it came from and how it was converted:

    python -m bench.autocoderover --repo /work/.mirror/nus-apr+auto-code-rover/repo \\
        --out /tmp/acr --run acr-run-1

`--run` as often as wanted: `acr-run-1`, `acr-run-2` and `acr-run-3` are three runs of the
same configuration; `acr-val-only` adds validation of each patch by the project's tests (a
user turn says the patch applied but tests failed, and the agent tries again) and
`acr-val-sbfl` adds to that a spectrum-based fault localisation's top-5 suspicious methods
in a user turn before the search.
"""

from __future__ import annotations

import argparse
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
    run_conversion,
    write_runs_and_queues,
)
from bench.toolathlon import TOOL_CHARS, cut

SOURCE = "nus-apr/auto-code-rover"
FILE = re.compile(r"(conversation_round|debug_agent_write_patch)_(\d+)\.json")
TASK_DIR = re.compile(r"(.+)_\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}")


def session_file(names: Sequence[str]) -> str | None:
    """The file of a task directory holding its whole conversation: the last patch attempt
    (`debug_agent_write_patch_K`, highest K), else the last search round."""
    best: dict[str, tuple[int, str]] = {}
    for name in names:
        match = FILE.fullmatch(name)
        if match and int(match[2]) >= best.get(match[1], (-1, ""))[0]:
            best[match[1]] = (int(match[2]), name)
    for kind in ("debug_agent_write_patch", "conversation_round"):
        if kind in best:
            return best[kind][1]
    return None


def agent_messages(recorded: Sequence[Mapping[str, Any]]) -> tuple[list[Message], int]:
    """A run's messages after its system prompt, as recorded (contents over `TOOL_CHARS`
    cut as the corpora cut tool results); returns them and how many were cut."""
    out: list[Message] = []
    cuts = 0
    for m in recorded[1:]:
        if m["role"] not in ("user", "assistant"):
            raise ValueError(f"unexpected role {m['role']!r}")
        content = str(m.get("content") or "")
        cuts += len(content) > TOOL_CHARS
        out.append({"role": m["role"], "content": cut(content)})
    return out, cuts


def load(repo: Path, run: str) -> tuple[list[dict[str, Any]], str | None]:
    """Every task of `run` in task-id order: `{task, path, outcome, messages}`; and the
    source's commit (a git directory's `HEAD`)."""
    reader = RepoReader(repo, "results")
    base = f"results/{run}"
    if reader.git:
        paths = reader._git("ls-tree", "-r", "--name-only", "HEAD", f"{base}/").split()
    else:
        paths = sorted(str(p.relative_to(repo)) for p in (repo / base).rglob("*.json"))
    dirs: dict[str, list[str]] = {}
    for path in paths:
        parts = path.split("/")
        if len(parts) == 5:  # results/<run>/<outcome>/<task dir>/<file>
            dirs.setdefault("/".join(parts[:4]), []).append(parts[4])
    tasks = []
    for folder, names in dirs.items():
        match = TASK_DIR.fullmatch(folder.rsplit("/", 1)[1])
        name = session_file(names)
        if not match or not name:
            continue
        messages = orjson.loads(reader.read(f"{folder}/{name}"))
        if not messages or messages[0]["role"] != "system":
            raise ValueError(f"{folder}/{name}: no system prompt first")
        tasks.append({"task": match[1], "path": f"{folder}/{name}",
                      "outcome": folder.split("/")[2], "messages": messages})
    tasks.sort(key=lambda t: (t["task"], t["path"]))
    return tasks, reader.commit()


def opening(content: str) -> str:
    """A user turn's kind: its first line up to the first `(`, `:` or `_`, at most 48
    characters (`Result of search_class("X"): ...` -> `Result of search`: every search API's
    results one kind)."""
    return re.split(r"[(:_]", content.split("\n", 1)[0], maxsplit=1)[0].strip()[:48]


def user_turn_kinds(tasks: Sequence[Mapping[str, Any]], top: int = 8) -> str:
    """README lines: the `top` commonest kinds of user turn after each task's issue (the
    harness's prompts, search results, checker and test feedback), with their count and
    share of those turns' characters."""
    count: Counter[str] = Counter()
    chars: Counter[str] = Counter()
    for t in tasks:
        for m in [m for m in t["messages"] if m["role"] == "user"][1:]:
            kind = opening(str(m.get("content") or ""))
            count[kind] += 1
            chars[kind] += len(str(m.get("content") or ""))
    total = max(sum(chars.values()), 1)
    return "\n".join(f"  - `{kind}`: {n} turns, {chars[kind] / total:.1%} of the characters"
                     for kind, n in count.most_common(top))


README = """# AutoCodeRover, {run}: {shape}

Converted by `bench/autocoderover.py` (ctxgate) from `results/{run}/*/*/` of {source} at
commit `{commit}`. Licence of the source: dual, the GNU Affero General Public License
(non-commercial use) or a commercial licence (its `LICENSE`). Used for measurement only;
not part of the ctxgate repository; do not commit it there.

{stats}.

- Every SWE-bench Lite task of AutoCodeRover's run `{run}` (model `gpt-4-0125-preview`),
  whatever its outcome; per task the file holding its whole conversation: the last patch
  attempt (`debug_agent_write_patch_K.json`, {patch} tasks), else the last search round
  (`conversation_round_N.json`, {rounds} tasks). The proxy calls are left out.
- Messages as recorded: the agent's own system prompt, its user turns (the issue, the
  harness's prompts, the search results, the patch checker's answers) and the model's
  replies. **No `tools`, no `tool_calls`, no `tool` messages**: the agent writes its search
  calls in prose and reads the results in user turns. Contents longer than {limit:,}
  characters keep their first two thirds and last third of that budget with
  `[... N characters cut ...]` between ({cuts} of {msgs}).
- The commonest user turns after each task's issue, by their opening words (what the run's
  configuration adds shows here: test verdicts, fault-localisation output):
{kinds}
{join}"""

JOIN_RUNS = "- One session per task, as recorded.\n"
JOIN_QUEUE = """- Task queues: the run's tasks in task-id order, cut at the task boundaries nearest
  each 1/N of the calls, N = calls / {queue_calls} rounded. A session is the system prompt
  (the same for every task) and then each task's messages after it, in order, nothing
  added: the next task's issue follows the previous task's last message.
"""


def convert(repo: Path, out: Path, run: str, *, queue_calls: int = 300) -> dict[str, int]:
    tasks, commit = load(repo, run)
    corpus = f"acr-{run.removeprefix('acr-')}"

    def session(sid: str, path: str, task: str | None, messages: list[Message]
                ) -> dict[str, Any]:
        return {"id": sid, "source": f"{SOURCE}@{(commit or 'HEAD')[:7]}", "path": path,
                "agent": "coding, search APIs in prose (AutoCodeRover)",
                "model": "gpt-4-0125-preview", "task_id": task, "tools": [],
                "messages": messages}

    per_run, cuts = [], 0
    for t in tasks:
        messages, n_cut = agent_messages(t["messages"])
        cuts += n_cut
        per_run.append(session(f"{corpus}/{t['task']}", t["path"], t["task"],
                               [t["messages"][0], *messages]))
    joined, _ = join_queues(
        {0: tasks}, calls=lambda t: n_calls(t["messages"]),
        parts=lambda total: round(total / queue_calls),
        system=lambda t: t["messages"][0]["content"],
        messages=lambda t, _ids: agent_messages(t["messages"])[0],
        name=lambda _r, q, g: f"{corpus}-queue/{g[0]['task']}--{g[-1]['task']}-q{q}",
    )
    queues = [session(sid, f"results/{run}/*/*/", None, messages) for sid, messages in joined]
    common = {"run": run, "source": SOURCE, "commit": commit, "limit": TOOL_CHARS,
              "cuts": cuts, "msgs": sum(len(t["messages"]) - 1 for t in tasks),
              "patch": sum("write_patch" in t["path"] for t in tasks),
              "rounds": sum("conversation_round" in t["path"] for t in tasks),
              "kinds": user_turn_kinds(tasks)}
    return write_runs_and_queues(out, corpus, per_run, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **common)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True,
                        help=f"{SOURCE} checkout or git directory")
    parser.add_argument("--out", type=Path, default=Path("/tmp/acr"))
    parser.add_argument("--run", action="append", help="results/<run> (default: acr-run-1)")
    parser.add_argument("--queue-calls", type=int, default=300)
    args = parser.parse_args(argv)
    for run in args.run or ["acr-run-1"]:
        run_conversion(parser, args.repo, args.out, lambda run=run: convert(
            args.repo, args.out, run, queue_calls=args.queue_calls))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
