"""What the converters of recorded agent runs share (`bench/taubench.py`,
`bench/tau2bench.py`): unique tool-call ids per output session, the corpora's invariants
checked before a session is written, ticket-queue cuts, a folder in the shared corpora's
JSONL format with its README, and reading a source repository's files from a checkout or a
bare/mirror git directory. The converted data is written outside the repository."""

from __future__ import annotations

import argparse
import itertools
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson

from gateway.context.needed import text_content

Message = dict[str, Any]
Run = TypeVar("Run")


class RepoReader:
    """Files of a source checkout (a work tree holding `marker`) or of a bare/mirror git
    directory, at `HEAD` or at a given commit (git only)."""

    def __init__(self, root: Path, marker: str) -> None:
        self.root = root
        self.git = not (root / marker).exists()

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(self.root), *args], check=True, capture_output=True,
            text=True,
        ).stdout

    def read(self, path: str, rev: str = "HEAD") -> str:
        return self._git("show", f"{rev}:{path}") if self.git else (self.root / path).read_text()

    def has(self, path: str, rev: str) -> bool:
        """Whether `path` can be read at `rev` (a work tree has only its own files)."""
        if not self.git:
            return (self.root / path).is_file()
        try:
            self._git("cat-file", "-e", f"{rev}:{path}")
        except subprocess.CalledProcessError:
            return False
        return True

    def commit(self) -> str | None:
        try:
            return self._git("rev-parse", "HEAD").strip() if self.git else None
        except subprocess.CalledProcessError:
            return None


