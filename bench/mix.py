"""The request mix of the overhead benchmark: small, realistic chat completions.

Eight requests cycle in this order for every target: a support chat, a coding agent with
tools (asking for a tool call, and answering after a tool exchange), a retrieval-augmented
question with a document chunk, and a longer multi-turn chat; half of them stream. Every
request's last message carries `{n}`, which the load generator replaces with a per-request
number, so each call brings one new turn after a history the gateway has seen before (as
an agent's next call does) instead of a byte-identical replay. The same mix goes to the
Responses and Messages routes converted to their formats (`in_route`).
"""

from __future__ import annotations

from typing import Any

import orjson

from bench.wire_convert import CONVERTERS

MODEL = "gpt-4o-mini"
# The three routes the mix is sent to, each in its own wire format.
ROUTES = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
          "messages": "/v1/messages"}
NONCE = "{n}"

SUPPORT_SYSTEM = (
    "You are the support assistant of Acme Cloud. Answer briefly and precisely. When a "
    "customer reports an outage, ask for the region and the request id. Never promise "
    "refunds; point to the billing page instead. Use the customer's language."
)
CODING_SYSTEM = (
    "You are a coding agent working in a Python repository. Use the tools to read files, "
    "run the tests and edit code. Make the smallest change that fixes the issue, run the "
    "tests after every edit, and stop when they pass. Explain what you changed in one "
    "short paragraph at the end."
)
RAG_SYSTEM = (
    "You answer questions about the company handbook. Use only the documents given in the "
    "conversation; if they do not contain the answer, say so. Cite the section number."
)
DOCUMENT = (
    "Handbook §4.2 Travel. Employees book travel through the internal portal at least 14 "
    "days ahead. Economy class is the default for flights under 6 hours; premium economy "
    "is allowed above 6 hours. Hotels are capped at the city rate listed in appendix C. "
    "Meals are reimbursed up to the per-diem of the destination country; alcohol is not "
    "reimbursed. Receipts must be uploaded within 30 days of return. Trips to sanctioned "
    "countries need written approval from legal. §4.3 Equipment. Laptops are replaced "
    "every 4 years; a broken device is replaced at once through the IT desk. Monitors, "
    "keyboards and chairs for home offices are reimbursed up to 600 EUR per 3 years."
)
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "path from the repository root"}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run pytest on a selector; returns the summary.",
        "parameters": {"type": "object", "properties": {
            "selector": {"type": "string"}}, "required": ["selector"]}}},
    {"type": "function", "function": {
        "name": "edit_file", "description": "Replace one exact string in a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
            "required": ["path", "old", "new"]}}},
]
TRACEBACK = (
    "FAILED tests/unit/test_config.py::test_defaults - KeyError: 'timeout'\n"
    "  File \"src/app/config.py\", line 41, in load\n    value = raw['timeout']\n"
    "1 failed, 57 passed in 2.31s"
)


def _tool_exchange() -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "run_tests", "arguments": '{"selector": "tests/unit"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": TRACEBACK},
    ]


def requests() -> list[dict[str, Any]]:
    """The mix, in the order the load generator cycles through it."""
    support = [
        {"role": "system", "content": SUPPORT_SYSTEM},
        {"role": "user", "content": "Hi, our API calls in eu-west return 503 since 10:00."},
        {"role": "assistant", "content": "Sorry about that. Which request id do you see?"},
    ]
    coding = [
        {"role": "system", "content": CODING_SYSTEM},
        {"role": "user", "content": "The config loader crashes when 'timeout' is missing. "
                                    "Fix it so a default of 30 seconds applies."},
    ]
    rag = [
        {"role": "system", "content": RAG_SYSTEM},
        {"role": "user", "content": f"Documents:\n{DOCUMENT}\n\nQuestion: can I fly premium "
                                    "economy to Singapore?"},
        {"role": "assistant", "content": "Yes: the flight is over 6 hours, so premium "
                                         "economy is allowed (§4.2)."},
    ]
    long_chat = [{"role": "system", "content": SUPPORT_SYSTEM}]
    for turn in range(5):
        long_chat += [
            {"role": "user", "content": f"Question {turn} about quotas: how many requests "
                                        "per minute does the standard plan allow?"},
            {"role": "assistant", "content": "The standard plan allows 600 requests per "
                                             "minute per project, burst 100 per second."},
        ]

    def user(text: str) -> dict[str, Any]:
        return {"role": "user", "content": f"{text} (ref {NONCE})"}

    return [
        {"model": MODEL, "messages": [*support, user("Request id req_81f2, still failing.")]},
        {"model": MODEL, "stream": True, "tools": TOOLS,
         "messages": [*coding, {"role": "user", "content": f"Start please. ({NONCE})"}]},
        {"model": MODEL, "tools": TOOLS, "temperature": 0,
         "messages": [*coding, *_tool_exchange()[:1],
                      {**_tool_exchange()[1], "content": f"{TRACEBACK}\nrun {NONCE}"}]},
        {"model": MODEL, "stream": True, "stream_options": {"include_usage": True},
         "messages": [*rag, user("And hotels in Singapore?")]},
        {"model": MODEL, "max_tokens": 256,
         "messages": [*long_chat, user("And the enterprise plan?")]},
        {"model": MODEL, "stream": True,
         "messages": [*support, user("Thanks. Is there a status page?")]},
        {"model": MODEL, "tools": TOOLS,
         "messages": [*coding, *_tool_exchange(),
                      {"role": "assistant", "content": "One test fails on a missing key."},
                      user("Go ahead and fix it.")]},
        {"model": MODEL, "stream": True, "tools": TOOLS,
         "messages": [*coding, *_tool_exchange(), user("Show me the failing line first.")]},
    ]


def in_route(request: dict[str, Any], route: str) -> dict[str, Any]:
    """One request of the mix as `route` takes it: the same conversation as a Responses or
    Messages request (`bench/wire_convert.py`), streaming as the chat request does (Messages
    wants `max_tokens`: 1024 unless the request gives one)."""
    if route == "chat":
        return request
    out = CONVERTERS[route](request)
    if request.get("stream"):
        out["stream"] = True
    if route == "messages":
        out.setdefault("max_tokens", 1024)
    return out


def bodies(kind: str = "all", route: str = "chat") -> list[bytes]:
    """The mix serialised once; every target gets these exact bytes (with `{n}` filled).

    `kind` keeps all of it, or only the non-streaming (`whole`) or streaming requests;
    `route` (a key of ROUTES) gives it in that route's wire format.
    """
    chosen = [r for r in requests()
              if kind == "all" or (kind == "stream") == bool(r.get("stream"))]
    return [orjson.dumps(in_route(request, route)) for request in chosen]
