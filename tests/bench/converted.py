"""What the converter tests share: a git repository written in the test (the converters
read one commit of a mirror), and a converted pair of folders loaded back as
`bench/replay.py` reads them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from bench import corpora
from bench.corpora import Session


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                           "user.email=t@t", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def committed(repo: Path, message: str) -> tuple[Path, str]:
    """Every file under `repo` committed in a new repository: its git directory and commit."""
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return repo / ".git", git(repo, "rev-parse", "HEAD")


def loaded(written: dict[str, int], out: Path, runs: str
           ) -> tuple[list[Session], list[Session]]:
    """The runs folder `runs` and its `-queue` folder, as the replay loads them; the two
    folders are all that was written, each with the sessions `written` counts."""
    assert corpora.extra_jsonl(out) == sorted(written) == [runs, f"{runs}-queue"]
    sessions = corpora.load(runs, out), corpora.load(f"{runs}-queue", out)
    assert [len(s) for s in sessions] == [written[runs], written[f"{runs}-queue"]]
    return sessions


def rows(out: Path, name: str) -> list[dict[str, Any]]:
    """The `sessions.jsonl` lines of folder `name`."""
    return [json.loads(line)
            for line in (out / name / "sessions.jsonl").read_text().splitlines()]
