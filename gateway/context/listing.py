"""A tool output that lists file paths (a glob's, a `find`'s, a search's matching files),
and what its placeholder keeps when it ages: the paths, whole, as an agent re-types them.

An agent lists a tree once, early, and opens files from it many calls later by the path the
listing printed (OpenCode's first-turn `glob **/*`: three files read by absolute path 30
calls after the listing was masked; bench/README.md, "Session 68, list68"). A masked
listing's placeholder named none of them. Detected by the output's structure alone (most
lines are one path each), never by a tool's or a client's name.
"""

from __future__ import annotations

import re
from collections import Counter

# One path on a line: two names at least, joined by `/` (absolute, `./`, `~/` or relative),
# no blanks, no `:` (a grep hit's `file:line:`, a URL)
_PATH_LINE = re.compile(r"(?:~|\.{1,2})?/?[\w.@+~-]+(?:/[\w.@+~-]+)+/?")
# A name that is a content hash (a git object, a pack, a cache entry): never typed by hand
_HASHED = re.compile(r"[0-9a-f]{16,}")
# A path below the common folder the conversation can name: through a folder (`a/b`) or a
# name with an extension (`opencode.jsonc`); a bare dotfile's name (`.gitignore`) is a word
# prose uses of any repository
_FILE_NAME = re.compile(r".*/.*|[^/]*\w\.\w+")
MIN_PATHS = 8  # a shorter list is a few names, which a digest's value list keeps
# A folder's entries by bare name under a line naming the folder (`Directory listing for
# C:\Users\u:`, `ls /etc /opt`'s `/etc:`): an entry is a name of at most three words
# (`Saved Games`), maybe behind a bracketed mark (`[DIR] .ssh`)
_FOLDER_HEAD = re.compile(r"[^\n]{0,200}[/\\][^/\\\n]{0,80}:")
_NAME_LINE = re.compile(r"(?:\[\w+\] )?[\w.@+~-]+(?: [\w.@+~-]+){0,2}")
NAME_CHARS = 80
# A file's entry: unmarked, a dot before a name's letters (`.gitconfig`, `GEMINI.md`); a
# folder's (`[DIR] Music`) is listed again by the call that opens it
_FILE_ENTRY = re.compile(r"(?!\[)\S*\.\w\S*")
PATH_SHARE = 0.9  # of its non-blank lines: a header or a "truncated" note may stand beside
# Characters of paths a masked listing keeps at most (a 100-path glob is ~7,600)
KEPT_PATH_CHARS = 1200
DIGEST_PATH_CHARS = 600
# A line of a listing of failed paths: the path, `: `, the message (a tool's error head may
# stand before the first); the message is the same on nearly every line
_FAILED_LINE = re.compile(r"(?:.*?: )?(?P<path>" + _PATH_LINE.pattern + r"): (?P<message>\S.*)")
FEW_FILES = 3  # a folder's failed files listed by name; a larger folder is one line


def listed_paths(text: str) -> list[str] | None:
    """The paths `text` lists, one a line, when it is a path listing (None: it is not)."""
    if text.count("/") < MIN_PATHS:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < MIN_PATHS:
        return None
    paths = [line for line in lines if _PATH_LINE.fullmatch(line)]
    if len(paths) < MIN_PATHS or len(paths) < PATH_SHARE * len(lines):
        return None
    return list(dict.fromkeys(paths))


def listed_names(text: str) -> tuple[str, list[str]] | None:
    """A folder's listing of its entries by bare name (`_FOLDER_HEAD`, `_NAME_LINE`): its
    head line and its files' names (`_FILE_ENTRY`), in listed order (None: `text` is not
    one, or lists no file). The agent opens a file by the name the listing printed,
    relative to the folder it listed (Gemini CLI's `.gitconfig` read, then `.claude.json`,
    15 and 19 calls after its home folder's listing aged; the digest's value list had kept
    neither name)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) <= MIN_PATHS or not _FOLDER_HEAD.fullmatch(lines[0]):
        return None
    names = [line for line in lines[1:]
             if len(line) <= NAME_CHARS and _NAME_LINE.fullmatch(line)]
    if len(names) < MIN_PATHS or len(names) < PATH_SHARE * (len(lines) - 1):
        return None
    files = [name for name in names if _FILE_ENTRY.fullmatch(name)]
    return (lines[0], list(dict.fromkeys(files))) if files else None


def failed_paths(text: str) -> tuple[str, list[str]] | None:
    """The message and the paths of a listing of paths that each failed the same way, one a
    line (`path: Permission denied (os error 13)`, maybe behind the tool's own error head on
    the first line), in listed order (None: `text` is not one). A search that could not read
    a tree prints it; the agent turns to those files next, by the paths it printed."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < MIN_PATHS:
        return None
    hits = [hit for hit in map(_FAILED_LINE.fullmatch, lines) if hit is not None]
    if not hits:
        return None
    message, count = Counter(hit["message"] for hit in hits).most_common(1)[0]
    if count < MIN_PATHS or count < PATH_SHARE * len(lines):
        return None
    paths = [hit["path"] for hit in hits if hit["message"] == message]
    return message, list(dict.fromkeys(paths))


