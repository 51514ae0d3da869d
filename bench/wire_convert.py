"""A chat request in the other two wire formats: OpenAI Responses and Anthropic Messages.

Used to replay the shared corpora (recorded as chat) in each format: the same session, the
same content, only the shape differs. Also a command, to write a corpus session as a file
that `ctxgate replay` reads:

    .venv/bin/python -m bench.wire_convert SESSION.json --to responses > session.json

Chat → Responses: leading system/developer messages become `instructions`, messages become
`message` items (text parts as `input_text` / `output_text`), tool calls `function_call`
items and tool messages `function_call_output` items. Chat → Messages: leading system
messages become `system`; assistant text and tool calls one message of `text` and `tool_use`
blocks; consecutive tool messages (and a user message right after them) one user message of
`tool_result` blocks (then text blocks). Tools are converted to each format's shape.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

SYSTEM_ROLES = ("system", "developer")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content or () if isinstance(p, Mapping))


def _leading_system(messages: list[Mapping[str, Any]]) -> tuple[str | None, int]:
    """The text of the leading system messages and how many there are."""
    n = 0
    while n < len(messages) and messages[n].get("role") in SYSTEM_ROLES:
        n += 1
    return ("\n\n".join(_text(m.get("content")) for m in messages[:n]) or None), n


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    return tool.get("function") or tool


def to_responses(body: Mapping[str, Any]) -> dict[str, Any]:
    messages = list(body["messages"])
    instructions, start = _leading_system(messages)
    items: list[dict[str, Any]] = []
    for m in messages[start:]:
        role = m.get("role")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"),
                          "output": _text(m.get("content"))})
            continue
        text = _text(m.get("content"))
        part = "output_text" if role == "assistant" else "input_text"
        if text or role != "assistant":
            items.append({"type": "message", "role": role, "content": [
                {"type": part, "text": text, **({"annotations": []}
                                                if role == "assistant" else {})}]})
        for call in m.get("tool_calls") or ():
            function = call.get("function") or {}
            items.append({"type": "function_call", "call_id": call.get("id"),
                          "name": function.get("name", ""),
                          "arguments": function.get("arguments", "")})
    out: dict[str, Any] = {"model": body.get("model") or "replay", "input": items}
    if instructions:
        out["instructions"] = instructions
    if body.get("tools"):
        out["tools"] = [{"type": "function", "name": f.get("name"),
                         "description": f.get("description", ""),
                         "parameters": f.get("parameters") or {}}
                        for f in map(_function, body["tools"])]
    if isinstance(body.get("max_tokens"), int):
        out["max_output_tokens"] = body["max_tokens"]
    return out


def _tool_input(arguments: Any) -> Any:
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str) else arguments
    except orjson.JSONDecodeError:
        return {"input": arguments}
    return value if isinstance(value, dict) else {"input": value}


def to_messages(body: Mapping[str, Any]) -> dict[str, Any]:
    messages = list(body["messages"])
    system, start = _leading_system(messages)
    out_messages: list[dict[str, Any]] = []
    for m in messages[start:]:
        role = m.get("role")
        text = _text(m.get("content"))
        if role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            blocks += [{"type": "tool_use", "id": c.get("id"),
                        "name": (c.get("function") or {}).get("name", ""),
                        "input": _tool_input((c.get("function") or {}).get("arguments"))}
                       for c in m.get("tool_calls") or ()]
            out_messages.append({"role": "assistant", "content": blocks or text})
            continue
        if role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.get("tool_call_id"),
                     "content": text}
            previous = out_messages[-1] if out_messages else None
            if previous is not None and previous["role"] == "user" and isinstance(
                    previous["content"], list) and all(
                    b["type"] == "tool_result" for b in previous["content"]):
                previous["content"].append(block)
            else:
                out_messages.append({"role": "user", "content": [block]})
            continue
        if role in SYSTEM_ROLES:  # a system message mid-session: as Claude Code sends them
            out_messages.append({"role": "system", "content": text})
            continue
        previous = out_messages[-1] if out_messages else None
        if previous is not None and previous["role"] == "user" and isinstance(
                previous["content"], list):  # a user turn right after tool results
            previous["content"].append({"type": "text", "text": text})
        else:
            out_messages.append({"role": "user", "content": text})
    out: dict[str, Any] = {"model": body.get("model") or "replay", "messages": out_messages}
    if system:
        out["system"] = system
    if body.get("tools"):
        out["tools"] = [{"name": f.get("name"), "description": f.get("description", ""),
                         "input_schema": f.get("parameters") or {"type": "object"}}
                        for f in map(_function, body["tools"])]
    if isinstance(body.get("max_tokens"), int):
        out["max_tokens"] = body["max_tokens"]
    return out


CONVERTERS = {"responses": to_responses, "messages": to_messages}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="a chat request, a list of them, or a "
                        "message list / .traj file as `ctxgate replay` reads it")
    parser.add_argument("--to", choices=sorted(CONVERTERS), required=True)
    args = parser.parse_args(argv)
    from gateway.context.replay import load_calls

    calls = load_calls(args.file)
    sys.stdout.write(orjson.dumps([CONVERTERS[args.to](c) for c in calls]).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
