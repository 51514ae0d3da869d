"""A reading task (no call of the agent since its statement passes a text of lines, and it
reads files with numbered lines, `     12→code`) keeps its outputs as digests, out of the
mask batches: it ends in a prose report naming what it read, as a delegated sub-agent's
final answer does (`stages/compress._reading_task`). A task that writes is masked as
before."""

from __future__ import annotations

import json
from typing import Any

from gateway.context.engine import CallContext, ContextEngine


def _arrow(code: list[str]) -> str:
    return "\n".join(f"{i + 1:6d}→{line}" for i, line in enumerate(code))


def _module(k: int) -> str:
    """A made-up C source file of module `k` as a file reader prints it."""
    code = [f"/* ring_{k}.c: the ring buffer of sampler {k} */", "#include <stddef.h>", ""]
    for i in range(30):
        code += [f"/* Pushes sample {i} of module {k}; returns 0 on success, -1 when full. */",
                 f"int ring_{k}_push_{i}(ring_{k}_t* rb, double sample_{i}) {{",
                 f"    if (rb->head_index == RING_{k}_CAPACITY) return -1;",
                 f"    rb->sample_store[rb->head_index++] = sample_{i} * {k + 2}.5;",
                 "    return 0;", "}", ""]
    return _arrow(code)


def _call(k: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{k}", "type": "function",
         "function": {"name": name, "arguments": json.dumps(args)}}]}


def _session(files: int, write_at: int | None = None) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools to read files."},
        {"role": "user", "content": "Review every ring buffer module under src/ and report "
                                    "which push functions can overflow, file by file."}]
    for k in range(files):
        if k == write_at:  # an edit: the agent passes a text of lines
            messages.append(_call(k, "edit", {"file_path": f"/src/ring_{k - 1}.c",
                                              "new_text": "if (full)\n    return -1;"}))
            messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": "ok"})
            continue
        messages.append(_call(k, "read", {"file_path": f"/src/ring_{k}.c"}))
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": _module(k)})
    return messages


async def _replay(engine: ContextEngine, messages: list[dict[str, Any]],
                  sid: str) -> tuple[set[int], list[dict[str, Any]]]:
    """The tool outputs some call of the session forwarded as a placeholder, and the last
    call's forwarded messages."""
    masked: set[int] = set()
    forwarded: list[dict[str, Any]] = []
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end]},
                                  CallContext("t-reading", "s", {"x-ctxgate-session-id": sid}))
        forwarded = fitted.body["messages"]
        for m in forwarded:
            if m["role"] == "tool" and str(m.get("content")).startswith("[ctxgate: omitted"):
                masked.add(int(m["tool_call_id"].split("_")[1]))
    return masked, forwarded


async def test_a_reading_tasks_reads_stay_digests(engine: ContextEngine) -> None:
    messages = _session(40)
    masked, forwarded = await _replay(engine, messages, "reading-task")
    assert not masked
    # the oldest read is a digest on the last call, still naming its module's functions
    first = str(forwarded[3]["content"])
    assert len(first) < len(messages[3]["content"]) and "ring_0_push" in first, first


async def test_a_task_that_writes_is_masked_as_before(engine: ContextEngine) -> None:
    masked, _ = await _replay(engine, _session(40, write_at=3), "writing-task")
    assert masked
