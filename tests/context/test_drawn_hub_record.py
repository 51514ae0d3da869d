"""A hub record is not drawn from by a reference pair: a turn passing a customer id and the
line id it read in a newer bill record holds two values the older customer record (which
names every line and bill) holds too; two ids are a reference, not an entry copied, and the
customer record is not credited as a shared holder (gateway/context/drawing.py,
`MIN_SHARED`; bench/README.md, "hub records"). The update list it was made for still is
(test_drawn_older_list: three values of an entry)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.drawing import SHARED_MAX_CHARS, drawn_from
from gateway.context.items import Item

CUSTOMER = orjson.dumps({
    "customer_id": "C1001", "full_name": "John Smith", "phone_number": "555-123-2002",
    "account_status": "Active", "line_ids": ["L1001", "L1002"],
    "bill_ids": ["B1234321", "B1234322"]}).decode()
BILL = orjson.dumps({
    "bill_id": "B1234321", "customer_id": "C1001", "line_id": "L1002",
    "amount_due": 54.99, "status": "Overdue"}).decode()


def _assistant(k: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{k}", "type": "function",
         "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]}


def _session() -> list[dict[str, Any]]:
    """The customer record (message 3), a bill read by the id read there (5), then a call
    passing the customer id and the bill's line id (6)."""
    return [
        {"role": "system", "content": "You are a telecom support agent."},
        {"role": "user", "content": "My phone has no service abroad."},
        _assistant(1, "get_customer_by_phone", {"phone_number": "555-123-2002"}),
        {"role": "tool", "tool_call_id": "c1", "content": CUSTOMER},
        _assistant(2, "get_details_by_id", {"id": "B1234321"}),
        {"role": "tool", "tool_call_id": "c2", "content": BILL},
        _assistant(3, "enable_roaming", {"customer_id": "C1001", "line_id": "L1002"}),
        {"role": "tool", "tool_call_id": "c3", "content": "Roaming enabled."},
    ]


def _item(i: int, text: str) -> Item:
    return Item(id=f"m{i}", kind="tool_result", unit=f"u{i}", message_index=i, segment=0,
                text=text, tokens=len(text) // 4, fixed_tokens=0, turn=i, pinned=False,
                rewritable=True)


def test_a_hub_record_is_not_drawn_from_by_a_look_up_of_its_ids() -> None:
    messages = _session()
    assert len(CUSTOMER) <= SHARED_MAX_CHARS
    sources = [_item(3, CUSTOMER), _item(5, BILL), _item(7, messages[7]["content"])]
    # message 4 read the bill id in the customer record; message 6 read both its values in
    # the bill record, which the customer record holds too: one turn drew from it
    assert drawn_from(sources, messages, 3) == set()
