"""Same output before and after a change that must not change behaviour: every call of every
corpus replayed through this checkout's engine and another checkout's, compared call by call.

Per call: SHA-256 of the forwarded messages, of the drop events and of the drop log's
lines (decisions form, without their `ts`), tokens before and after, the prefix-stable flag
and the fidelity signals of the turn that answered the previous call. Sessions: the shared
corpora found under `--corpora` (swe-agent, webchorearena, agentdojo, intercode), any other
JSONL corpus there (`/tmp/taubench`'s, from `bench/taubench.py`; a per-call corpus's sessions
call by call, each as its client sent it: `bench/corpora.py`), synthetic 3 × 100 + 1 × 300
calls, and the 300-call session again under a budget header of 60% of its last call
(over-budget steps, the ladder). Each checkout runs in its own child process (`--tree`),
both at once. `--fresh`: each call's body handed over decoded afresh from its JSON, as the
gateway hands over a body it does not resume (no message object shared with the last call's).
`--cache`: each call's body decoded from its JSON by the checkout's `BodyCache` as the chat
route decodes it (under a megabyte as on the loop, from a megabyte as on the fitting thread),
its lineage handed to the engine; each child prints how many calls came with one.
`--format messages|responses` (with `--cache`): each call converted to that wire format
(`bench/wire_convert.py`) and sent through the checkout's managed-route fitting
(`Fitting.prepare`: body cache, validation, the chat view built on from the last one,
the engine, the render, the encoding), a body of a megabyte or more on its fitting-thread
path (run in line, on the same engine); per call the forwarded bytes are compared.
`--prepare` (with `--cache`): chat calls through `Fitting.prepare` the same way (the
encoding of the fitted body included, as the chat route does it).
`--corpus NAME` (repeatable): only that corpus's sessions under `--corpora`.
`--budget F`: every call of a session under a budget header of F × its last call's tokens
(the budget ladder on every late call). With `--prepare`, each child prints how many
forwarded messages were fresh copies equal to one the session's last call forwarded
(`fresh equal copies`): what the body encoder's runs, which go by identity, encode anew.

    python -m bench.same_output --against DIR [--corpora DIR] [--corpus NAME] [--quick]
        [--fresh|--cache [--format messages|responses|--prepare]] [--budget F]
    python bench/same_output.py --child --tree DIR [--corpora DIR] [...]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve()
CORPORA = HERE.parents[2] / "shared" / "corpora"
MODEL = "gpt-4o-mini"


def _sessions(corpora: Path, quick: bool, only: list[str] | None = None,
              budget: float | None = None,
              ) -> list[tuple[str, list[dict[str, Any]], dict[str, str]]]:
    """(session name, calls, extra headers) for every session replayed (`only`: those of
    the corpora named, no synthetic ones; `budget`: each session under that share of its
    last call's tokens)."""
    from bench.corpora import CORPUS_NAMES, extra_jsonl, load, synthetic_session
    from gateway.context.items import parse_request
    from gateway.context.replay import calls_from_messages
    from gateway.context.tokens import TokenCounter

    counter = TokenCounter()

    def headers(calls: list[dict[str, Any]]) -> dict[str, str]:
        if budget is None or not calls:
            return {}
        tokens = parse_request(calls[-1], counter, "o200k_base").tokens
        return {"x-ctxgate-budget-tokens": str(max(1, int(budget * tokens)))}

    out = []
    # the shared corpora found under `corpora`, then any other JSONL corpus there (tau-bench's)
    shared = [name for name in CORPUS_NAMES if name != "synthetic" and (corpora / name).exists()]
    names = ("synthetic",) if quick else (*shared, *extra_jsonl(corpora), "synthetic")
    if only:
        names = tuple(only)
    for corpus in names:
        for session in load(corpus, corpora):
            calls = calls_from_messages(session.messages, MODEL) if session.calls is None \
                else [{"messages": sent, "model": MODEL} for sent, _ in session.calls]
            if session.tools:
                calls = [{**body, "tools": session.tools} for body in calls]
            out.append((f"{corpus}:{session.id}", calls, headers(calls)))
    if only:
        return out
    long = synthetic_session(0, 300)
    calls = calls_from_messages(long.messages, MODEL)
    out.append(("synthetic-300", calls, headers(calls)))
    out.append(("synthetic-300-budget", calls, {"x-ctxgate-budget-tokens": "12000"}))
    return out


def _sha(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value)).hexdigest()[:16]


