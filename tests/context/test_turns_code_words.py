"""A turns note names an aged reply's code words as the client wrote them (`fold.turns_note`)."""

from gateway.context.fold import Run, code_words, turns_note

REPLY = ('Action: Python(file_path="./train.py"):\n'
         "```python\nsplit(x, test_size=0.2, random_state=42)\n```")


def test_code_words_are_the_code_lines_compound_names() -> None:
    assert code_words(REPLY) == ("file_path", "./train.py", "test_size", "random_state")


def test_an_aged_reply_keeps_its_typed_code_words_capped() -> None:
    messages = [{"role": "user", "content": "Observation: ok"},
                {"role": "assistant", "content": "[ctxgate: omitted Thought: I will…]"},
                {"role": "user", "content": "Observation: done"},
                {"role": "assistant", "content": "Thought: done"}]
    written = ["Observation: ok", REPLY, "Observation: done", "Thought: done"]
    typed = {"test_size": 3, "random_state": 2, "./train.py": 1}
    note = turns_note(messages, Run(0, 0, 3), None, written, typed)
    assert "test_size random_state" in note  # the most typed first, at most 2
    assert "./train.py" not in note
    assert "test_size" not in turns_note(messages, Run(0, 0, 3))  # as last sent: nothing
