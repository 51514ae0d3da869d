"""An API-tool agent's aged reply lists the values that end its sentences with their period
(`Item.periods`): a customer-service agent ends a confirmation on the order it names
(`from order #W1000003.`) and its next reply types the same token, while the value list left
the bare id out as known (the call's arguments keep it) (bench/README.md, "tau2 retail
queues' recall: an API-tool agent's aged reply lists its sentence-ending values with their
period")."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import ContextEngine
from gateway.context.items import STILL, Clock, Item
from gateway.context.summarize import summarize
from tests.context.sessions import fit_each_call

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("get_order_details", "return_delivered_order_items")]
REPLY = ("Thank you, customer {k}! I found the order with the kettle and the keyboard. "
         "To proceed, I need to confirm:\n- You want to return the Electric Kettle from "
         "order #{order}.\n- The refund goes to your original payment method, as the policy "
         "says for every return of a delivered order.\n\nPlease confirm that these details "
         "are correct and that you would like me to go ahead with the return of the kettle.")


def _order(k: int) -> str:
    return f"W{1000000 + k}"


def _record(k: int) -> str:
    items = ",".join(f'{{"name":"Item {k}-{i}","item_id":"{7000000000 + 100 * k + i}",'
                     f'"price":{100 + i}.25,"options":{{"color":"black","size":"large"}}}}'
                     for i in range(8))
    return (f'{{"order_id":"#{_order(k)}","user_id":"user_{k}","items":[{items}],'
            f'"status":"delivered","payment_history":[{{"amount":{300 + k}.5}}]}}')


def _customer_queue(tickets: int) -> list[dict[str, Any]]:
    """One session of customers one after another: each asks, the agent reads the order
    (the id in the call's arguments), confirms in a reply ending a sentence on the id, is
    told yes, returns the item and says so."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a retail customer-service agent with tools."}]
    for k in range(tickets):
        order = _order(k)
        call = f"c{k}"
        messages += [
            {"role": "user", "content": f"Hi, I want to return a kettle from #{order}, please"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call, "type": "function", "function": {
                    "name": "get_order_details", "arguments": f'{{"order_id": "#{order}"}}'}}]},
            {"role": "tool", "tool_call_id": call, "content": _record(k)},
            {"role": "assistant", "content": REPLY.format(k=k, order=order)},
            {"role": "user", "content": "Yes, please go ahead."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"{call}r", "type": "function", "function": {
                    "name": "return_delivered_order_items",
                    "arguments": f'{{"order_id": "#{order}"}}'}}]},
            {"role": "tool", "tool_call_id": f"{call}r", "content": _record(k)},
            {"role": "assistant", "content": f"The return for order #{order} is started!"},
        ]
    return messages


def test_an_api_agents_reply_marks_its_values_with_their_period() -> None:
    api = Clock()
    api.api_calls = True
    reply = REPLY.format(k=3, order="W1000003")

    def item(kind: Any, clock: Clock) -> Item:
        return Item("i", kind, "u", 3, 0, reply, 100, 0, 1, False, True, clock=clock)

    assert item("assistant", api).periods
    assert not item("tool_call", api).periods  # a call's plan: as before
    assert not item("tool_result", api).periods
    assert not item("assistant", STILL).periods  # no call through the API: as before
    # the id is known (a call's arguments): only its sentence-ending form is listed
    known = frozenset({"W1000003"})
    assert "W1000003." in summarize(reply, "assistant", 3, known, periods=True)
    assert "W1000003" not in summarize(reply, "assistant", 3, known)


async def test_an_aged_reply_keeps_the_token_its_next_reply_types(
        engine: ContextEngine) -> None:
    tickets = 24
    messages = _customer_queue(tickets)
    fits = await fit_each_call(engine, messages, TOOLS, "t-periods", "reply-periods")
    ends = [end for end in range(3, len(messages)) if messages[end]["role"] == "assistant"]
    digested = 0
    for end, fitted in zip(ends, fits, strict=True):
        sent = "\n".join(str(m.get("content")) for m in fitted.body["messages"])
        for k in range(tickets):
            order = _order(k)
            if REPLY.format(k=k, order=order) not in [m.get("content") for m in messages[:end]]:
                continue  # not replied yet
            if f"return the Electric Kettle from order #{order}." in sent:
                continue  # the reply goes whole
            if f"Thank you, customer {k}!" not in sent:
                continue  # the reply is gone (folded with its exchange)
            digested += 1
            # an aged reply's digest names the order as the reply wrote it
            assert f"{order}." in sent, (end, k)
        assert sum(d.tokens_saved for d in fitted.drops) == (
            fitted.tokens_before - fitted.tokens_after)
    assert digested
