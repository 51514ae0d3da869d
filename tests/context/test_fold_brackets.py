"""A value a fold note quotes keeps a closing bracket that closes one opened inside it
(ReAct's `click[B00000001X]`, a call `f(x_1)`), while the markup and punctuation around a
word still go (`(B0X1)` → `B0X1`, `f(x_1),` → `f(x_1)`): the note re-types what was written."""

from __future__ import annotations

from typing import Any

from gateway.context.fold import TURNS_HEAD, Run, short_call, turns_note, value_words


def test_a_word_keeps_the_brackets_it_opens_and_loses_the_ones_around_it() -> None:
    text = ("I will click[B00000001X], then f(x_1) and f(g(x_2)); see (B0X1) "
            "[B0X2] **4G/5G.** `List<int_8>`, or (f(x_3)) [f(x_4)],")
    assert value_words(text) == ["click[B00000001X]", "f(x_1)", "f(g(x_2))", "B0X1", "B0X2",
                                 "4G/5G.", "List<int_8>", "f(x_3)", "f(x_4)"]
    # a bracket opened inside a word and closed in a later one is not closed for it
    assert value_words("search[soap_pack 20oz]") == ["search[soap_pack", "20oz"]


def test_a_long_calls_free_text_keeps_its_values_brackets() -> None:
    prose = "the user asked twice why f(x_1) fails after click[B00000001X], and it still does"
    line = f"note(C1001, {prose}, {prose.replace('twice', 'again')}) → ok"
    assert short_call(line) == ("note(C1001, the user asked twice why f(x_1) fails… "
                                "click[B00000001X] f(x_1)) → ok")


def test_a_turns_note_quotes_an_old_react_action_whole() -> None:
    page = "Observation: \n[Back to Search] \n[B00000001X] \nItem 1: soap \n$1.00"
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "i need unscented soap"},
        {"role": "assistant", "content": "click[B00000001X]"},
        {"role": "user", "content": page},
        {"role": "assistant", "content": "click[Buy Now] for B00000001X (order_7), thanks"},
    ]
    note = turns_note(messages, Run(0, 1, 3))
    assert TURNS_HEAD.match(note)
    lines = note.split("\n")
    assert lines[1:3] == ["i need unscented soap", "click[B00000001X]"]
    assert lines[-1] == "order_7"  # B00000001X is in the note already
