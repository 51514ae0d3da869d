"""A turns note names an aged reply's code words as the client wrote them (`fold.turns_note`)."""

from gateway.context.fold import Folded, Run, code_words, fold_turns, retyped, turns_note

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


def _fold(task: int) -> str:
    """The note of a run of three turns whose first two replies went aged, with the
    client's queue at its later task `task` (-1: none, one run)."""
    replies = {1: REPLY, 3: "```python\nsplit(y, test_size=0.3, random_state=7)\n```"}
    client = [{"role": "user", "content": "Observation: start"}, {"role": "assistant"},
              {"role": "user", "content": "Observation: ok"}, {"role": "assistant"},
              {"role": "user", "content": "Observation: done"},
              {"role": "assistant", "content": "Thought: done"},
              {"role": "user", "content": "Task: load the data"}]
    sent = [dict(m) for m in client]
    for i, text in replies.items():
        client[i] = {**client[i], "content": text}
        sent[i] = {**sent[i], "content": "[ctxgate: omitted Action: Python…]"}
    folded = Folded(sent, [(i, None) for i in range(len(sent))], [], 0)
    out = fold_turns(folded, [Run(0, 1, 5)], lambda i: (f"m{i}", 200),
                     lambda text: len(text) // 4, client=client, task=task)
    return str(out.messages[0]["content"])


def test_only_a_queues_earlier_task_keeps_its_code_words() -> None:
    assert "test_size random_state" in _fold(6)  # the run's task ended: a later one began
    assert "test_size" not in _fold(-1)  # one run (no later task): as sent
    assert "test_size" not in _fold(0)  # the run is in the current task


def test_past_two_words_a_note_names_only_those_typed_three_times() -> None:
    reply = ('Action: Python(file_path="./train.py"):\n'
             "```python\nsplit(x, test_size=0.2, random_state=42, n_jobs=4, max_iter=9)\n```")
    messages = [{"role": "user", "content": "Observation: ok"},
                {"role": "assistant", "content": "[ctxgate: omitted Thought: I will…]"},
                {"role": "user", "content": "Observation: done"},
                {"role": "assistant", "content": "Thought: done"}]
    written = ["Observation: ok", reply, "Observation: done", "Thought: done"]
    typed = {"test_size": 5, "random_state": 4, "n_jobs": 3, "max_iter": 2, "./train.py": 2}
    note = turns_note(messages, Run(0, 0, 3), None, written, typed)
    assert "test_size random_state n_jobs" in note  # the third: typed in 3 replies
    assert "max_iter" not in note and "./train.py" not in note  # past two, typed twice


NAMES = [f"col_{c}" for c in "abcdefghijklmnopqrstuv"]  # 22 code words


def _queue(again: int) -> list[dict[str, str]]:
    """A queue of three tasks (at client messages 0, 2 and 8): the first task's reply
    types `NAMES`, the second's first reply types `again` of them again and its next one
    a name of its own; the third is the current task."""
    return [
        {"role": "user", "content": "Task: a"},
        {"role": "assistant", "content": f"```python\nf({', '.join(NAMES)})\n```"},
        {"role": "user", "content": "Task: b"},
        {"role": "assistant", "content": f"```python\ng({', '.join(NAMES[:again])})\n```"},
        {"role": "user", "content": "Observation: ok"},
        {"role": "assistant", "content": "```python\nh(new_thing=1)\n```"},
        {"role": "user", "content": "Observation: done"},
        {"role": "assistant", "content": "Thought: done"},
        {"role": "user", "content": "Task: c"}]


def test_retyped_reads_the_share_of_a_tasks_words_the_next_one_typed_again() -> None:
    assert retyped(_queue(4), [2, 8], 8) == [False, True]  # 4 of 22: 18% >= 15%
    assert retyped(_queue(3), [2, 8], 8) == [False, False]  # 3 of 22: 14%
    assert retyped([*_queue(4)[:2], {"role": "user", "content": "Task: b"}], [2], 2) == [False]


def _fold_queue(again: int) -> str:
    """The note of the second task's turns (its replies aged) at the third task."""
    client = _queue(again)
    sent = [dict(m) for m in client]
    for i in (3, 5):
        sent[i] = {**sent[i], "content": "[ctxgate: omitted ```python…]"}
    folded = Folded(sent, [(i, None) for i in range(len(sent))], [], 0)
    out = fold_turns(folded, [Run(2, 3, 7)], lambda i: (f"m{i}", 400),
                     lambda text: len(text) // 4, client=client, task=8, starts=[2, 8])
    return str(out.messages[2]["content"])


def test_an_agent_that_retypes_gets_every_code_word_of_an_ended_tasks_reply() -> None:
    assert "new_thing" in _fold_queue(4)  # typed once, but the agent retypes: noted
    assert "col_d" in _fold_queue(4)  # past the cap of two a note
    assert "new_thing" not in _fold_queue(3)  # it does not: typed once, left out
