"""An aged file listing with numbered lines (`     12→code`) keeps, when it is masked, the
names its top-level lines declare: the placeholder's preview holds none of a long file's
names, and the agent re-types the functions and types of a file it read long ago
(`stages/compress._masked_listing`, `summarize.declared`)."""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.summarize import declared


def _arrow(code: list[str]) -> str:
    return "\n".join(f"{i + 1:6d}→{line}" for i, line in enumerate(code))


def _header(k: int) -> list[str]:
    """A made-up C header of module `k`: a guard, a macro, a typedef'd struct, prototypes,
    and a function body whose indented statements call other names."""
    code = [f"#ifndef RING_{k}_H", f"#define RING_{k}_H", f"#define RING_{k}_CAPACITY 64", "",
            "typedef struct {", "    size_t head_index;", "    double* sample_store;",
            f"}} ring_{k}_t;", ""]
    for i in range(24):
        code += [f"/* Pushes sample {i} of module {k} into the ring; returns 0 on success. */",
                 f"int ring_{k}_push_{i}(ring_{k}_t* rb, double sample);"]
    code += ["", f"static int ring_{k}_full(const ring_{k}_t* rb) {{",
             f"    if (rb->head_index == RING_{k}_CAPACITY) {{", "        return 1;", "    }",
             f"    return helper_count_{k}(rb);", "}", "#endif"]
    return code


def test_declared_names_are_a_listings_top_level_declarations() -> None:
    names = declared(_arrow(_header(3)))
    assert names[:3] == ["RING_3_H", "RING_3_CAPACITY", "ring_3_t"]
    assert "ring_3_push_0" in names and "ring_3_push_23" in names and "ring_3_full" in names
    # an indented statement's call, a control statement and a field are no declarations
    assert "helper_count_3" not in names and "if" not in names and "head_index" not in names
    # text without the gutter declares nothing (grep -n lines, plain code)
    assert declared("int ring_push(ring_t* rb);\n12:int ring_pop(ring_t* rb);") == []


def _call(k: int) -> dict[str, Any]:
    args = json.dumps({"file_path": f"/src/include/ring_{k}.h"})
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{k}", "type": "function", "function": {"name": "read", "arguments": args}}]}


def _session(files: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Read files with the read tool."},
        {"role": "user", "content": "Port every ring buffer module to the new allocator."}]
    for k in range(files):
        messages.append(_call(k))
        messages.append({"role": "tool", "tool_call_id": f"call_{k}",
                         "content": _arrow(_header(k))})
    return messages


async def test_a_masked_listing_keeps_the_names_it_declares(engine: ContextEngine) -> None:
    messages = _session(40)
    headers = {"x-ctxgate-session-id": "listing-mask-names"}
    masked: dict[int, str] = {}
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end]},
                                  CallContext("t-lmn", "s", headers))
        for m in fitted.body["messages"]:
            text = str(m.get("content"))
            if m["role"] == "tool" and text.startswith("[ctxgate: omitted"):
                masked[int(m["tool_call_id"].split("_")[1])] = text
    assert masked  # old listings were masked on some call
    for k, text in masked.items():
        head, *rest = text.split("\n")
        assert re.fullmatch(r"\[ctxgate: omitted .*\]", head)
        # the names the file declares, its indented statements' calls not
        assert rest and f"ring_{k}_t" in rest[0] and f"ring_{k}_push_0" in rest[0], text
        assert f"helper_count_{k}" not in text
