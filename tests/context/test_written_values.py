"""A text-tool agent's aged own turn lists its values as written (`summarize._written_forms`):
the agent re-types its code and prose as it wrote them (`while max_heap:`, `(-prev_freq,
char)`, `as schema_editor:`), and a value list naming `max_heap` bare lost the token its
next turn types (bench/README.md, "Text-tool agents' own code turns keep their values as
written")."""

from __future__ import annotations

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.summarize import _form_lost, shell_digest, summarize
from tests.context.test_shell_blocks import _session

CODE = ("Assistant:\n<thought> I count each character and build the string from a heap. "
        "</thought>\n<execute>\nimport heapq\n\ndef rearrange_string(s):\n    max_heap = []\n"
        "    prev_char, prev_freq = '', 0\n    while max_heap:\n"
        "        freq, char = heapq.heappop(max_heap)\n        if prev_char and -prev_freq > 0:\n"
        "            heapq.heappush(max_heap, (prev_freq, prev_char))\n"
        "    return ''\n</execute>\n")


def test_a_text_tool_turns_list_names_values_as_written() -> None:
    digest = summarize(CODE, "assistant", 3, named_lines=True)
    assert "max_heap:" in digest and "-prev_freq" in digest
    assert "heapq.heappop" in digest and "rearrange_string" in digest
    # another agent's turn: the list as before
    other = summarize(CODE, "assistant", 3)
    assert "max_heap:" not in other and "-prev_freq" not in other and "prev_freq" in other
    # a masked shell turn's list (a heredoc script's names)
    turn = ("```bash\ncat <<'EOF' > repro.py\nwith connection.schema_editor() as schema_editor:"
            "\n    schema_editor.create_model(Pony)\nEOF\n```")
    assert "schema_editor:" in shell_digest(turn).splitlines()[-1]


def _reply(k: int) -> str:
    prose = " ".join(["I rewrite the loop over the pending items so that the heap stays bounded,"
                      " then run the check again with the same inputs as before."] * 6)
    return (f"THOUGHT: {prose}\n\n```bash\ncat <<'EOF' > check.py\nimport heapq\n"
            f"while wq{k}_items:\n    item = pop_next(wq{k}_items, -offset{k}_min)\n"
            + "    total = total + item\n" * 6 + "    print(total)\nEOF\npython check.py\n```")


async def test_an_aged_shell_turn_lists_what_it_typed_as_written(
        engine: ContextEngine) -> None:
    messages = _session(40, _reply)
    headers = {"x-ctxgate-session-id": "written-values", "x-ctxgate-task-class": "default"}
    aged = 0
    for end in range(3, len(messages), 2):  # each call ends on a command's result
        fitted = await engine.fit({"messages": messages[:end]},
                                  CallContext("t-wv", "s", headers))
        sent = "\n".join(str(m.get("content")) for m in fitted.body["messages"])
        for k in range((end - 1) // 2):
            listed = f"while wq{k}_items:\n" not in sent and f"wq{k}_items" in sent
            aged += listed
            # a turn aged to a digest listing what it typed lists it as typed
            if listed:
                assert f"wq{k}_items:" in sent and f"-offset{k}_min" in sent, (end, k)
        assert sum(d.tokens_saved for d in fitted.drops) == (
            fitted.tokens_before - fitted.tokens_after)
    assert aged


def test_a_file_name_seen_bare_elsewhere_is_listed_as_its_sentence_wrote_it() -> None:
    """The model reads `sample_result.csv` in a listing, but the turn's prose ended a sentence
    on `sample_result.csv.`: a text-tool agent re-types that form, so the list names it. A
    `./check_data.py` form of a name seen bare, a word's (`e.g.`), a number's (`2000.`) or a
    form only fenced code wrote (`ready_rows:`) lists nothing (DA-Code queues: the `./` forms
    cost 0.028 points @0.1 for 3 calls' values, bench/README.md, branch `margin57`)."""
    turn = ('Thought: The output must follow the format of sample_result.csv. I check the '
            'data first, e.g. as the TEST_SIZE is 2000.\n\n'
            'Action: Python(file_path="./check_data.py"):\n'
            "```python\nimport pandas as pd\n" + "df = pd.read_csv('train.csv')\n" * 12
            + "if ready_rows:\n    print(df.head())\n```")
    known = frozenset({"sample_result.csv", "check_data.py", "2000", "ready_rows", "e.g"})
    digest = summarize(turn, "assistant", 3, known=known, named_lines=True)
    assert "sample_result.csv." in digest
    assert "check_data.py" not in digest and "e.g." not in digest
    assert "2000" not in digest and "ready_rows" not in digest
    # another agent's turn: a value it has seen is not listed again
    other = summarize(turn, "assistant", 3, known=known)
    assert "sample_result.csv" not in other and "check_data.py" not in other


def test_a_sentence_closing_on_a_value_the_digest_keeps_bare_lists_nothing() -> None:
    """`fix the typos in bad.txt.` beside the code's `edit_file_by_replace('bad.txt', ...)`:
    the digest keeps the value bare where the agent typed it, so the closing `.` is not a
    form to list (OpenHands queues' holdout cost @0.1: listing it fell 0.117, bench/README.md,
    branch `margin56b`)."""
    turn = ("Thank you for providing the contents of the file. I'll now proceed to fix the "
            "typos in bad.txt.\n<execute_ipython>\nedit_file_by_replace('bad.txt',\n"
            "to_replace='This is a stupid typoo.',\nnew_content='This is a stupid typo.')\n"
            "</execute_ipython>")
    known = frozenset({"bad.txt"})
    digest = summarize(turn, "assistant", 3, known=known, named_lines=True)
    assert "bad.txt." not in digest.replace("'bad.txt'", "")
    # only a file name's closing forms are weighed: not a word's, a number's or a `./` form
    assert not _form_lost("data", "data.", "the rows") and not _form_lost("Action", "Action:", "")
    assert not _form_lost("e.g", "e.g.", "") and not _form_lost("2000", "2000.", "")
    assert not _form_lost("run.py", "./run.py", "the rows")
    assert _form_lost("result.csv", "result.csv.", "the rows")
    assert _form_lost("result.csv", "./result.csv result.csv:", "the rows")
    assert not _form_lost("result.csv", "result.csv.", "saved to result.csv")
