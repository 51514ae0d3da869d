"""Wire formats: the only code that knows which API a call came in on.

Each adapter turns its API's request into a `ChatView` (chat-shaped messages, the engine's
input, with a map back to the request's own items) and renders the engine's per-message plan
(kept / rewritten / dropped) back into that API's request, keeping the format's invariants.
It also reads that API's answer (whole or streamed) into the summary the learners use.

    view.py       the seam: ChatView, the plan, the WireFormat protocol
    chat.py       OpenAI Chat Completions: the engine's own shape (the identity view)
    responses.py  OpenAI Responses API (`input` items, `instructions`)
    messages.py   Anthropic Messages API (`system`, content blocks)
"""

from gateway.wire.view import PINNED, ChatView, Plan, WireFormat

__all__ = ["PINNED", "ChatView", "Plan", "WireFormat"]
