"""The adapters alone: a request's chat view, and a plan rendered back into the format."""

from __future__ import annotations

from typing import Any

from gateway.context.items import PINNED
from gateway.wire.messages import OMITTED
from gateway.wire.messages import build_view as messages_view
from gateway.wire.messages import render as render_messages
from gateway.wire.responses import build_view as responses_view
from gateway.wire.responses import render as render_responses

REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"}


def responses_body() -> dict[str, Any]:
    return {"model": "m", "instructions": "Be brief.", "prompt_cache_key": "conv-1", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "task"}]},      # 0
        REASONING,                                                                  # 1
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},  # 2
        {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},  # 3
        {"type": "function_call_output", "call_id": "a", "output": "out a"},        # 4
        {"type": "function_call_output", "call_id": "b", "output": "out b"},        # 5
        {"type": "item_reference", "id": "x"},                                      # 6
        {"type": "function_call_output", "call_id": "zz", "output": "orphan"},      # 7
        {"role": "user", "content": "next"},                                        # 8
    ], "store": False, "include": ["reasoning.encrypted_content"]}


def test_responses_view_groups_calls_with_their_reasoning() -> None:
    view = responses_view(responses_body())
    roles = [m["role"] for m in view.body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "opaque", "opaque", "user"]
    assert view.sources[2] == [1, 2, 3]  # reasoning travels with the calls after it
    calls = view.body["messages"][2]
    assert [c["id"] for c in calls["tool_calls"]] == ["a", "b"]
    assert calls["content"][0]["item"] == REASONING  # counted, never rewritten
    assert view.body["messages"][5][PINNED] and view.body["messages"][6][PINNED]
    assert view.session_key == "conv-1" and view.compact


def test_responses_render_changes_only_what_the_plan_changed() -> None:
    body = responses_body()
    view = responses_view(body)
    plan = [(0, None), (1, None), (5, None), (6, None), (7, "short")]  # calls + outputs gone
    out = render_responses(body, view, plan, "PLAYBOOK")
    assert out["input"] == [body["input"][0], body["input"][6], body["input"][7],
                            {"role": "user", "content": "short"}]
    assert out["instructions"] == "Be brief.\n\nPLAYBOOK"
    assert out["store"] is False and out["include"] == body["include"]  # unknown fields kept
    assert render_responses(body, view, None, None) == body


def test_responses_rewrite_keeps_the_part_type() -> None:
    body = {"model": "m", "input": [{"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "long", "annotations": []}]}, {"role": "user",
                                                                      "content": "q"}]}
    out = render_responses(body, responses_view(body), [(0, "s"), (1, None)], None)
    assert out["input"][0]["content"] == [{"type": "output_text", "text": "s",
                                           "annotations": []}]
    assert out.get("instructions") is None


def messages_body() -> dict[str, Any]:
    mark = {"cache_control": {"type": "ephemeral"}}
    return {"model": "c", "max_tokens": 9, "system": "sys", "messages": [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "one"}, {"type": "text", "text": "two", **mark},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "r1"},
            {"type": "text", "text": "and then"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "ok"}]},
        {"role": "user", "content": "last"}]}


def test_messages_view_splits_tool_results_and_pins_signed_turns() -> None:
    view = messages_view(messages_body())
    chat = view.body["messages"]
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool", "user",
                                         "assistant", "user"]
    assert chat[2]["content"] == "onetwo" and chat[2]["tool_calls"][0]["id"] == "t1"
    assert chat[3] == {"role": "tool", "tool_call_id": "t1", "content": "r1"}
    assert chat[5][PINNED]  # the latest turn with thinking
    assert PINNED not in chat[1]  # the task: the engine's to keep or digest, as in chat
    assert view.sources[3] == (2, (0,)) and view.sources[4] == (2, (1,))


def test_messages_render_opens_with_a_user_message_when_the_task_was_dropped() -> None:
    body = messages_body()
    view = messages_view(body)
    plan = [(0, None), (2, None), (3, None), (4, None), (5, None), (6, None)]  # no task
    out = render_messages(body, view, plan, None)
    assert out["messages"][0] == {"role": "user", "content": OMITTED}
    assert out["messages"][1:] == body["messages"][1:]


def test_messages_render_keeps_breakpoints_and_pairs() -> None:
    body = messages_body()
    view = messages_view(body)
    plan = [(0, None), (1, None), (2, "ONE"), (3, "R"), (4, None), (5, None), (6, None)]
    out = render_messages(body, view, plan, "PLAYBOOK")
    assert out["messages"][1]["content"] == [
        {"type": "text", "text": "ONE", "cache_control": {"type": "ephemeral"}},
        body["messages"][1]["content"][2]]
    assert out["messages"][2]["content"][0] == {"type": "tool_result", "tool_use_id": "t1",
                                                "content": "R"}
    assert out["system"] == [{"type": "text", "text": "sys"},
                             {"type": "text", "text": "PLAYBOOK"}]
    dropped = render_messages(body, view, [(0, None), (1, None), (4, None), (5, None),
                                           (6, None)], None)
    assert [m["role"] for m in dropped["messages"]] == ["user", "user", "assistant", "user"]
    assert dropped["messages"][1]["content"] == [{"type": "text", "text": "and then"}]
    assert dropped["system"] == "sys"
