"""The incremental SSE decoder and the stream collector, fed byte by byte."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway.upstream.sse import SSEDecoder
from gateway.wire.chat import ChatStreamCollector, response_of_completion

EVENTS = [b'{"a": 1}', b'{"b": "two\\nlines"}', b"[DONE]"]


def encode(separator: bytes) -> bytes:
    return b"".join(b"data: " + e + separator + separator for e in EVENTS)


def decode(chunks: list[bytes]) -> list[bytes]:
    decoder = SSEDecoder()
    out = [data for chunk in chunks for data in decoder.feed(chunk)]
    return out + list(decoder.flush())


@given(st.sampled_from([b"\n", b"\r\n", b"\r"]), st.lists(st.integers(1, 7), max_size=40))
def test_any_split_of_any_line_ending_yields_the_same_events(sep: bytes, cuts: list[int]) -> None:
    data, chunks, at = encode(sep), [], 0
    for cut in cuts:
        chunks.append(data[at:at + cut])
        at += cut
    chunks.append(data[at:])
    assert decode(chunks) == EVENTS


def test_comments_and_other_fields_are_ignored_and_multiline_data_joined() -> None:
    stream = b": keep-alive\nevent: message\nid: 7\ndata: first\ndata: second\n\n"
    assert decode([stream]) == [b"first\nsecond"]


def test_unterminated_last_event_is_flushed() -> None:
    assert decode([b"data: tail"]) == [b"tail"]


def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    return orjson.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def test_collector_rebuilds_content_tool_calls_and_usage() -> None:
    collector = ChatStreamCollector()
    for data in [
        chunk({"role": "assistant", "content": "Hel"}), chunk({"content": "lo"}),
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f",
                                                                    "arguments": '{"x"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
        chunk({}, "tool_calls"),
        orjson.dumps({"choices": [], "usage": {"total_tokens": 9}}), b"[DONE]", b"not json",
    ]:
        collector.add(data)
    assert collector.response() == {
        "content": "Hello", "finish_reason": "tool_calls", "usage": {"total_tokens": 9},
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "f", "arguments": '{"x": 1}'}}]}


def test_completion_summary_matches_the_stream_summary() -> None:
    completion = {"choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": "Hello"}}],
                  "usage": {"total_tokens": 9}}
    assert response_of_completion(completion) == {
        "content": "Hello", "tool_calls": [], "finish_reason": "stop",
        "usage": {"total_tokens": 9}}
