"""Parse and render: ids, kinds, pinning, units, knowledge segments, exact reassembly."""

from __future__ import annotations

from typing import Any

from gateway.context.apply import apply_decision
from gateway.context.items import parse_request
from gateway.context.render import render_messages
from gateway.context.session import Decision
from gateway.context.summarize import summarize, values
from gateway.context.tokens import TokenCounter

COUNTER = TokenCounter()


def _call(i: int) -> dict:
    return {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}


MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the bug in app.py"},
    {"role": "assistant", "content": "Looking.", "tool_calls": [_call(1)]},
    {"role": "tool", "tool_call_id": "c1", "content": "app.py:3: error"},
    {"role": "assistant", "content": "Fixing.", "tool_calls": [_call(2)]},
    {"role": "tool", "tool_call_id": "c2", "content": "ok"},
]


def test_kinds_units_pins_and_ages() -> None:
    items = parse_request({"messages": MESSAGES}, COUNTER, "o200k_base").items
    assert [i.kind for i in items] == [
        "system",
        "user",
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
    ]
    assert items[2].unit == items[3].unit != items[4].unit == items[5].unit
    assert [i.pinned for i in items] == [True, True, False, False, True, True]
    assert [i.age for i in items] == [2, 2, 1, 1, 0, 0]
    assert items[1].goal and not items[3].goal
    again = parse_request({"messages": MESSAGES}, COUNTER, "o200k_base").items
    assert [i.id for i in items] == [i.id for i in again]
    assert len({i.id for i in items}) == len(items)


def test_token_counts_add_up() -> None:
    parsed = parse_request({"messages": MESSAGES}, COUNTER, "o200k_base")
    assert parsed.tokens == parsed.base_tokens + sum(i.tokens for i in parsed.items)
    system = parsed.items[0]
    assert system.tokens == COUNTER.count("You are a coding agent.", "o200k_base") + 3


def test_knowledge_segments_cover_the_message_exactly() -> None:
    docs = "".join(
        f"<document id={k}>Paragraph {k} about refunds. " * 3 + "</document>\n" for k in range(3)
    )
    text = "Answer from these sources.\n" + docs + "What is the refund window?"
    parsed = parse_request({"messages": [{"role": "user", "content": text}]}, COUNTER, "o200k_base")
    kinds = [i.kind for i in parsed.items]
    assert kinds.count("knowledge") == 3
    assert "".join(i.text for i in parsed.items) == text
    assert all(i.pinned == (i.kind != "knowledge") for i in parsed.items)
    rendered = render_messages([{"role": "user", "content": text}], parsed.items, parsed.items)
    assert not rendered.changed and rendered.messages[0]["content"] == text


def test_render_drops_whole_units_and_keeps_order() -> None:
    parsed = parse_request({"messages": MESSAGES}, COUNTER, "o200k_base")
    final = [i for i in parsed.items if i.unit != parsed.items[2].unit]
    rendered = render_messages(MESSAGES, parsed.items, final)
    assert rendered.changed
    assert [m["role"] for m in rendered.messages] == ["system", "user", "assistant", "tool"]
    assert rendered.messages[2] is MESSAGES[4]


def test_summaries_keep_structure() -> None:
    data = (
        '{"rows": [' + ",".join(f'{{"id": {k}, "name": "n{k}"}}' for k in range(50)) + '], "n": 50}'
    )
    out = summarize(data, "tool_result", 1)
    assert out.startswith('{"rows":[') and '"n":50' in out and "47 more" in out
    log = "\n".join([f"2024-01-01 10:00:{k:02d} INFO step {k}" for k in range(40)])
    log = log.replace("step 20", "ERROR disk full at /var/lib/x")
    out = summarize(log, "tool_result", 1)
    assert "disk full" in out and "step 39" in out and "step 5\n" not in out
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| {k} | {k * 2} |" for k in range(30))
    out = summarize(table, "tool_result", 1)
    assert out.startswith("| a | b |\n|---|---|") and "omitted" in out and "| 29 |" in out
    code = "\n".join([f"{k}:    x = {k}" for k in range(100)] + ["(Open file: /repo/a.py)"])
    code = code.replace("50:    x = 50", "50:def target_fn(a):")
    code = code.replace("60:    x = 60", "60:    x = load('/repo/data.csv')")
    out = summarize(code, "user", 1)
    assert "target_fn" in out and "/repo/data.csv" in out and len(out) < len(code) / 3
    assert "Open file" not in out  # the prompt line repeats in every observation
    assistant = "I will run the tests now. Then fix.\n```\npytest -x tests/\n```"
    assert summarize(assistant, "assistant", 2) == "```\npytest -x tests/\n```"
    chatty = "I see. Let me think. The bug is at line 1474 in `fields.py`. Running it."
    out = summarize(chatty, "assistant", 1)
    assert out == "I see.\nThe bug is at line 1474 in `fields.py`."


