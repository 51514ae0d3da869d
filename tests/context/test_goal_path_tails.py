"""A budget's cut of the task statement lists the identifiers it takes away; a path in it too
long to be a notable value (a traceback's frame under a virtualenv) is listed by its tail, the
file and the package it sits in (mini-SWE-agent `django__django-15973` at 60%: the agent
`touch`es the `__init__.py` the task's traceback names, and no list had it)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.context.stages import ladder
from tests.context.test_budget_ladder import goal_ladder

SITE = "/home/dev/.local/share/virtualenvs/bugfix-O9qARFZW/lib/python3.9/site-packages"
FRAMES = ("django/core/management/__init__.py", "django/core/management/base.py",
          "django/db/migrations/executor.py")


def _call() -> list[dict[str, Any]]:
    """A system prompt, a task statement whose traceback's frames are 100-character paths
    between a description and long instructions, and one exchange."""
    frames = "".join(
        f' File "{SITE}/{path}", line {400 + k}, in run_step_{k}\n    self.step_{k}(argv)\n'
        for k, path in enumerate(FRAMES)
    )
    task = (
        "Defining the through model in another app fails on migrate.\n"
        + "I tried migrating my apps into the database and it failed at once. " * 20
        + "\nTraceback (most recent call last):\n" + frames
        + "AttributeError: 'str' object has no attribute '_meta'\n\n"
        + "Follow the workflow: read, reproduce, edit, verify. Keep each command short. " * 30
    )
    return [
        {"role": "system", "content": "You are a software engineer working in a shell."},
        {"role": "user", "content": task},
        {"role": "assistant", "content": "Let me look at the repository.\n```bash\nls\n```"},
        {"role": "user", "content": "django\ntests\nsetup.py"},
    ]


@pytest.mark.parametrize("to", [2, ladder.MASK, "excerpt"])
def test_a_cut_task_statement_lists_its_long_paths_by_their_tails(to: int | str) -> None:
    """Each rewrite that takes the traceback away lists every frame's file with its package
    (before: none, each path over the notable value's 80 characters), never the whole path."""
    cut, goal = goal_ladder(_call())
    need = 10**6 if to != "excerpt" else cut.current[goal].tokens // 2  # type: ignore[union-attr]
    cut.step(goal, 0 if to == "excerpt" else int(to), "over_budget", lambda _: True, need)
    text = cut.current[goal].text  # type: ignore[union-attr]
    listed = text.split("[omitted text mentions:")[1]
    for path in FRAMES:
        assert path in listed
    assert SITE[1:] not in listed


@pytest.mark.parametrize(("value", "tail"), [
    (f"{SITE[1:]}/{FRAMES[0]}", FRAMES[0]),  # over 80 characters: its last components
    ("src/pkg/module.py", "src/pkg/module.py"),  # notable: itself
    ("a" * 90 + "/" + "b" * 50, "b" * 50),  # the last component alone, however long
    ("longword" * 12, "longword" * 12),  # no path
])
def test_path_tail(value: str, tail: str) -> None:
    assert ladder.path_tail(value) == tail
