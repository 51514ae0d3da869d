"""The stub upstream's Responses API and Anthropic Messages API, refusing what they refuse.

Refused with the real APIs' status and envelope: a function/custom tool output whose call is
not in the input, a call with no output, a `reasoning` item with no item after it, a
reasoning item or `thinking` block whose signed content was edited (the stub signs what it
emits), a `tool_result` that answers no `tool_use` of the message before it, a `tool_use`
not answered in the next message, more than 4 `cache_control` breakpoints, and (Messages) a
first message that is not the user's.

Answers by model: `stub-agent-N` (or any name with `agent-N` in it) asks for a tool call
(after a reasoning item / thinking block) until the request carries the output of step N-1,
then answers in text; any other model echoes the last text. Usage reports the request's size
(characters / 4) as input tokens, times P/100 for a model named with `skew-P` (a provider
whose tokenizer counts differently).
"""

from __future__ import annotations

import hashlib
import re
import time
from typing import Any

import orjson

Reply = tuple[int, dict[str, Any]]


def sign(text: str) -> str:
    return "stub:" + hashlib.sha256(text.encode()).hexdigest()[:24]


def _steps(model: str) -> int | None:
    found = re.search(r"agent-(\d+)", model)
    return int(found[1]) if found else None


def _tool_call(tools: Any, step: int) -> tuple[str, dict[str, Any]]:
    """A harmless command with a long output, in the shape of the client's own shell tool
    (Codex: `exec_command` / `shell_command` / `shell`; Claude Code: `Bash`), else `shell`."""
    command = f"seq {step} {step + 1500}"
    names = {str(t.get("name")) for t in tools or () if isinstance(t, dict)}
    if "exec_command" in names:
        return "exec_command", {"cmd": command}
    if "shell_command" in names:
        return "shell_command", {"command": command}
    if "Bash" in names:
        return "Bash", {"command": command, "description": f"step {step}"}
    if any(isinstance(t, dict) and t.get("name") == "shell" and "command" in (
            t.get("parameters") or {}).get("properties", {}) for t in tools or ()):
        return "shell", {"command": ["bash", "-lc", command]}
    return "shell", {"cmd": f"step {step}"}


def _size(body: dict[str, Any]) -> int:
    skew = re.search(r"skew-(\d+)", str(body.get("model", "")))
    return len(orjson.dumps(body)) // 4 * (int(skew[1]) if skew else 100) // 100


# --- Responses -----------------------------------------------------------------------------

def _openai_error(message: str, param: str | None = None) -> Reply:
    return 400, {"error": {"message": message, "type": "invalid_request_error",
                           "param": param, "code": None}}


def responses_refusal(body: dict[str, Any]) -> Reply | None:
    items = body.get("input")
    if not isinstance(items, list):
        return None
    chained = body.get("previous_response_id") or body.get("conversation")
    calls: dict[str, str] = {}
    answered: set[str] = set()
    for index, item in enumerate(items):
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind in ("function_call", "custom_tool_call"):
            calls[item["call_id"]] = kind
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if call_id not in calls and not chained:
                return _openai_error(f"No tool call found for {kind} with call_id {call_id}.",
                                     f"input[{index}]")
            answered.add(call_id)
        elif kind == "reasoning":
            if index + 1 >= len(items):
                return _openai_error(f"Item '{item.get('id')}' of type 'reasoning' was "
                                     "provided without its required following item.",
                                     f"input[{index}]")
            encrypted = item.get("encrypted_content") or ""
            summary = "".join(p.get("text", "") for p in item.get("summary") or ())
            if encrypted.startswith("stub:") and encrypted != sign(summary):
                return _openai_error("The encrypted content could not be verified.",
                                     f"input[{index}]")
    for call_id in calls:
        if call_id not in answered and not chained:
            return _openai_error(f"No tool output found for function call {call_id}.")
    return None


