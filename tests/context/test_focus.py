"""Task-aware digests: what an old output keeps is chosen against the task and the step."""

from __future__ import annotations

from gateway.context.focus import focus_hits, task_focus
from gateway.context.summarize import summarize

TASK = "Find the cheapest red kettle in the Homeware category and add it to the cart."


def _session() -> list[dict[str, object]]:
    return [
        {"role": "system", "content": "You browse the web."},
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": "Open the category.", "tool_calls": [
            {"id": "a", "type": "function",
             "function": {"name": "goto", "arguments": '{"url": "/c/homeware", "tab": 3}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "assistant", "content": "Sort by price.", "tool_calls": [
            {"id": "b", "type": "function",
             "function": {"name": "click", "arguments": '{"bid": "sort_price_asc"}'}}]},
    ]


def test_focus_is_the_task_terms_and_the_latest_call_arguments() -> None:
    focus = task_focus(_session())
    assert {"kettle", "homeware", "cheapest", "sort_price_asc", "c/homeware"} <= focus
    assert "the" not in focus and "find" not in focus  # words every task has
    assert focus_hits("[a17] link 'Red kettle, Homeware' $19", focus) == 3  # red, kettle, homeware


def test_only_the_latest_calls_are_the_current_step() -> None:
    messages = _session()
    for k in range(4):
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"x{k}", "type": "function",
             "function": {"name": "scroll", "arguments": f'{{"page": "page_{k}"}}'}}]})
    focus = task_focus(messages)
    assert {"page_1", "page_2", "page_3"} <= focus
    assert "page_0" not in focus and "sort_price_asc" not in focus


def test_digest_keeps_the_line_the_task_is_about() -> None:
    rows = [f"[b{i:03d}] row {i}: blue teapot model_{i} price {100 + i} stock {7 * i}"
            for i in range(60)]
    rows[37] = "[b037] row 37: red kettle model_k9 price 19.99 stock 4"
    text = "Results page 2\n" + "\n".join(rows)
    focused = summarize(text, "tool_result", 3, focus=task_focus(_session()))
    blind = summarize(text, "tool_result", 3)
    assert "red kettle model_k9 price 19.99" in focused
    assert "red kettle" not in blind  # without the task the row is one of sixty
    assert len(focused) < len(text) / 4  # still a digest


def test_escaped_newlines_do_not_glue_onto_values() -> None:
    from gateway.context.summarize import values

    assert values(r"team:\nDavid\tfeedback.xlsx") == ["team", "David", "feedback.xlsx"]


def test_the_latest_talk_turn_keeps_its_lines_on_the_current_step() -> None:
    """An aged talk turn given the current step's values keeps, beside its first sentence,
    the lines that close on one of them; a line naming one elsewhere does not stay, nor one
    closing on a value the step does not name. Without them: the first sentence and the
    mentions line."""
    turn = ("Thank you for the details! I found an order delivered to Texas.\n"
            "- Order #W5565470 has these items: Electric Kettle, Pet Bed\n"
            "- You want to return the Electric Kettle from order #W5565470.\n"
            "- The refund goes to PayPal.\n\nPlease confirm (yes/no).")
    known = frozenset({"W5565470", "PayPal"})
    step = frozenset({"W5565470", "return_delivered_order_items"})
    digest = summarize(turn, "assistant", 2, known=known, step=step)
    assert "- You want to return the Electric Kettle from order #W5565470." in digest
    assert "these items" not in digest  # names the step's id, does not close on it
    assert "PayPal." not in digest and "yes/no" in digest  # the rest: its values listed
    plain = summarize(turn, "assistant", 2, known=known)
    assert "#W5565470." not in plain and plain.startswith("Thank you for the details!")