def test_summaries_list_values_they_leave_out() -> None:
    lines = [f"{k}:    total_{k} = rate * {k}  # filler" for k in range(100, 200)]
    out = summarize("\n".join(lines), "tool_result", 1, known=frozenset({"rate"}))
    assert "total_101" in out and "omitted text mentions" in out and "(+" in out
    assert " rate " not in out.split("mentions:")[1]  # the model sees it elsewhere
    assert "150:" not in out.split("mentions:")[1]  # line numbers are not repeated


def test_digest_keeps_header_errors_and_values_not_lines() -> None:
    view = ["[File: /repo/src/calc.py (400 lines total)]"]
    view += [f"{k}:    total_{k} = rate * {k}" for k in range(100, 160)]
    view[30] = "129:def compute_total(value, rate):"
    out = summarize("\n".join(view) + "\n(Open file: /repo/src/calc.py)\nbash-$", "user", 3)
    assert out.startswith("[File: /repo/src/calc.py (400 lines total)]\n[…")
    assert "129:def" not in out and "total_101 =" not in out  # lines go, their values stay
    mentions = out.split("mentions: ")[1]
    assert mentions.startswith("compute_total ")  # a defined name is listed first
    assert len(out) < len("\n".join(view)) / 4
    log = "\n".join([f"2024-01-01 10:00:{k:02d} INFO step_{k}" for k in range(40)])
    log = log.replace("INFO step_20", "ERROR disk full at /var/lib/x")
    out = summarize(log, "tool_result", 3)
    assert "disk full at /var/lib/x" in out and "step_39" in out and "INFO step_5\n" not in out
    turn = "This decrypts it with keys/k1.pem and k2.pem.\n```\npython solve.py --key k1\n```"
    out = summarize(turn, "assistant", 3, known=frozenset({"k2.pem"}))
    assert out.startswith("```\npython solve.py --key k1\n```")
    # a turn's prose lists the names it omits (not read above), not its plain words
    assert "keys/k1.pem" in out and "k2.pem" not in out
    assert "decrypts" not in out and "with" not in out


def test_a_time_of_day_is_one_value_in_a_digest() -> None:
    assert values("at 9:45, log 10:02:14 (a.py:12:5)") == [
        "at", "9:45", "log", "10", "02", "14", "a.py", "12"]  # a log's seconds split as before
    turn = ("Here are the options from JFK to SEA:\n1. HAT039: departs 10:00 PM, arrives"
            " 03:00 AM (next day), $103.\n2. HAT136: departs 11:15 AM, $140.")
    mentions = summarize(turn, "assistant", 3).split("mentions: ")[1]
    # the times the agent re-tells the customer survive, not `03` and `00`
    assert {"10:00", "03:00", "11:15", "HAT039"} <= set(mentions.rstrip("]").split())