def failed_listing(placeholder: str, message: str, paths: list[str]) -> str:
    """What an aged listing of failed paths (`failed_paths`) is sent as, digested or masked:
    its placeholder, the message, then its folders in listed order, each as its files where
    it holds `FEW_FILES` or fewer, else as itself and how many files of it failed, up to
    `KEPT_PATH_CHARS`. Its 56 transcripts are one line; the repository's own folder, its
    `README.md` and `scripts/convert_to_markdown.py`, which the agent opened next by those
    paths, stay (a Gemini CLI queue's `ripgrep` error, masked to its placeholder three calls
    before; bench/README.md, "Session 75, gem75")."""
    folders: dict[str, list[str]] = {}
    for path in paths:
        folders.setdefault(path.rsplit("/", 1)[0], []).append(path)
    lines: list[str] = []
    room = KEPT_PATH_CHARS
    for folder, files in folders.items():
        group = files if len(files) <= FEW_FILES else [f"{folder}/ ({len(files)} files)"]
        size = sum(len(line) + 1 for line in group)
        if size > room:
            break
        lines += group
        room -= size
    head = f"{placeholder[:-1]}; {len(paths)} paths, each `{message}`:]"
    return "\n".join([head, *lines])


def _common_folder(paths: list[str]) -> str:
    """The folder every path of `paths` lies in, with its closing `/` ("" when none)."""
    head = paths[0].rsplit("/", 1)[0] + "/"
    for path in paths[1:]:
        while head and not path.startswith(head):
            head = head[:-1].rsplit("/", 1)[0] + "/" if "/" in head[:-1] else ""
    return head


def kept_paths(paths: list[str], elsewhere: str) -> list[str]:
    """The paths a masked listing keeps, in listed order: those the conversation (`elsewhere`:
    the user's requests, the agent's own words and calls) names by their part below the
    listing's common folder (`` `.opencode/agents/gitter.md` ``) but never whole, up to
    `KEPT_PATH_CHARS`: the agent opens such a file by the path the listing printed, and no
    other message holds it. A path only other tool outputs name (a README's tree, `git
    status`) is left out: listing those cost OpenCode's tune cost @0.1 1.3 points for no
    value re-typed (bench/README.md, "Session 68, list68")."""
    folder = _common_folder(paths)
    named = [path for path in paths if _FILE_NAME.fullmatch(path[len(folder):])
             and not _HASHED.search(path) and path not in elsewhere
             and re.search(rf"(?<![\w./~-]){re.escape(path[len(folder):])}(?![\w/-])",
                           elsewhere)]
    kept: list[str] = []
    room = KEPT_PATH_CHARS
    for group in (named, _siblings(paths, named, elsewhere)):
        for path in group:
            if len(path) + 1 > room:
                break
            kept.append(path)
            room -= len(path) + 1
    order = {path: i for i, path in enumerate(paths)}
    return sorted(kept, key=order.__getitem__)


def _siblings(paths: list[str], named: list[str], elsewhere: str) -> list[str]:
    """The files beside a file the conversation names (`kept_paths`), in a folder below the
    listing's common folder: an agent that works on `.opencode/commands/commit_all.md`
    opens `.opencode/commands/rule.md` next by the path the listing printed (bench/README.md,
    "Session 72, oc72"). Files only, none hash-named nor written whole elsewhere; the
    common folder's own files are a whole project's, not one folder's."""
    folder = _common_folder(paths)
    folders = {p.rsplit("/", 1)[0] for p in named if "/" in p[len(folder):]}
    return [p for p in paths if p.rsplit("/", 1)[0] in folders and p not in named
            and not p.endswith("/") and not _HASHED.search(p) and p not in elsewhere]


def _stores(paths: list[str]) -> tuple[str, ...]:
    """The folders just below the listing's common folder that hold a hash-named file (a
    git object store's `.git/`): their other files (`.git/index`, `.git/config`) are a
    tool's records, listed after the project's own however shallow."""
    folder = _common_folder(paths)
    return tuple(sorted({folder + p[len(folder):].split("/", 1)[0] + "/" for p in paths
                         if _HASHED.search(p) and "/" in p[len(folder):]}))


def _shallowest(paths: list[str], elsewhere: str, room: int) -> list[str]:
    """The paths not hash-named nor already written whole in the conversation, the
    shallowest first (a project's own files before a vendored tree's), those of a store
    (`_stores`) last, in listed order, up to `room` characters."""
    candidates = [p for p in paths if not _HASHED.search(p) and p not in elsewhere]
    stores = _stores(paths)
    order = sorted(range(len(candidates)), key=lambda i: (
        candidates[i].startswith(stores), candidates[i].count("/"), i))
    chosen = []
    for i in order:
        if len(candidates[i]) + 1 > room:
            break
        chosen.append(i)
        room -= len(candidates[i]) + 1
    return [candidates[i] for i in sorted(chosen)]


def aged_listing(placeholder: str, paths: list[str], elsewhere: str,
                 digest: bool = False, head: str = "") -> str | None:
    """What an aged listing of `paths` (`listed_paths`) is masked as (None: it keeps none):
    its placeholder, then the paths it keeps (`kept_paths`), one a line, in listed order.
    Its `digest` (a first aging) keeps the shallowest others too, up to `DIGEST_PATH_CHARS`
    in all: what the value list of a generic digest held (15 paths of `.git/hooks`). A
    folder's listing of bare names (`listed_names`) keeps its `head`, the folder they lie in,
    above them: no name is below a common folder, so only its digest keeps any."""
    kept = kept_paths(paths, elsewhere)
    if digest:
        room = DIGEST_PATH_CHARS - sum(len(p) + 1 for p in kept)
        more = set(kept) | set(_shallowest(paths, elsewhere, room))
        kept = [p for p in paths if p in more]
    if not kept:
        return None
    if head:  # read as the listing itself is: its head line first
        return f"{head}\n[ctxgate: {len(kept)} of its {len(paths)} files:]\n" + "\n".join(kept)
    return f"{placeholder[:-1]}; {len(kept)} of its {len(paths)} paths:]\n" + "\n".join(kept)