def _cache_decoder() -> Any:
    """`decode(raw) -> (body, lineage)` as the checkout's chat route decodes a body: through
    its `BodyCache`, a body of a megabyte or more as on the fitting thread (`off_loop`, in
    a checkout that has it)."""
    import inspect

    from gateway.api.asgi import parse_json_object
    from gateway.api.bodies import MAX_BODY_BYTES, BodyCache
    from gateway.api.pieces import parse_large

    cache = BodyCache()
    off_loop: dict[str, Any] = ({"off_loop": True} if "off_loop" in inspect.signature(
        BodyCache.decode_traced).parameters else {})

    def decode(raw: bytes) -> tuple[dict[str, Any], Any]:
        if len(raw) >= MAX_BODY_BYTES:
            return cache.decode_traced("same", raw, parse_large, **off_loop)
        resumed = cache.resume_traced("same", raw)
        return resumed or cache.decode_traced("same", raw, parse_json_object)

    return decode


async def _child(corpora: Path, quick: bool, fresh: bool = False,
                 cached: bool = False, only: list[str] | None = None,
                 budget: float | None = None) -> list[list[Any]]:
    from gateway.context.engine import CallContext
    from gateway.context.replay import build_engine
    from gateway.errors import ContextBudgetExceeded
    from gateway.settings import Settings

    engine = build_engine(Settings())
    logged: list[dict[str, Any]] = []  # the drop log's lines of the current call
    engine.drop_log._emit = logged.extend  # type: ignore[method-assign]
    rows: list[list[Any]] = []
    decode = _cache_decoder() if cached else None
    proven = large = large_proven = 0
    try:
        for name, calls, extra in _sessions(corpora, quick, only, budget):
            headers = {"x-ctxgate-session-id": name, **extra}
            for n, body in enumerate(calls):
                call = CallContext("same", f"{name}-{n}", headers)
                if decode is not None:
                    raw = orjson.dumps(body)
                    body, lineage = decode(raw)
                    call = CallContext("same", f"{name}-{n}", headers, lineage)
                    after = lineage is not None and lineage.after is not None
                    proven += after
                    large += len(raw) >= 1 << 20
                    large_proven += after and len(raw) >= 1 << 20
                logged.clear()
                try:
                    fitted = await engine.fit(orjson.loads(orjson.dumps(body)) if fresh
                                              else body, call)
                except ContextBudgetExceeded as exc:
                    rows.append([name, n, "refused", exc.message])
                    continue
                signals = fitted.signals.to_log() if fitted.signals else None
                lines = [{k: v for k, v in line.items() if k != "ts"} for line in logged]
                rows.append([name, n, _sha(fitted.body["messages"]), _sha(fitted.drops),
                             _sha(lines),
                             fitted.tokens_before, fitted.tokens_after, fitted.prefix_stable,
                             signals])
    finally:
        if engine.embedder is not None:
            engine.embedder.close()
    if decode is not None:
        print(f"lineage: {proven} of {len(rows)} calls resumed; {large_proven} of the {large} "
              "of a megabyte or more", file=sys.stderr)
    return rows


def _fresh_copies(messages: list[Any], last: dict[int, tuple[Any, bytes]]) -> int:
    """How many of `messages` are an equal copy of one of the last call's (`last`, by id:
    the message, kept alive, and its JSON) which this call no longer forwards: the very
    message sent again as a new object. `last` becomes this call's."""
    now: dict[int, tuple[Any, bytes]] = {}
    fresh: list[Any] = []
    for m in messages:
        seen = last.get(id(m))
        if seen is not None and seen[0] is m:
            now[id(m)] = seen
        else:
            fresh.append(m)
    if fresh:
        gone = {data for key, (m, data) in last.items() if key not in now}
        for m in fresh:
            now[id(m)] = (m, orjson.dumps(m))
        count = sum(now[id(m)][1] in gone for m in fresh)
    else:
        count = 0
    last.clear()
    last.update(now)
    return count