def test_a_digest_lists_an_omitted_elements_ids_before_its_words() -> None:
    item = '{{"name": "{n}", "item_id": "{i}", "price": {p}, "options": {{"color": "{c}", ' \
        '"material": "{m}", "size": "{s}"}}}}'
    order = "[" + ", ".join(item.format(n=n, i=f"80690505{k}{k}", p=100 + k, c=c, m=m, s=z)
                            for k, (n, c, m, z) in enumerate([
                                ("Chair", "blue", "leather", "large"),
                                ("Lamp", "silver", "metal", "small"),
                                ("Kettle", "black", "steel", "medium"),
                                ("Helmet", "red", "plastic", "tiny")])) + "]"
    mentions = summarize(order, "tool_result", 3).split("mentions: ")[1]
    # the first element stays whole; of the others, the 10-digit ids the agent passes to its
    # next call are listed ahead of the colours and materials (on main those fill the cap)
    assert {"8069050511", "8069050522", "8069050533"} <= set(mentions.rstrip("]").split())


def test_digest_of_a_command_cuts_the_payload_it_pasted() -> None:
    blob = "QUJD" * 100
    turn = f"Decode it.\n```\necho '{blob}' | base64 -d > out.bin\n```"
    out = summarize(turn, "assistant", 3)
    assert "base64 -d > out.bin" in out and "(400 chars)" in out and blob not in out
    assert summarize(turn, "assistant", 2).count(blob) == 1  # lower levels keep commands whole


def test_digest_leaves_out_what_was_read_above_and_long_edits() -> None:
    status = "File updated. Please review the changes and make sure they are correct."
    view = "\n".join(
        ["[File: /repo/a.py (90 lines total)]", *[f"{k}:x_{k} = {k}" for k in range(30)]]
    )
    known = frozenset(values(status))
    out = summarize(f"{view}\n{status}", "user", 3, known=known)
    assert "File updated" not in out and "29:x_29" not in out  # status seen above: only values
    assert "File updated" in summarize(f"{view}\n{status}", "user", 3)  # first time: kept
    script = "\n".join(f"    step_{k}()" for k in range(30))
    edit = f"Rewrite it.\n```\nedit 1:1\ndef main():\n{script}\nend_of_edit\n```"
    out = summarize(edit, "assistant", 3)
    assert out.startswith("```\nedit 1:1\ndef main():\n[…30 lines]\nend_of_edit\n```")
    assert out.split("[omitted")[0].rstrip().endswith("end_of_edit\n```")
    # the cut lines' names are listed, up to a cap, the last first (nearest the next step)
    assert "mentions: step_29 step_28 " in out and "(+20 more)" in out
    # one of the agent's latest turns keeps its command whole: the code it edits next
    whole = summarize(edit, "assistant", 3, whole_commands=True)
    assert script in whole and "Rewrite" not in whole and "[…" not in whole


def test_digest_leaves_out_a_header_read_above() -> None:
    header = "[File: /repo/run.py (9 lines total)]"
    view = "\n".join([header, *[f"{k}:y_{k} = {k}" for k in range(9)]])
    assert summarize(view, "user", 3).startswith(f"{header}\n")
    known = frozenset(values(header))
    out = summarize(view, "user", 3, known=known)
    assert "[File:" not in out and out.startswith("[…9 lines]")


def test_a_long_number_is_a_value_and_a_hex_digest_is_not() -> None:
    text = "\n".join(
        ["Decompilation Found!", *[f"  local_{k} = {k};" for k in range(12)],
         'basic_string("FLAG23456912365453475897834567");',
         "commit 3f1c9a0b7d2e4f6a8b9c0d1e2f3a4b5c6d7e8f90", "return;"]
    )
    out = summarize(text, "tool_result", 3)
    assert "FLAG23456912365453475897834567" in out
    assert "3f1c9a0b7d2e4f6a8b9c0d1e2f3a4b5c6d7e8f90" not in out


