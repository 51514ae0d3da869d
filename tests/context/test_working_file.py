"""stages.base._on_working_file: an aged short output of a call that named the file the
agent's newest call names too goes whole, still counted as a digest. An exact-text editor
searches a header for its signatures, then renames them one `Edit` a call, each quoting a
line of the search: digested at the step that came mid-way, the lines left to rename were
gone (Claude Code runs, session 007: `vsla_error_t vsla_min(…);`). The edits'
acknowledgments, which name the file they changed, and the older reads of other files are
digested as before."""

from __future__ import annotations

import json
import uuid
from typing import Any

from gateway.context.engine import ContextEngine, FittedCall
from gateway.context.session import MemorySessionStore
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import drops_add_up, fit_each_call

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("Read", "Grep", "Edit")]
HEADER = "/home/u/proj/include/ops.h"
OPS = ("add", "sub", "scale", "hadamard", "matmul", "transpose", "reshape", "norm", "sum",
       "max", "min", "mean")
# a search prints each signature's first line; the edits quote it with the line after it
SIGNATURES = [f"err_t ops_{op}(tensor_t* out, const tensor_t* a, " for op in OPS]
GREP = "\n".join(SIGNATURES)
NEXT = "\n                 double k);"


def _call(k: int, name: str, args: dict[str, Any], content: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": "", "tool_calls": [{
                "id": f"call_{k:03d}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": f"call_{k:03d}", "content": content}]


def _source(k: int) -> str:
    return "\n".join(f"{i + 1:6}\u2192    total_{k}_{i} += weight[{i}] * value_{k}[{i % 7}];"
                     for i in range(60))


def _messages() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Edit files by exact text."},
        {"role": "user", "content": "Rename the basic API in include/ops.h with a _basic "
                                    "suffix; the unified API keeps the plain names."},
    ]
    for k in range(12):
        messages += _call(k, "Read", {"file_path": f"/home/u/proj/src/part_{k}.c"}, _source(k))
    messages += _call(12, "Grep", {"pattern": "^err_t ops_", "path": HEADER,
                                   "output_mode": "content"}, GREP)
    for n, line in enumerate(SIGNATURES):
        new = line.replace("(", "_basic(", 1) + NEXT
        messages += _call(13 + n, "Edit", {"file_path": HEADER, "old_string": line + NEXT,
                                           "new_string": new},
                          f"The file {HEADER} has been updated. Here's the result of running "
                          f"`cat -n` on a snippet of the edited file:\n{40 + 3 * n:6}\u2192{new}")
    messages.append({"role": "assistant", "content": "Renamed all twelve."})
    return messages


async def _fits(settings: Settings, embedder: Any) -> tuple[list[dict[str, Any]],
                                                           list[FittedCall]]:
    engine = ContextEngine(settings, None, Metrics(), DropLog("/dev/null", "none", None),
                           embedder, sessions=MemorySessionStore())
    messages = _messages()
    fits = await fit_each_call(engine, messages, TOOLS, "t-working", uuid.uuid4().hex)
    assert all(drops_add_up(fit) for fit in fits)
    return messages, fits


def _content(fit: FittedCall, call_id: str) -> str | None:
    return next((str(m["content"]) for m in fit.body["messages"]
                 if m.get("tool_call_id") == call_id), None)


async def test_a_search_of_the_file_being_edited_goes_whole(settings: Settings,
                                                             embedder: Any) -> None:
    messages, fits = await _fits(settings, embedder)
    sent = {m["tool_call_id"]: str(m["content"]) for m in messages if m["role"] == "tool"}
    # a step while the agent edits the header: the reads before the search are digested,
    # so is an edit's acknowledgment after it, which names the file it changed
    stepped = [fit for fit in fits
               if _content(fit, "call_011") not in (None, sent["call_011"])
               and not str(_content(fit, "call_011")).startswith("[ctxgate:")
               and _content(fit, "call_014") not in (None, sent["call_014"])]
    assert stepped
    for fit in stepped:  # the search goes whole: every signature left to rename
        assert _content(fit, "call_012") == GREP
    # and never as a digest: whole, until the digests' batch masks it with its neighbours
    assert all(_content(fit, "call_012") in (None, GREP)
               or str(_content(fit, "call_012")).startswith("[ctxgate:") for fit in fits)