class _InLine:
    """The fitting thread's part of `Fitting` run in line, on the same engine and loop (one
    session's calls fitted by one engine, as the gateway's store shares them): a body of a
    megabyte or more takes the thread's path (decoded by `parse_large`, `off_loop`)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    async def run(self, job: Any, deadline: Any) -> Any:
        return await job(self.engine)

    def let_go(self, box: list[Any]) -> None:
        box.clear()


async def _wire_child(corpora: Path, quick: bool, wire_name: str,
                      only: list[str] | None = None, budget: float | None = None,
                      ) -> list[list[Any]]:
    """Every call in `wire_name`'s form through the checkout's `Fitting.prepare`."""
    from bench.wire_convert import CONVERTERS
    from gateway.api.fitting import Fitting
    from gateway.api.route import Call
    from gateway.auth import Principal
    from gateway.context.replay import build_engine
    from gateway.settings import Settings
    from gateway.wire.chat import ChatCompletions
    from gateway.wire.messages import Messages
    from gateway.wire.responses import Responses

    wire = {"responses": Responses(), "messages": Messages(),
            "chat": ChatCompletions()}[wire_name]
    convert = CONVERTERS.get(wire_name, lambda body: body)
    engine = build_engine(Settings())
    logged: list[dict[str, Any]] = []
    engine.drop_log._emit = logged.extend  # type: ignore[method-assign]
    fitting = Fitting(engine, engine.metrics, 600.0, thread=_InLine(engine))  # type: ignore[arg-type]
    cache = fitting.bodies_of(wire)
    rows: list[list[Any]] = []
    proven = large = large_proven = 0
    copies = 0  # forwarded messages equal to one of the last call's, not the same object
    try:
        for name, calls, extra in _sessions(corpora, quick, only, budget):
            headers = {"x-ctxgate-session-id": name, **extra}
            last: dict[int, tuple[Any, bytes]] = {}  # the last call's messages, by id
            for n, chat in enumerate(calls):
                raw = orjson.dumps(convert(chat))
                call = Call(dict(headers), f"{name}-{n}", time.perf_counter(),
                            Principal("same", None))
                logged.clear()
                before = cache.resumed
                try:
                    prepared = await fitting.prepare(wire, raw, call)
                except Exception as exc:  # a refusal must be the same in both
                    rows.append([name, n, "raised", type(exc).__name__, str(exc)])
                    continue
                after = cache.resumed > before
                proven += after
                large += len(raw) >= 1 << 20
                large_proven += after and len(raw) >= 1 << 20
                fitted = prepared.fitted
                if fitted is not None:
                    copies += _fresh_copies(fitted.body["messages"], last)
                lines = [{k: v for k, v in line.items() if k != "ts"} for line in logged]
                rows.append([name, n, hashlib.sha256(prepared.forward).hexdigest()[:16],
                             prepared.task_class, _sha(lines)] + ([
                                 _sha(fitted.drops), fitted.tokens_before,
                                 fitted.tokens_after, fitted.prefix_stable,
                                 fitted.signals.to_log() if fitted.signals else None]
                                 if fitted is not None else [prepared.unmanaged]))
                call.fitted = fitted
                del prepared, fitted
                fitting.release(call)
    finally:
        if engine.embedder is not None:
            engine.embedder.close()
    print(f"lineage: {proven} of {len(rows)} calls resumed; {large_proven} of the {large} "
          f"of a megabyte or more; {fitting.views.extended} views built on", file=sys.stderr)
    small = fitting.encoder
    print(f"bodies' runs: {small.reused} reused, {small.encoded} encoded", file=sys.stderr)
    print(f"fresh equal copies: {copies}", file=sys.stderr)
    big = getattr(fitting, "large_encoder", None)  # this change's (none on older checkouts)
    if big is not None:
        print(f"large bodies' runs: {big.reused} reused, {big.encoded} encoded",
              file=sys.stderr)
    return rows


def _start(tree: Path, corpora: Path, quick: bool, fresh: bool = False,
           cached: bool = False, wire: str = "chat",
           only: list[str] | None = None, prepare: bool = False,
           budget: float | None = None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, str(HERE), "--child", "--tree", str(tree.resolve()),
            "--corpora", str(corpora.resolve())] + (["--quick"] if quick else []) + (
                ["--fresh"] if fresh else []) + (["--cache"] if cached else []) + (
                ["--format", wire]) + (["--prepare"] if prepare else []) + (
                ["--budget", str(budget)] if budget is not None else []) + [
                    arg for name in only or () for arg in ("--corpus", name)]
    return subprocess.Popen(argv, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": ""})


def _rows(process: subprocess.Popen[bytes], tree: Path) -> list[list[Any]]:
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"child in {tree} failed:\n{err.decode()[-3000:]}")
    for line in err.decode().splitlines():
        if line.startswith(("lineage: ", "bodies' runs: ", "large bodies' runs: ",
                            "fresh equal copies: ")):
            print(f"{tree}: {line}")
    rows: list[list[Any]] = orjson.loads(out)
    return rows


def compare(ours: list[list[Any]], theirs: list[list[Any]]) -> list[str]:
    """Each call whose record differs (at most 20 named), or a count mismatch."""
    diffs = [f"{a[0]} call {a[1]}: {a[2:]} != {b[2:]}"
             for a, b in zip(ours, theirs, strict=False) if a != b]
    if len(ours) != len(theirs):
        diffs.append(f"{len(ours)} calls here, {len(theirs)} there")
    return diffs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--tree", type=Path, default=HERE.parents[1])
    parser.add_argument("--against", type=Path)
    parser.add_argument("--corpora", type=Path, default=CORPORA)
    parser.add_argument("--quick", action="store_true", help="synthetic sessions only")
    parser.add_argument("--fresh", action="store_true",
                        help="each body decoded afresh from its JSON (no shared objects)")
    parser.add_argument("--cache", action="store_true",
                        help="each body decoded by the checkout's body cache, its lineage used")
    parser.add_argument("--format", choices=("chat", "messages", "responses"), default="chat",
                        help="with --cache: the wire format each call is sent in")
    parser.add_argument("--prepare", action="store_true",
                        help="with --cache: chat calls through Fitting.prepare (bytes compared)")
    parser.add_argument("--corpus", action="append", help="only this corpus (repeatable)")
    parser.add_argument("--budget", type=float,
                        help="each session under this share of its last call's tokens")
    args = parser.parse_args(argv)
    if (args.format != "chat" or args.prepare) and not args.cache:
        parser.error("--format and --prepare need --cache")
    if args.prepare and args.format != "chat":
        parser.error("--prepare is --format chat's")
    if args.child:
        sys.path.insert(0, str(args.tree))
        rows = asyncio.run(
            _wire_child(args.corpora, args.quick, args.format, args.corpus, args.budget)
            if args.format != "chat" or args.prepare
            else _child(args.corpora, args.quick, args.fresh, args.cache, args.corpus,
                        args.budget))
        sys.stdout.buffer.write(orjson.dumps(rows))
        return 0
    if args.against is None:
        parser.error("--against DIR is required")
    trees = [HERE.parents[1], args.against]
    children = [_start(tree, args.corpora, args.quick, args.fresh, args.cache, args.format,
                       args.corpus, args.prepare, args.budget) for tree in trees]
    ours, theirs = (_rows(p, t) for p, t in zip(children, trees, strict=True))
    diffs = compare(ours, theirs)
    sessions = len({row[0] for row in ours})
    print(f"{len(ours)} calls in {sessions} sessions; {len(diffs)} differ")
    for line in diffs[:20]:
        print("  " + line)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