def test_digest_of_a_turn_that_made_tool_calls_keeps_no_prose() -> None:
    thinking = ("<thinking>\nThe relevant tool is get_received_emails, which returns every "
                "email in the inbox. I will then look for the reset link of account_77 in "
                "them. It takes no parameters, so I have all I need to call it.\n</thinking>")
    out = summarize(thinking, "tool_call", 3)
    # the calls (sent whole beside it) say what it did: only the values it names stay
    assert "relevant tool" not in out and "<thinking>" not in out
    assert "get_received_emails" in out and "account_77" in out and len(out) < len(thinking) / 3
    # a turn that made no tool call keeps its first sentence (it answered the user)
    assert summarize(thinking, "assistant", 3).startswith("<thinking>\nThe relevant tool")
    # a turn that ran a command keeps it; lower levels keep their sentences
    command = "Run it.\n```\npytest -x tests/\n```"
    assert summarize(command, "tool_call", 3).startswith("```\npytest -x tests/\n```")
    assert "relevant tool" in summarize(thinking, "tool_call", 1)
    # never longer than the sentence it replaces: a few words with a value stay as they are
    short = "Open page_2."
    assert summarize(short, "tool_call", 3) == short


def test_a_mask_names_the_first_line_in_few_characters() -> None:
    """A long session sends hundreds of placeholders on every late call: each says what was
    left out and how it began, without the item id or its size (nothing the model can use),
    nor the kind its message's role gives (a tool message holds a tool result)."""
    output = "[File: /repo/src/pkg/module_3.py (224 lines total)]\n" + "1: x = 1\n" * 200
    msgs = [*MESSAGES[:3], {"role": "tool", "tool_call_id": "c1", "content": output}]
    item = parse_request({"messages": msgs}, COUNTER, "o200k_base").items[3]
    mask = Decision("compress", "mask", "aged", "mask", 1)
    masked = apply_decision(item, mask, COUNTER, "o200k_base")
    assert masked is not None
    assert masked.text == "[ctxgate: omitted [File: /repo/src…]"
    assert item.id not in masked.text and len(masked.text) <= 38


def test_a_masked_document_inside_a_message_keeps_its_kind() -> None:
    """A retrieved document is a segment of a user or tool message: its role does not say
    what was left out, so the placeholder does."""
    docs = "".join(f"<document id={k}>Paragraph {k} about refunds. " * 9 + "</document>\n"
                   for k in range(2))
    text = "Answer from these sources.\n" + docs + "What is the refund window?"
    parsed = parse_request({"messages": [{"role": "user", "content": text}]}, COUNTER,
                           "o200k_base")
    doc = next(i for i in parsed.items if i.kind == "knowledge")
    mask = Decision("compress", "mask", "aged", "mask", 1)
    masked = apply_decision(doc, mask, COUNTER, "o200k_base")
    assert masked is not None
    assert masked.text == "[ctxgate: knowledge omitted <document id=0>P…]"


def test_a_render_takes_an_earlier_copy_only_where_it_is_the_very_copy_it_makes() -> None:
    """`materialize(..., earlier=)` (a step's render, `render_messages`/`render_from` with the
    prefix's copies): a rewritten message is the earlier render's very object where that is
    `{**message, "content": text}` to the byte (same keys in the same order, the other values
    the same objects, the content equal), else a new copy; the bytes are those of a render
    without it."""
    import orjson

    from gateway.context.render import materialize

    call_id = "".join(["call", "_1"])
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": call_id, "content": "a long result"},
        {"role": "assistant", "tool_calls": []},  # no `content`: it goes last
    ]
    plan: list[tuple[int, str | None]] = [(0, None), (1, "a gist"), (2, "a summary")]
    earlier: dict[int, Any] = {}
    first = materialize(messages, plan, earlier)
    again = materialize(messages, plan, {}, earlier)
    assert again[1] is first[1] and again[2] is first[2]
    other = [(0, None), (1, "another gist"), (2, "a summary")]
    changed = materialize(messages, other, {}, earlier)
    assert changed[1] is not first[1] and changed[2] is first[2]
    equal = [messages[0], {"role": "tool", "tool_call_id": "".join(["call", "_1"]),
                           "content": "a long result"},
             {"tool_calls": [], "role": "assistant"}]  # an equal id; keys reordered
    remade = materialize(equal, plan, {}, earlier)
    assert remade[1] is not first[1] and remade[2] is not first[2]
    for msgs, p, out in ((messages, plan, again), (messages, other, changed),
                         (equal, plan, remade)):
        assert orjson.dumps(out) == orjson.dumps(materialize(msgs, p))
