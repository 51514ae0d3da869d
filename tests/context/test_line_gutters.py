"""A tool output whose lines carry a file reader's gutter of line numbers (`     12→code`) is
read as numbered code: its preview and its digest show the code, each kept line keeps its
number without the padding, the numbers are no values of its lists, and a numbered definition
line is a definition. Other forms (`12:`, `cat -n`'s tab) are read as before."""

from __future__ import annotations

from gateway.context.apply import first_line, placeholder, pointer
from gateway.context.items import Item
from gateway.context.summarize import code_line, numbered_listing, summarize

# A made-up header file as a file reader prints it: the number right-aligned in six
# characters, an arrow, the line; then a note the reader appends to every file it prints.
_CODE = [
    "/**",
    " * @file ring_buffer.h",
    " * @brief Fixed-size ring buffer of samples",
    " */",
    "#include <stddef.h>",
    "",
    "typedef enum { RB_OK = 0, RB_FULL = 1, RB_EMPTY = 2 } rb_error_t;",
    "",
    "struct ring_buffer {",
    "    size_t head_index;",
    "    size_t tail_index;",
    "    double* sample_store;",
    "};",
    "",
    "rb_error_t rb_push(struct ring_buffer* rb, double sample);",
    "rb_error_t rb_pop(struct ring_buffer* rb, double* sample);",
    "}",
]


def _arrow(code: list[str], first: int = 1) -> str:
    lines = [f"{first + i:6d}→{line}" for i, line in enumerate(code)]
    return "\n".join([*lines, "", "<note>Files may be stale; read again before editing.</note>"])


def _item(text: str) -> Item:
    return Item(id="m1", kind="tool_result", unit="u1", message_index=1, segment=0, text=text,
                tokens=len(text) // 4, fixed_tokens=0, turn=1, pinned=False, rewritable=True)


def test_a_numbered_listing_is_told_from_text_that_opens_with_numbers() -> None:
    assert numbered_listing(_arrow(_CODE).splitlines())
    assert numbered_listing(["", "    40→x = 1"])
    # a device listing, times of day, a count, a sequence of steps: no file reader's gutter
    assert not numbered_listing(["01:00.0 VGA controller", "01:00.1 Audio device"])
    assert not numbered_listing(["09:30 stand-up", "10:30 review"])
    assert not numbered_listing(["3 files changed", "4 insertions"])
    assert not numbered_listing(["- 0→3: 212s", "- 3→5: 21s"])
    # the forms other readers already handle are left as they were
    assert not numbered_listing(["     1\timport os", "     2\timport re"])
    assert not numbered_listing(["223:    err = push(rb, x);", "245:    err = pop(rb, &x);"])
    assert code_line("    12→    size_t head_index;") == "    size_t head_index;"
    assert code_line("no gutter") == "no gutter"


def test_a_listings_preview_shows_its_first_line_of_code() -> None:
    listing = _item(_arrow(_CODE))
    # the first line naming something, without its number (`1→/**` named nothing)
    assert first_line(listing) == "* @file ring_buffer.h"
    assert placeholder(listing) == "[ctxgate: omitted * @file ring_buf…]"
    assert pointer(listing).endswith(": * @file ring_buf…]")
    # text that opens with a number and is no listing keeps its first line as it was
    assert first_line(_item("3 files changed, 4 insertions(+)\n done")) == \
        "3 files changed, 4 insertions(+)"


def test_a_listings_digest_keeps_code_lines_with_their_numbers_unpadded() -> None:
    text = _arrow(_CODE * 3)
    for level in (1, 2):
        out = summarize(text, "tool_result", level)
        kept = [line for line in out.splitlines() if line[:1].isdigit()]
        assert kept, out
        assert all("→" in line for line in kept)  # each kept line keeps its number
        assert "     1→" not in out and " 9→" not in out  # without the padding
    # the definition lines a file reader numbers are definitions (`struct ring_buffer {`)
    assert "9→struct ring_buffer {" in summarize(text, "tool_result", 1)


def test_line_numbers_are_no_values_of_a_listings_list() -> None:
    code = ["    pass", "    return", "    pass", "    return", "    pass", "    return"]
    out = summarize(_arrow(code, first=140), "tool_result", 3)
    for number in ("140", "142", "145"):
        assert number not in out.split("[omitted text mentions: ")[-1].split(), out


def test_a_listings_digest_keeps_no_line_whose_only_new_value_is_its_number() -> None:
    # the first line holds only a comment opener: its number is all it would add
    code = ["/**", *[f"int counter_{i} = {i};" for i in range(30)], "}"]
    out = summarize(_arrow(code, first=40), "tool_result", 3)
    assert out.startswith("[…"), out