def _step_after(call_ids: list[Any]) -> int:
    """The step after the latest one answered (call ids end in `_<step>`); older outputs may
    have been compacted away, the latest one never is."""
    steps = [int(str(c).rsplit("_", 1)[1]) for c in call_ids
             if str(c).rsplit("_", 1)[-1].isdigit()]
    return max(steps) + 1 if steps else 0


def _outputs(body: dict[str, Any]) -> int:
    items = body.get("input")
    return _step_after([item.get("call_id") for item in items if isinstance(item, dict)
                        and item.get("type") in ("function_call_output",
                                                 "custom_tool_call_output")]
                       ) if isinstance(items, list) else 0


def _last_text(body: dict[str, Any]) -> str:
    items = body.get("input")
    if isinstance(items, str):
        return items
    for item in reversed(items or []):
        content = item.get("content", item.get("output"))
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def response_object(body: dict[str, Any]) -> dict[str, Any]:
    model = str(body.get("model", ""))
    steps, done = _steps(model), _outputs(body)
    stamp = int(time.time() * 1000)
    output: list[dict[str, Any]]
    if steps is not None and done < steps:
        thought = f"I should run step {done}."
        name, arguments = _tool_call(body.get("tools"), done)
        output = [
            {"type": "reasoning", "id": f"rs_{stamp}_{done}", "summary": [
                {"type": "summary_text", "text": thought}], "encrypted_content": sign(thought)},
            {"type": "function_call", "id": f"fc_{stamp}_{done}", "call_id": f"call_{done}",
             "name": name, "arguments": orjson.dumps(arguments).decode(),
             "status": "completed"}]
    else:
        output = [{"type": "message", "id": f"msg_{stamp}", "role": "assistant",
                   "status": "completed", "content": [
                       {"type": "output_text", "text": f"echo: {_last_text(body)[:200]}",
                        "annotations": []}]}]
    return {"id": f"resp_{stamp}", "object": "response", "created_at": stamp // 1000,
            "status": "completed", "model": model, "output": output,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools") or [],
            "usage": {"input_tokens": _size(body), "output_tokens": 5,
                      "total_tokens": _size(body) + 5,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


def response_events(response: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The stream of one Response: created, in_progress, each item added/done, completed."""
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": pending}),
        ("response.in_progress", {"response": pending})]
    for index, item in enumerate(response["output"]):
        events.append(("response.output_item.added", {"output_index": index, "item": item}))
        if item["type"] == "message":
            text = item["content"][0]["text"]
            for start in range(0, len(text), 16):
                events.append(("response.output_text.delta", {
                    "output_index": index, "content_index": 0, "item_id": item["id"],
                    "delta": text[start:start + 16], "logprobs": []}))
            events.append(("response.output_text.done", {
                "output_index": index, "content_index": 0, "item_id": item["id"],
                "text": text, "logprobs": []}))
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    events.append(("response.completed", {"response": response}))
    return [(name, {"type": name, "sequence_number": n, **data})
            for n, (name, data) in enumerate(events)]


# --- Messages ------------------------------------------------------------------------------

def _anthropic_error(message: str) -> Reply:
    return 400, {"type": "error", "error": {"type": "invalid_request_error",
                                            "message": message}}


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _breakpoints(body: dict[str, Any]) -> int:
    blocks = [*_blocks(body.get("system")), *(body.get("tools") or [])]
    for message in body.get("messages") or ():
        for block in _blocks(message.get("content")):
            blocks.append(block)
            blocks += _blocks(block.get("content"))
    return sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)


def messages_refusal(body: dict[str, Any]) -> Reply | None:
    if not isinstance(body.get("max_tokens"), int):
        return _anthropic_error("max_tokens: Field required")
    if _breakpoints(body) > 4:
        return _anthropic_error("A maximum of 4 blocks with cache_control may be provided. "
                                f"Found {_breakpoints(body)}.")
    messages = body.get("messages") or []
    if messages and messages[0].get("role") != "user":
        return _anthropic_error('messages: first message must use the "user" role')
    for m, message in enumerate(messages):
        blocks = _blocks(message.get("content"))
        uses = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        for b, block in enumerate(blocks):
            if block.get("type") == "thinking" and block.get("signature", "").startswith(
                    "stub:") and block["signature"] != sign(block.get("thinking", "")):
                return _anthropic_error(f"messages.{m}.content.{b}: Invalid `signature` in "
                                        "`thinking` block")
            if block.get("type") == "tool_result":
                before = _blocks(messages[m - 1].get("content")) if m > 0 else []
                if block.get("tool_use_id") not in {u.get("id") for u in before
                                                    if u.get("type") == "tool_use"}:
                    return _anthropic_error(
                        f"messages.{m}.content.{b}: unexpected `tool_use_id` found in "
                        "`tool_result` blocks. Each `tool_result` block must have a "
                        "corresponding `tool_use` block in the previous message.")
        if uses and m + 1 < len(messages):
            after = {b.get("tool_use_id") for b in _blocks(messages[m + 1].get("content"))
                     if b.get("type") == "tool_result"}
            missing = uses - after
            if missing:
                return _anthropic_error(
                    f"messages.{m}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(sorted(missing))}.")
    return None


def message_object(body: dict[str, Any]) -> dict[str, Any]:
    model = str(body.get("model", ""))
    messages = body.get("messages") or []
    results = _step_after([b.get("tool_use_id") for m in messages
                           for b in _blocks(m.get("content")) if b.get("type") == "tool_result"])
    steps = _steps(model)
    stamp = int(time.time() * 1000)
    if steps is not None and results < steps:
        thought = f"Step {results} next."
        name, arguments = _tool_call(body.get("tools"), results)
        content: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": thought, "signature": sign(thought)},
            {"type": "tool_use", "id": f"toolu_{stamp}_{results}", "name": name,
             "input": arguments}]
        stop = "tool_use"
    else:
        last = messages[-1].get("content") if messages else ""
        text = last if isinstance(last, str) else "".join(
            str(b.get("text", b.get("content", ""))) for b in _blocks(last))
        content = [{"type": "text", "text": f"echo: {text[:200]}"}]
        stop = "end_turn"
    return {"id": f"msg_{stamp}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": _size(body), "output_tokens": 7,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def message_events(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**message["usage"], "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": start}),
                                                ("ping", {})]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        empty = {"text": {"type": "text", "text": ""},
                 "thinking": {"type": "thinking", "thinking": "", "signature": ""},
                 "tool_use": {**block, "input": {}}}[kind]
        events.append(("content_block_start", {"index": index, "content_block": empty}))
        if kind == "text":
            for s in range(0, len(block["text"]), 16):
                events.append(("content_block_delta", {"index": index, "delta": {
                    "type": "text_delta", "text": block["text"][s:s + 16]}}))
        elif kind == "thinking":
            events.append(("content_block_delta", {"index": index, "delta": {
                "type": "thinking_delta", "thinking": block["thinking"]}}))
            events.append(("content_block_delta", {"index": index, "delta": {
                "type": "signature_delta", "signature": block["signature"]}}))
        else:
            events.append(("content_block_delta", {"index": index, "delta": {
                "type": "input_json_delta", "partial_json": orjson.dumps(
                    block["input"]).decode()}}))
        events.append(("content_block_stop", {"index": index}))
    events.append(("message_delta", {"delta": {"stop_reason": message["stop_reason"],
                                               "stop_sequence": None},
                                     "usage": {"output_tokens": message["usage"][
                                         "output_tokens"]}}))
    events.append(("message_stop", {}))
    return [(name, {"type": name, **data}) for name, data in events]


def sse(events: list[tuple[str, dict[str, Any]]]) -> list[bytes]:
    return [b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
            for name, data in events]