class CallIds:
    """Tool-call ids unique within one output session: a repeated recorded id (gpt-4o reused
    some, within a run and across runs) gets `_N` appended (N counts the session's calls);
    its tool result follows the call it answers."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.count = 0
        self.renamed = 0

    def new(self, recorded: str | None) -> str:
        self.count += 1
        if not recorded or recorded in self.seen:
            self.renamed += 1
            recorded = f"{recorded or 'call'}_{self.count}"
            while recorded in self.seen:
                recorded += "_"
        self.seen.add(recorded)
        return recorded


def assistant_message(content: Any, calls: Iterable[tuple[str, str, str]], ids: CallIds,
                      renamed: dict[str, str]) -> Message:
    """An assistant message in the corpora's shape: its content and its `(recorded id, name,
    arguments)` calls as `{id, type, function}`, each id made unique by `ids` and the new id
    remembered in `renamed` under the recorded one (for the results that answer it)."""
    msg: Message = {"role": "assistant", "content": content}
    out = []
    for recorded, name, arguments in calls:
        new = renamed[recorded] = ids.new(recorded)
        out.append({"id": new, "type": "function",
                    "function": {"name": name, "arguments": arguments}})
    if out:
        msg["tool_calls"] = out
    return msg


def n_calls(messages: Sequence[Mapping[str, Any]]) -> int:
    """Calls of a conversation: the prefixes that end right before an assistant message."""
    return sum(1 for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0)


def split_points(calls: Sequence[int], parts: int) -> list[int]:
    """Indexes where a trial's runs are cut into `parts` queues: at the run boundary whose
    running total of calls is nearest each k/parts of the trial's calls."""
    total, running = sum(calls), [0]
    for c in calls:
        running.append(running[-1] + c)
    cuts = []
    for k in range(1, parts):
        target = total * k / parts
        cuts.append(min(range(1, len(calls)), key=lambda i: (abs(running[i] - target), i)))
    return sorted(set(cuts))


def queue_slices(
    trials: Mapping[Any, Sequence[Run]], calls: Callable[[Run], int],
    parts: Callable[[int], int],
) -> Iterator[tuple[Any, int, Sequence[Run]]]:
    """Per trial (its runs already in task order), `(trial, q, runs)` for each of the
    `parts(total calls of the trial)` queues it is cut into (`split_points`)."""
    for trial, group in sorted(trials.items()):
        counts = [calls(r) for r in group]
        bounds = [0, *split_points(counts, max(1, parts(sum(counts)))), len(group)]
        for q, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            yield trial, q, group[lo:hi]


def check(session: Mapping[str, Any]) -> None:
    """The corpora's invariants: each tool message answers a call of the assistant message
    right before it (or its run of tool messages), every call is answered, ids unique."""
    msgs, open_ids, seen = session["messages"], [], set()
    for m in msgs:
        if m["role"] == "tool":
            if m["tool_call_id"] not in open_ids:
                raise ValueError(f"{session['id']}: tool message answers no open call")
            open_ids.remove(m["tool_call_id"])
            continue
        if open_ids:
            raise ValueError(f"{session['id']}: unanswered call {open_ids}")
        for call in m.get("tool_calls") or ():
            if call["id"] in seen:
                raise ValueError(f"{session['id']}: repeated call id {call['id']}")
            seen.add(call["id"])
            open_ids.append(call["id"])
    if open_ids:
        raise ValueError(f"{session['id']}: unanswered call at the end")


def write_corpus(folder: Path, sessions: Iterable[dict[str, Any]], readme: str) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for s in sessions:
        check(s)
        lines.append(orjson.dumps(s))
    (folder / "sessions.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (folder / "README.md").write_text(readme)
    return len(lines)


def write_runs_and_queues(
    out: Path, corpus: str, run_sessions: Sequence[dict[str, Any]],
    queue_sessions: Sequence[dict[str, Any]], readme: str, joins: tuple[str, str],
    **fields: Any,
) -> dict[str, int]:
    """The two folders of a converted source: `<corpus>` (one session per run) and
    `<corpus>-queue` (task queues), each with its README: `readme` formatted with `shape`,
    `stats` (`corpus_stats`), `join` (`joins`: the runs', the queues' line) and `fields`.
    Returns the sessions written per folder."""
    written = {}
    for folder, sessions, shape, join in (
            (corpus, run_sessions, "one session per task", joins[0]),
            (f"{corpus}-queue", queue_sessions, "task-queue sessions", joins[1])):
        text = readme.format(shape=shape, stats=corpus_stats(sessions), join=join, **fields)
        written[folder] = write_corpus(out / folder, sessions, text)
    return written


def corpus_stats(sessions: Sequence[Mapping[str, Any]]) -> str:
    """One line for a README: sessions, calls per session, characters of full history."""
    calls = sorted(n_calls(s["messages"]) for s in sessions)
    chars = sorted(
        sum(len(text_content(m.get("content")))
            + (len(orjson.dumps(m["tool_calls"])) if m.get("tool_calls") else 0)
            for m in s["messages"])
        for s in sessions
    )
    return (f"{len(sessions)} sessions; calls per session min / median / max "
            f"{calls[0]} / {calls[len(calls) // 2]} / {calls[-1]}; characters of full history "
            f"(contents + tool-call JSON) min / median / max {chars[0]:,} / "
            f"{chars[len(chars) // 2]:,} / {chars[-1]:,}")


def join_queues(
    trials: Mapping[Any, Sequence[Run]], *, calls: Callable[[Run], int],
    parts: Callable[[int], int], system: Callable[[Run], str | None],
    messages: Callable[[Run, CallIds], list[Message]],
    name: Callable[[Any, int, Sequence[Run]], str],
) -> tuple[list[tuple[str, list[Message]]], int]:
    """Ticket queues: per trial (its runs in task order), the runs of each queue
    (`queue_slices`) joined into one conversation, the system prompt once (every run of it
    must have the same; checked; `None` for runs recorded without one: no system message),
    then each run's messages after its system prompt, in order, nothing added. Returns
    `(session id, messages)` pairs and how many call ids were renamed."""
    out, renamed = [], 0
    for trial, q, group in queue_slices(trials, calls, parts):
        ids = CallIds()
        prompt = system(group[0])
        joined: list[Message] = [] if prompt is None else [{"role": "system", "content": prompt}]
        for run in group:
            if system(run) != prompt:
                raise ValueError(f"{name(trial, q, group)}: another system prompt")
            joined += messages(run, ids)
        out.append((name(trial, q, group), joined))
        renamed += ids.renamed
    return out, renamed


def per_call_queues(
    by_name: Mapping[str, Sequence[dict[str, Any]]], *,
    size: Callable[[Mapping[str, Any]], int], parts: Callable[[int], int],
    name: Callable[[str, int], str],
) -> list[dict[str, Any]]:
    """Queues of per-call runs (sessions with `calls`, one system prompt per group):
    `join_queues` of each group's runs, then per call the earlier runs' chats (each run's
    `messages` after its system prompt) before the call's own list after its system prompt,
    nothing added; the last call with its reply is the joined chat."""
    joined, _ = join_queues(
        by_name, calls=size, parts=parts, system=lambda r: str(r["messages"][0]["content"]),
        messages=lambda r, _ids: list(r["messages"][1:]),
        name=lambda key, q, _g: name(key, q))
    out = []
    for (sid, messages), (_, _, group) in zip(joined, queue_slices(by_name, size, parts),
                                              strict=True):
        per_call, before = [], [messages[0]]
        for r in group:
            per_call += [{**c, "messages": before + c["messages"][1:]} for c in r["calls"]]
            before = before + r["messages"][1:]
        assert before == messages  # the last call and its reply are the joined chat
        out.append({**group[0], "id": sid, "path": None, "messages": messages,
                    "calls": per_call})
    return out


def prompt_queues(
    runs: Sequence[dict[str, Any]], queue_calls: int, *, corpus: str,
    size: Callable[[Mapping[str, Any]], int], key: Callable[[str, int], str],
) -> list[dict[str, Any]]:
    """Per-call runs of one system prompt one after another: the runs grouped by their
    first message (in order of first appearance), each group named `key(prompt, index)`
    and cut into queues of about `queue_calls` calls (`per_call_queues`)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault(str(r["messages"][0]["content"]), []).append(r)
    by_name = {key(prompt, i): group for i, (prompt, group) in enumerate(groups.items())}
    return per_call_queues(by_name, size=size, parts=lambda total: round(total / queue_calls),
                           name=lambda name, q: f"{corpus}-queue/{name}/q{q:02d}")


def chained_runs(
    reader: RepoReader, rev: str, *, source: str, min_calls: int,
    load: Callable[[RepoReader, str], tuple[Sequence[Any], Counter[str]]],
    chain: Callable[[Sequence[Any]], list[list[int]]],
) -> tuple[Sequence[Any], list[list[int]], dict[str, Any]]:
    """A per-call converter's reading: the calls `load` finds at `rev`, chained into runs
    (`chain`: lists of call indexes), those of `min_calls` calls or more kept (an error when
    none is). Returns the calls, the kept runs and the README fields every such converter
    fills (source, commit, counts, what was left out and why)."""
    commit = reader._git("rev-parse", rev).strip()
    calls, left = load(reader, rev)
    runs = chain(calls)
    kept = [r for r in runs if len(r) >= min_calls]
    if not kept:
        raise ValueError(f"{reader.root}@{rev}: no run of {min_calls} calls or more")
    return calls, kept, {
        "source": source, "commit": commit, "calls": len(calls), "runs_all": len(runs),
        "runs": len(kept), "min_calls": min_calls, "single": len(runs) - len(kept),
        "left": ", ".join(f"{why} {n:,}" for why, n in left.most_common()),
    }


def git_commit(repo: Path, rev: str) -> tuple[RepoReader, str]:
    """A converter's reader of the git directory `repo` and the full commit `rev` names: the
    per-call converters read one commit, so a checkout will not do."""
    reader = RepoReader(repo, "README.md")
    if not reader.git:
        raise ValueError(f"{repo}: a git directory is needed")
    return reader, reader._git("rev-parse", rev).strip()


def convert_per_call(
    repo: Path, out: Path, rev: str, queue_calls: int, *, corpus: str, none: str,
    load: Callable[[RepoReader, str], tuple[Sequence[Mapping[str, Any]], Counter[str]]],
    session: Callable[[Mapping[str, Any], int, str], dict[str, Any]], queue_key: str,
    readme: str, joins: tuple[str, str],
    fields: Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]] = lambda _runs: {},
    **constants: Any,
) -> dict[str, int]:
    """A per-call converter of one commit's chat files: the runs `load` reads at `rev` (an
    error naming `none` when there is no run), a session each (`session(run, index,
    commit)`), the runs of one system prompt one after another as queues of about
    `queue_calls` calls (`prompt_queues`, groups named `queue_key` + index), both folders
    written (`write_runs_and_queues`; the queues' join line formatted with `queue_calls`)
    with the per-call README fields, `fields(runs)` and `constants`."""
    reader, commit = git_commit(repo, rev)
    runs, left = load(reader, rev)
    if not runs:
        raise ValueError(f"{repo}@{rev}: no {none}")
    sessions = [session(r, i, commit) for i, r in enumerate(runs)]
    queues = prompt_queues(sessions, queue_calls, corpus=corpus, size=lambda r: len(r["calls"]),
                           key=lambda _prompt, i: f"{queue_key}{i:02d}")
    return write_runs_and_queues(
        out, corpus, sessions, queues, readme,
        (joins[0], joins[1].format(queue_calls=queue_calls)), commit=commit, runs=len(runs),
        **per_call_fields(runs, left), **fields(runs), **constants)


def per_call_fields(runs: Sequence[Mapping[str, Any]], left: Counter[str]) -> dict[str, str]:
    """The README fields of per-call runs (each with `calls`): calls per run min / median /
    max (`per_call`), and what was read and left out, most first (`left`)."""
    sizes = sorted(len(r["calls"]) for r in runs)
    return {"per_call": f"{sizes[0]} / {sizes[len(sizes) // 2]} / {sizes[-1]}",
            "left": "; ".join(f"{why} {n:,}" for why, n in left.most_common())}


def run_conversion(parser: argparse.ArgumentParser, source: Path, out: Path,
                   convert: Callable[[], Mapping[str, int]]) -> None:
    """A converter's command line around its `convert()`: a git error reading `source`
    exits through `parser` with git's message; each folder written is printed with its
    session count."""
    try:
        written = convert()
    except subprocess.CalledProcessError as exc:
        parser.error(f"reading {source}: {exc.stderr}")
    for name, count in written.items():
        print(f"{out / name}: {count} sessions")


def converter_main(argv: Sequence[str] | None, doc: str, source: str, out: str, rev: str,
                   queue_calls: int, convert: Callable[..., Mapping[str, int]]) -> int:
    """The command line of a converter that reads one commit of a git repository:
    `--repo`, `--out` (default `out`), `--rev` (default `rev`), `--queue-calls`; then
    `convert(repo, out, rev=, queue_calls=)` through `run_conversion`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True,
                        help=f"{source} git directory (or a checkout of --rev)")
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument("--rev", default=rev, help="commit holding the runs (git only)")
    parser.add_argument("--queue-calls", type=int, default=queue_calls)
    args = parser.parse_args(argv)
    run_conversion(parser, args.repo, args.out, lambda: convert(
        args.repo, args.out, rev=args.rev, queue_calls=args.queue_calls))
    return 0
