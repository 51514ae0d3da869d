"""A digest's value list names first the file paths a code-search result groups its spans
under (`summarize._header_paths`): a line that is a path alone above a fenced block of that
file's code. The agent types the path next as the file it views or edits; ranked as any
path, it fell past the cap of a result naming hundreds of values (Moatless Tools' search
results: `Viewed relevant code:` / `django/forms/boundfield.py` / ```` ``` ````)."""

from __future__ import annotations

from gateway.context.summarize import _PATH, _PATH_LINE, summarize

PATHS = ["pkg/core/records.py", "pkg/io/tables/columns.py", "tests/io/test_columns.py"]


def span(path: str, start: int) -> str:
    """One file's spans as a code-search agent shows them: the path, then its code."""
    code = [f"{start + k:6d}\tdef handler_{start + k}(value_{k}, limit_{k}=None):"
            f"  # scaled_{k} field_{k}" for k in range(40)]
    return "\n".join([path, "```", *code, "      # ...", "```", ""])


def search_result() -> str:
    body = "\n".join(span(p, 100 * (i + 1)) for i, p in enumerate(PATHS))
    return f"<observation>\nFound 120 code sections.\n\nViewed relevant code:\n{body}</observation>"


def listed(out: str) -> list[str]:
    line = out.splitlines()[-1]
    assert line.startswith("[omitted text mentions:")
    return line.removeprefix("[omitted text mentions: ").split(" (+")[0].split()


def test_a_search_results_file_paths_are_listed_first() -> None:
    text = search_result()
    out = summarize(text, "tool_result", 3)
    assert len(out) < len(text) // 5
    names = listed(out)
    assert set(PATHS) <= set(names[: len(PATHS) + 1])


def test_a_path_not_heading_code_is_ranked_as_before() -> None:
    # the same path written in prose, and a path line above a plain (unfenced) line: listed
    # among the other values, not first
    path = "pkg/io/tables/columns.py"
    text = search_result().replace(f"{path}\n```", f"{path}\nsee:")
    names = listed(summarize(text, "tool_result", 3))
    assert "pkg/io/tables/columns.py" not in names[:3]
    assert "pkg/core/records.py" in names[:3]


LONG = "tests/roots/test-ext-autosummary-imported_members/autosummary_dummy_package/__init__.py"


def test_a_path_line_longer_than_a_value_is_listed_whole() -> None:
    # a test fixture's path of 86 characters: a list drops other values of more than 80, the
    # path heading its spans is the file the agent views next (Moatless queues, sphinx)
    assert len(LONG) > 80
    text = search_result().replace(PATHS[1], LONG)
    names = listed(summarize(text, "tool_result", 3))
    assert LONG in names[: len(PATHS) + 1]
    # the same long path in prose only: dropped as before
    prose = search_result().replace("Viewed relevant code:", f"Also imported by {LONG}:")
    assert LONG not in summarize(prose, "tool_result", 3)


def test_one_extension_list_for_file_names_and_path_lines() -> None:
    # `.rst` and `.lock` files: path lines heading code (`_PATH_LINE`) and file names in a
    # digest's kept lines (`_PATH`) read the same list
    assert _PATH_LINE.fullmatch("doc/usage/configuration.rst")
    assert _PATH_LINE.fullmatch("poetry.lock")
    assert _PATH.search("see configuration.rst for the option")
    assert _PATH.search("pinned in poetry.lock")
    text = search_result().replace(PATHS[0], "poetry.lock")
    assert "poetry.lock" in listed(summarize(text, "tool_result", 3))[: len(PATHS) + 1]


def test_a_headed_blocks_first_and_last_line_numbers_are_listed_with_its_path() -> None:
    # the agent views a range next that starts or ends where a span it read did: listed as
    # bare numbers they ranked last, past the cap; a block's inner numbers stay where they were
    names = listed(summarize(search_result(), "tool_result", 3))
    head = names[: 3 * len(PATHS) + 1]
    for i in range(len(PATHS)):
        start = 100 * (i + 1)
        assert {str(start), str(start + 39)} <= set(head)
        assert str(start + 20) not in head
