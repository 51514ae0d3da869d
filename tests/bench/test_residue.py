"""bench/residue.py: a forwarded call's characters split by role and kind."""

from __future__ import annotations

from bench.residue import NOTE, kinds_of


def test_kinds_split_notes_carriers_gists_replies_and_calls() -> None:
    calls = [{"id": "c1", "type": "function",
              "function": {"name": "get_customer", "arguments": "{\"phone\": \"555\"}"}}]
    sent = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "my phone is 555-123"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"id\": \"C1\"}"},
        {"role": "assistant", "content": "Found you."},
        {"role": "user", "content": "I turned off airplane mode and it still fails"},
        {"role": "assistant", "content": "Thank you. Please reboot."},
    ]
    note = f"my phone is 555-123\n{NOTE}\nget_customer(555) → omitted"
    turns = f"[ctxgate: 2 turns folded]\n{NOTE}"  # a turns note, even one quoting a header
    forwarded = [sent[0], {"role": "user", "content": note}, sent[4],
                 {"role": "user", "content": "[ctxgate: omitted I turned off…]"},
                 {"role": "assistant", "content": "Thank you."},
                 {"role": "user", "content": turns}]
    kinds = kinds_of(sent, forwarded)
    assert kinds["system"] == 6
    assert kinds["user: note's carrier text"] == len("my phone is 555-123\n")
    assert kinds["user: fold note"] == len(note) - len("my phone is 555-123\n")
    assert kinds["assistant: reply verbatim"] == len("Found you.")
    assert kinds["user: rewritten"] == len("[ctxgate: omitted I turned off…]")
    assert kinds["assistant: reply rewritten"] == len("Thank you.")
    assert kinds["user: turns note"] == len(turns)
    assert sum(kinds.values()) == sum(len(m["content"]) for m in forwarded)
    sent_kinds = kinds_of(sent, sent)
    assert sent_kinds["assistant: tool-call JSON"] > 0 and sent_kinds["tool: verbatim"] == 12
    assert sent_kinds["user: fold note"] == 0
