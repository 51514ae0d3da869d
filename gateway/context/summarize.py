"""Extractive, structure-aware compression of one text. Deterministic; never invents text.

- JSON keeps its shape: every key stays, arrays keep their first elements, long strings
  are cut.
- Logs keep a window around the first error and the tail.
- Tables keep the header and a sample of rows.
- Other text (tool output, files, prose) keeps its salient lines: the first line, lines
  that name paths, errors, line numbers and definitions, plus a window around errors;
  assistant turns keep their commands (fenced blocks) and their first sentence.
Level 2 is stricter than level 1. Level 3 is a digest for aged output the agent has acted on
already: the first line (the command's header: `[File: ...]`, the first output line), up to two
error lines, the lines that carry the most terms of the task and of the agent's latest tool
calls (`focus.py`), the last line, and then the values of the rest, never the rest's lines
(values the focus names listed first); a kept line whose values the model has read above is
left out. An assistant turn keeps its commands: one of the agent's latest turns whole, an
older one's long commands their first and last lines.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from gateway.context.encoded import describe, without_encoded
from gateway.context.focus import current_terms, focus_hits, focus_parts, lead_terms

_ERROR = re.compile(
    r"(?i)\b(error|exception|traceback|failed|failure|fatal|panic|denied|not found|"
    r"no such|cannot|can't|undefined|segfault|assert\w*)\b|\bE\d{3}\b|exit (code|status) [1-9]"
)
# A source or text file's extensions: a file name (`_PATH`, `_FILE_REF`) or a path line
# (`_PATH_LINE`) ends in one.
_FILE_EXTENSIONS = (r"py|js|ts|tsx|go|rs|java|c|h|cc|cpp|rb|php"
                    r"|json|ya?ml|toml|md|rst|txt|cfg|ini|sh|sql|html|css|lock|xml|csv")
_PATH = re.compile(rf"(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.(?:{_FILE_EXTENSIONS})\b")
_LINE_REF = re.compile(r"(?i)\bline \d+|:\d+:|\(\d+ lines total\)|\d+ (more )?lines? (above|below)")
_DEFINITION = re.compile(
    r"^\s*(?:\d+[:→])?\s*(?:async\s+)?(def|class|function|fn|func|interface|"
    r"struct|impl|public|private|protected|export)\b"
)
_TIMESTAMP = re.compile(
    r"^\s*\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|^\s*\d{2}:\d{2}:\d{2}|"
    r"^\s*(DEBUG|INFO|WARN|WARNING|ERROR|TRACE)\b"
)
_FENCE = re.compile(r"```.*?```", re.DOTALL)
# The code an aged assistant turn keeps as written: a fenced block, or the tag-delimited code
# a CodeAct harness runs (`<execute_bash>`, `<execute_ipython>`, MINT's `<execute>`) when it
# names a file or a path (`_FILE_REF`): the agent re-types the files its commands act on
# (OpenHands' `./hello.sh`, `/workspace/test.txt`), which a digest of the turn's first
# sentence lost. Code that names none (a computation: MINT's functions and sums,
# `print(wikipedia_search(...))`) is digested as prose: kept whole, MINT queues' cost @0.1
# fell 3.4 points (tune) for no recall, while 79% of OpenHands' blocks name a file and 0.2%
# of MINT's. Length, retyping and the block being the whole turn do not tell them apart
# (bench/README.md, "Tag-delimited code kept when it names a file").
_CODE = re.compile(r"```.*?```|<(execute(?:_\w+)?)>(.*?)</\1>", re.DOTALL)
# A file or a path in code: absolute or `./`, `../`, `~/`-relative (`/workspace/test.txt`,
# `./hello.sh`; after a space, a quote, `(`, `=`, `,`, `!` or `>`, so a division `(a+b)/2`
# is none), or a file name with a known extension (`bad.txt`, as `_PATH`).
_FILE_REF = re.compile(
    r"(?:(?<=[\s'\"=,!>(])|^)(?:\.{1,2}|~)?/[A-Za-z_][\w.-]*(?:/[\w.-]+)*"
    rf"|\b[\w-]+\.(?:{_FILE_EXTENSIONS})\b", re.MULTILINE)


# A terminal's control sequences (colours, cursor moves: CSI `ESC [ … m`, OSC `ESC ] … BEL`,
# two-byte escapes): a coloured test run or `git diff` a harness passes on as it printed it.
# They mean nothing to the model, and in a digest their residue glued to a value made a false
# one (`1mtests/test_generator.py` from `ESC[1mtests/…`; aider's log: 6.8% of what it sends).
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def without_ansi(text: str) -> str:
    """`text` without terminal control sequences (`_ANSI`): what a digest reads of a tool's
    output, so no value it lists carries their residue."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def _kept_code(m: re.Match[str]) -> bool:
    """Whether an assistant turn's code block (`_CODE`) stays as written in its digest: a
    fenced block always, tag-delimited code when it names a file or a path."""
    return m.group(1) is None or _FILE_REF.search(m.group(2)) is not None


# A time of day (`03:00`, `9:45`) is one value an agent re-tells, not two bare numbers
# (`03`, `00`); longer colon runs (log timestamps `10:02:14`, `file.py:12:5`) split as before,
# so a log's every second does not become a value of its own.
_VALUE = re.compile(r"(?<![\d:])\d{1,2}:\d{2}(?![\d:])|[A-Za-z0-9_][A-Za-z0-9_.\-/]*[A-Za-z0-9_]")
# Shell prompts and status lines repeat in every observation: the latest one carries them.
_PROMPT = re.compile(
    r"^\((?:Open file|Current directory)[^)]*\)\s*$|^\S{0,40}[$#>]\s*$", re.MULTILINE
)
# File-view line numbers (`12:`, `12|`, a file reader's `    12→`): not values of the text.
# (`cat -n`'s `    12\t` stay values: a code-search result's first and last ones are listed,
# `_header_paths`.)
_LINE_NO = re.compile(r"^\s*\d+[:|→]", re.MULTILINE)
# A file view's numbered line that a digest does not take for an error the command met. Not a
# file reader's `12→` line: its listing's lines that name an error stay among the lines a
# digest may keep. Read as source code too, they left 1 value a late call re-typed behind
# (bench/README.md, "Line-number gutters", variant F).
_VIEW_LINE_NO = re.compile(r"^\s*\d+[:|]")
# A file reader's gutter of line numbers (`     12→`: the number right-aligned, an arrow),
# with the padding before it. Only the arrow: a line opening with `12:` or `12\t` is as often
# a time, a record or a table's row as a numbered line, and the digests that read those
# forms already (`_LINE_NO`, `_header_paths`) are measured with them as they are.
_GUTTER = re.compile(r"[ \t]*(\d{1,7})→")

_BLOB = re.compile(r"[0-9A-Za-z+/=]{120,}")  # encoded payloads pasted into a command
# Digests and blobs: no one retypes them. A hex digest has a letter; a long run of decimal
# digits is a number (an id, a key, a flag's body), listed like any other value.
_HASH = re.compile(r"(?=[0-9]*[a-f])[0-9a-f]{20,}|[0-9A-Za-z+/]{40,}")
_NOTABLE = re.compile(r"[\d_./]|[a-z][A-Z]")
_CODEY = re.compile(r"`[^`]+`|\b\d{2,}\b|[\w-]+\.\w{1,4}\b|\w+_\w+|\w+\(\)")
MAX_LINE_CHARS = 240
DIGEST_LINE_CHARS = 160
# Level 3 lists 10 values (16 before): what the task and the latest calls name come first
# (focus.py), so the cut falls on the rest. Issue-7 yardstick, tune split (bench/README.md,
# swe7b): cost saved @0.1 SWE-agent +0.3 points, every other corpus +0.0..0.1, recall unchanged;
# 8 took agentdojo tune recall from 99.31% to 99.25%.
MENTION_CAP = {1: 12, 2: 6, 3: 10}
# A digest (level 3) of a long output lists up to one value per this many characters of it
# when that is more than its cap: a 27k-character file listing keeps 55 of its names, not 16.
# Issue-7 yardstick, tune split: agentdojo recall 98.8% -> 99.3% (late 97.7% -> 98.9%); web
# late reduction 90.6% -> 90.5%, intercode 32.2% -> 32.0%. One per 1000: recall unchanged.
MENTION_CHARS_PER_VALUE = 500
SALIENT_LINES = {1: 3, 2: 1}
DEFINITION_LINES = {1: 8, 2: 3}  # `def`/`class` lines: what an agent greps for and calls later
SHORT_LINES = {1: 6, 2: 3}  # shorter texts are only trimmed of prompts and long lines


_ESCAPED = re.compile(r"\\[nrt]")  # "\n" spelled out inside quoted or serialized text


# A value with a digit, `_` or `/` that ends a sentence (`Retrieved 28 April 2018.`, `as of
# 2021."`), in the value lists of an agent that writes its steps as JSON (`Clock.json_steps`):
# listed with its period as written. Such an agent quotes the prose of the pages it read
# into its next steps' JSON strings, period included (`"as of 2021."`), which the list
# without it did not hold (bench/README.md, "The ninth agent kind, part two").
_SENTENCE_END = re.compile(r"\.(?=[\s\"'\\)\]]|$)")
_MARKED = re.compile(r"[\d_/]")


def _gutter(line: str) -> re.Match[str] | None:
    """The gutter `line` opens with (`_GUTTER`), None when it has none."""
    return _GUTTER.match(line)


def numbered_listing(lines: Sequence[str]) -> bool:
    """Whether `lines` open as a file reader's listing of numbered lines (`     1→…`): its
    first non-blank line has the gutter (`_GUTTER`). A digest and a preview of such a text
    read its code: its gutter is line numbers, which made a preview show `1→/**` and a
    line whose only value was its number a line the digest kept."""
    first = next((line for line in lines if line.strip()), "")
    return _gutter(first) is not None


def code_line(line: str) -> str:
    """`line` without its gutter of line numbers (`_GUTTER`), if it has one."""
    m = _gutter(line)
    return line[m.end():] if m else line


def _compact_gutter(line: str) -> str:
    """`line` with its gutter's padding cut (`    12→x` is `12→x`): the number stays."""
    m = _gutter(line)
    return line[m.start(1):] if m else line


# A file name and the line it points at, with its column or the line range (`core/bun.lock:41`,
# `src/app.py:12:5`, `AGENTS.md:76-80`): an agent's summary cites its edits so, and re-types the
# whole token later (the yardstick's `[A-Za-z0-9_./:-]{4,}`), while the value list split it
# at the `:` into the file (most often named elsewhere, so not listed) and a bare number.
# `values(lines=True)` (the value list of a turn's prose, `_mentions`) keeps it one value. Not
# after `//` nor `:` (a link's host and port: `whole_links` lists the link) nor as a longer
# token's tail. Only in prose: in tool outputs too (grep -n, compilers, tracebacks: a value per
# line cited, pushing names out of the capped list) Claude Code's tune recall fell 95.947 ->
# 95.929 and cost @0.1 0.106 point; OpenCode's tune recall rose 95.811 -> 96.334 either way
# (bench/README.md, "branch `pl65`").
_FILE_LINE = (r"(?<![A-Za-z0-9_.:-])(?<!//)[A-Za-z0-9_][A-Za-z0-9_.\-/]*\.[A-Za-z][A-Za-z0-9]{0,7}"
              r":\d+(?:[:-]\d+)?(?![A-Za-z0-9_/]|[.:-]\d)")
_VALUE_LINES = re.compile(f"{_FILE_LINE}|{_VALUE.pattern}")
_LINE_SUFFIX = re.compile(r":\d+(?:[:-]\d+)?$")  # a `_FILE_LINE` value's line


def values(text: str, periods: bool = False, lines: bool = False) -> list[str]:
    """Identifier-like values (names, paths, numbers) in order of first appearance. An
    escaped newline is a separator, not the start of a name ("\\nDavid" is "David"). With
    `periods`, a value with a digit, `_` or `/` that ends a sentence keeps its period; with
    `lines`, a file name with its line number (`_FILE_LINE`) is one value."""
    text = _ESCAPED.sub(" ", text)
    out = []
    for v, end in _tokens(text, lines):
        if len(v) < 2:
            continue
        if periods and _SENTENCE_END.match(text, end) and _MARKED.search(v):
            v += "."
        out.append(v)
    return list(dict.fromkeys(out))


def _tokens(text: str, lines: bool) -> Iterator[tuple[str, int]]:
    """`_VALUE`'s matches of `text` and where each ends; with `lines`, a file's line
    (`_FILE_LINE`) is one, unless longer than a listed value's 80 characters (a traceback's
    `…/site-packages/…/solvers.py:960`): the list drops such a value, and keeps the line's
    number when it stays split."""
    for m in (_VALUE_LINES if lines else _VALUE).finditer(text):
        if len(m.group()) <= 80 or not lines or not _LINE_SUFFIX.search(m.group()):
            yield m.group(), m.end()
        else:
            yield from ((p.group(), m.start() + p.end()) for p in _VALUE.finditer(m.group()))


# A name joined by hyphens (`wenshuo-dev`, a branch, a slug, a kebab-case key): an identifier
# an agent re-types whole, listed before plain words (with long digit runs, not with
# snake_case: there, English hyphenated words pushed needed values out of agentdojo's lists,
# tune recall 99.5 -> 99.2; bench/README.md, "Toolathlon recall, part ten").
_KEBAB = re.compile(r"[A-Za-z0-9]-[A-Za-z0-9]")


@functools.lru_cache(maxsize=16384)  # a value's rank: the same names recur text after text
def _priority(value: str) -> int:
    if any(c.isalpha() for c in value) and _NOTABLE.search(value):
        return 0  # snake_case, camelCase, dotted and path names, names with digits
    if (value.isdigit() and len(value) >= 6) or _KEBAB.search(value):
        return 1  # a long run of digits (an order, item or phone number), a kebab-case name
    if value.isalpha():
        return 2 if value.islower() else 3
    return 4


def _defined(text: str) -> set[str]:
    """Names that definition lines introduce (`def name`, `class Name`): what is called later."""
    out: set[str] = set()
    for line in text.splitlines():
        m = _DEFINITION.search(line)
        if m:
            rest = line[m.end() :].split("(", 1)[0].split(":", 1)[0]
            out.update(v for v in _VALUE.findall(rest) if len(v) >= 2)
    return out


# An absolute path longer than a value's 80 characters is listed whole, with its leading `/`:
# the file an agent opens, moves or attaches next (a printed dict's
# `'path': '/workspace/…/expense_claim_EXP2024001_invoice_02.pdf'`), which the list used to
# drop. Only values the cap dropped change (not a URL's path, nor a shorter path), so a
# digest without such a path is as before.
_PATH_SEGMENT = re.compile(r"[\w.+-]{1,60}")
PATH_MAX_CHARS = 240


def _long_path(value: str, source: str) -> str:
    """`value` as listed: itself, or `/value` when it is a long absolute path the cap drops."""
    if len(value) <= 80 or len(value) >= PATH_MAX_CHARS or "/" not in value:
        return value
    parts = value.split("/")
    if len(parts) < 3 or any(not _PATH_SEGMENT.fullmatch(p) or _HASH.search(p) for p in parts):
        return value
    if not re.search(r"(?<![\w./:~-])/" + re.escape(value), source):
        return value  # not an absolute path (a URL's host and path, a relative name)
    return f"/{value}"


# Where a value is written as an absolute path: a `/` that no name, path or URL runs into.
_ABSOLUTE = re.compile(r"(?<![\w./:~-])/(?=\w)")


def _absolute(source: str) -> set[str]:
    """The values of `source` (`values`) that it writes as absolute paths of two names at
    least (`/workspace/dumps/workspace`), which the list names with their leading `/`."""
    text = _ESCAPED.sub(" ", source)
    out = set()
    for m in _ABSOLUTE.finditer(text):
        for pattern in (_VALUE, _VALUE_LINES):  # a file's line too (`/src/app.py:12`)
            value = pattern.match(text, m.end())
            if value is not None and "/" in value.group():
                out.add(value.group())
    return out


# A file an output names by its absolute path (`/home/u/repo/src/tensor.c:165:26: error: …`,
# a sub-agent's report's `**File: `/home/u/repo/docs/stacking.tex`**`): the file the agent
# opens next. A capped list ranks it with the names definitions introduce, ahead of a
# build's object files and the words the task names (Claude Code, bench/README.md,
# "Session 72, cc72").
_FILE_NAME = re.compile(r"[\w+-][\w.+-]*\.[A-Za-z][A-Za-z0-9]{0,7}")


# A Python traceback's frame (`File "/usr/lib/python3.9/site-packages/pandas/core/frame.py",
# line 3805, in get_loc`) names the library code a call went through, which the agent does
# not open; the script it ran is the frame `in <module>` (`/workspace/./train_model.py`).
# Ranked first, DA-Code's library frames pushed its lists' names out and longer paths in
# (runs' cost @0.1 -0.110 / -0.138; bench/README.md, "Session 73, dac73").
_FRAME = re.compile(r'^[ \t]*File "/([^"\n]+)", line \d+, in (\S+)', re.MULTILINE)


def _absolute_files(absolute: set[str], source: str) -> set[str]:
    """The values of `absolute` (`_absolute`) whose last name is a file's (`name.ext`), but
    a traceback's library frames (`_FRAME`: no frame of theirs is `in <module>`)."""
    frames: dict[str, bool] = {}
    for path, name in _FRAME.findall(source):
        frames[path] = frames.get(path, False) or name == "<module>"
    return {v for v in absolute
            if _FILE_NAME.fullmatch(v.rsplit("/", 1)[-1]) and frames.get(v, True)}


def _named_path(value: str, absolute: set[str]) -> bool:
    """Whether `value` is an absolute path of `absolute` whose every part is a name, not
    a hash: `_HASH` reads 40 letters, digits and `/` in a row as an encoded blob, so
    `/home/u/vsla/docs/papers/src/sections/stacking.tex` was never listed."""
    return value in absolute and all(
        _PATH_SEGMENT.fullmatch(p) and not _HASH.search(p) for p in value.split("/"))


# A name written with a closing `/` (`tasks/gyy/robots-handler/`, `src/` in a listing): a
# folder, which an agent types as written, while the value list ends names before a `/`. A
# digest made at a queue's later task (`_mentions`' `later`, as LATER_TASK_VALUES) lists such
# a name with its `/`, and lists it though the bare name is known (another result's records
# name it so) unless the kept text writes the folder. Issue-7 yardstick (bench/README.md,
# "Toolathlon queues' recall, part thirty-four"): claude queues' holdout recall 98.980 ->
# 99.076 (a 379-character listing of 5 task folders, 2 typed 3 calls on), tune and the
# deepseek queues' recall equal, cost @0.1 within -0.04..0.
_FOLDER = re.compile(r"(?<![\w.\-/])([A-Za-z0-9_][\w.\-/]*[A-Za-z0-9_])/(?![\w.\-/])", re.ASCII)


def _folders(source: str) -> set[str]:
    """The values of `source` (`values`) that it writes with a closing `/`: the list names
    them with it."""
    return set(_FOLDER.findall(_ESCAPED.sub(" ", source)))


def _listed(value: str, whole: Mapping[str, str], absolute: set[str], folders: set[str]) -> str:
    """`value` as the list names it: an absolute path with its leading `/`, else a link or
    an address whole; a folder with its closing `/`."""
    if value not in absolute and value in whole:
        return whole[value]
    lead = "/" if value in absolute else ""
    return f"{lead}{value}/" if value in folders else f"{lead}{value}"


# A value an agent's own turn writes with a leading `-` or a closing `:` or `.` (`while
# max_heap:`, `(-prev_freq, char)`, `as schema_editor:`, `is 140.`): a text-tool agent re-types
# its own code and prose as written, and a value list that names `max_heap` bare has lost the
# token `max_heap:` its next turn types. The list of such a turn's digest (a text-tool
# agent's: `summarize`'s `named_lines`, `shell_digest`) names the value as written (each
# written form once: each holds the bare value). Issue-7 yardstick (bench/README.md, "Text-tool
# agents' own code turns keep their values as written"). A leading `./` is a written form too
# (`Action: Python(file_path="./check_data.py")`), and a file name the model reads bare
# elsewhere (a listing's `sample_result.csv`) is listed when the turn's prose (outside fenced
# code) wrote it closing a sentence (`sample_result.csv.`) and the digest keeps it in no form
# (`_form_lost`): the bare token was there, the typed one was not. Issue-7 yardstick
# (bench/README.md, "branch `margin56`", "branch `margin57`"): with fenced
# code's forms too (`if x:`) DA-Code queues' holdout cost @0.1 fell 0.12; with numbers' forms
# MINT queues' tune cost fell 0.10; with a closing `.` on a value the digest keeps bare
# (`in bad.txt.` beside `open_file('bad.txt')`) OpenHands queues' holdout cost fell 0.117.
_WRITTEN = re.compile(r"(?<![A-Za-z0-9_./:-])(-|\./)?([A-Za-z0-9_][A-Za-z0-9_.\-/]*[A-Za-z0-9_])"
                      r"([:.]?)(?![A-Za-z0-9_./:-])")


def _written_forms(source: str) -> Mapping[str, str]:
    """The values `source` writes with a leading `-` or a closing `:` or `.`, by value: its
    written forms (`-prev_freq`, `max_heap:`), space-separated, in order of appearance."""
    forms: dict[str, dict[str, None]] = {}
    for m in _WRITTEN.finditer(_ESCAPED.sub(" ", source)):
        if m[1] or m[3]:
            forms.setdefault(m[2], {})[m[0]] = None
    return {v: " ".join(f) for v, f in forms.items()}


# A value as a text writes it: a run of name, path and number characters with its joints
# (`src/a.py:1:0:`, `1:00:01`, `https://…/pep-0257/`, `fonte.0002_initial...`).
_WRITTEN_RUN = re.compile(r"[A-Za-z0-9_./:-]*[A-Za-z0-9_][A-Za-z0-9_./:-]*")


def every_value(text: str, known: frozenset[str] = frozenset()) -> list[str]:
    """Every notable value `text` names that `known` lacks, in order of first appearance,
    each whole as the text writes it (`_WRITTEN_RUN`: a `grep -n` hit's `398:`, a linter's
    `src/a.py:1:0:`, a link): what a result rewritten as its list of values
    (`apply.value_list`) keeps, uncapped: a commit's hash and a long path too, which
    `notable` takes for blobs (a later `git show`, a traceback's file the agent opens)."""
    runs = _WRITTEN_RUN.findall(_ESCAPED.sub(" ", text))
    # a run too long to list (a path's `…/base.py:12:`, a grep hit's) gives its pieces
    named = (piece for v in runs for piece in ([v] if len(v) <= 80 else values(v)))
    return [v for v in dict.fromkeys(named)
            if 2 <= len(v) <= 80 and _NOTABLE.search(v) and v not in known]


# A written form `_form_lost` weighs: a file name (a stem and a letter-led extension) closing a
# sentence or a line with `.` or `:` (`the format of sample_result.csv.`, `sample_submission.csv:`).
# A `./x.py` form, a word's (`the data.`, `Action:`, `e.g.`) or a number's (`is 2000.`) is not:
# on DA-Code queues' tune split they listed `./train_model.py` (89 digests),
# `./preprocess_data.py` (86), `e.g.` (34) ... for 3 calls' values and cost @0.1 -0.028, the
# file-name forms alone kept the recall (+0.248) at cost ±0 (bench/README.md, "branch
# `margin57`").
_FILE_FORM = re.compile(r"[A-Za-z0-9_][\w\-/]+\.[A-Za-z][A-Za-z0-9]{1,4}[.:]", re.ASCII)


def _form_lost(value: str, written: str | None, compact: str) -> bool:
    """Whether a file name the prose wrote closing a sentence (`_FILE_FORM`, among
    `_written_forms`) is missing from `compact`, bare or as written (a form that only closes a
    sentence on a value `compact` keeps bare, `in bad.txt.` beside the code's
    `open_file('bad.txt')`, is not listed)."""
    forms = [f for f in (written or "").split() if _FILE_FORM.fullmatch(f)]
    if not forms or any(f in compact for f in forms):
        return False
    return re.search(rf"(?<![A-Za-z0-9_./:-]){re.escape(value)}(?![A-Za-z0-9_/-]|\.\w)",
                     compact) is None


def _mentions(
    original: str,
    compact: str,
    known: frozenset[str],
    level: int,
    notable_only: bool,
    focus: frozenset[str] = frozenset(),
    periods: bool = False,
    written: bool = False,
) -> str:
    """The values of the omitted text that appear nowhere else the model will see
    (`periods`: `values`'s); `written`: listed as the text writes them (`_written_forms`)."""
    lines = notable_only  # a turn's prose: its `path:line` references whole (`_FILE_LINE`)
    seen = set(values(compact, periods)) | set(values(compact, periods, lines)) | known
    source = _LINE_NO.sub(" ", without_encoded(original))  # no pieces of encoded data
    current = current_terms(focus)
    later = level >= 3 and bool(current) and not notable_only  # a queue's later task
    folders = _folders(source) - _folders(compact) if later else set()
    heads = _header_paths(original) if level >= 3 else set()
    forms = _written_forms(source) if written else {}
    # a value seen bare is listed for a form its prose wrote (outside fenced code)
    prose_forms = _written_forms(_CODE.sub(" ", source)) if written else {}
    absolute = _absolute(source)
    lost = [
        v
        for v in (_long_path(v, source) for v in values(source, periods, lines))
        if (v.lstrip("/") not in seen or v in folders or _form_lost(v, prose_forms.get(v), compact))
        and (not notable_only or _NOTABLE.search(v))
        and (v.startswith("/") or ((len(v) <= 80 or v in heads)
                                   and (not _HASH.search(v) or _named_path(v, absolute))))
    ]
    lost = _without_line_files(lost)
    if notable_only:  # a turn's prose: its links of other schemes, whole
        lost += _bare_links(source, compact, known)
    if not lost:
        return compact
    whole = whole_links(source)
    first = _defined(original) | heads if level >= 3 else set()
    if level >= 3 and not notable_only:
        first |= _absolute_files(absolute, source)
    if level >= 3:  # nearest the end first: a turn's closing words state its plan, an
        lost.reverse()  # output's last lines its result (a traceback's innermost frame)
    # stable: defined names first (level 3), then what the task and the latest calls name,
    # then names, then words, then bare numbers
    trailer = _trailer_values(original) if level >= 3 else set()
    # (by main's focus: a queue's current task's own terms only add values, `_extra`)
    lead = lead_terms(focus)
    lost.sort(key=lambda v: (v in trailer, v not in first, v.lower() not in lead, _priority(v)))
    cap = MENTION_CAP.get(level, 30)
    if level >= 3:
        cap = max(cap, len(original) // MENTION_CHARS_PER_VALUE)
    if later:
        cap += LATER_TASK_VALUES  # an output of a queue's later task (see below)
    extra = _extra(lost[cap:], lambda v: v.lower() in current)
    if extra:
        lost = lost[:cap] + extra + [v for v in lost[cap:] if v not in extra]
        cap += len(extra)
    if whole or absolute or folders:
        lost = [_listed(v, whole, absolute, folders) for v in lost[:cap]] + lost[cap:]
    if forms:
        lost = [forms.get(v, v) for v in lost[:cap]] + lost[cap:]
    return f"{compact}\n{mentions_line(lost, cap)}"


def _without_line_files(lost: list[str]) -> list[str]:
    """`lost` without the files it also lists with a line (`_FILE_LINE`): `core/bun.lock:41`
    holds `core/bun.lock`, which need not take a place of its own."""
    files = {v[: m.start()] for v in lost
             if (m := _LINE_SUFFIX.search(v)) and "." in v[: m.start()]}
    return [v for v in lost if v not in files] if files else lost


# A capped value list is main's (ranked by the first task's terms and the latest calls'); at a
# queue's later task (`focus.Focus`), up to EXTRA_VALUES of the values it left out that name
# the current task's own terms follow it: they add to the list and push out none of main's
# (ranked among main's, `City`, which a later task's statement names, pushed out
# `Toefl_accepted`: bench/README.md, "part twenty-four").
EXTRA_VALUES = 3
# A digest (level 3) of an output (not a turn's prose) made while a queue's later task is
# the current one (`focus.Focus` with the current task's own terms: an API agent's later
# task, `Clock.task_statement`) lists this many values more than its cap. There the step
# share lets a step through every few calls, so an output read once is a digest a call or
# two later, and a value the agent types 3-10 calls on (a branch name of a 14-name listing,
# a month's total under a list of receipts) was past the cap. Issue-7 yardstick
# (bench/README.md, "Toolathlon queues' recall, part thirty-three"): claude queues' holdout
# recall 98.812 -> 98.980, deepseek's 98.966 -> 99.093, tune +0.007 / +0.005, cost @0.1
# within -0.04..0; 10 values: the same recall, deepseek runs' holdout cost -0.12 (a run whose
# user adds a long message reads as a later task); keeping such outputs whole instead (up to
# 200 or 600 tokens, or while 8 turns young) cost 0.2-1.1 points.
LATER_TASK_VALUES = 5


def _extra(rest: list[str], names: Callable[[str], bool]) -> list[str]:
    """The first EXTRA_VALUES of `rest` (what a capped list left out) that `names`."""
    return [v for v in rest if names(v)][:EXTRA_VALUES]


def _bare_links(source: str, compact: str, known: frozenset[str]) -> list[str]:
    """The links of a turn's prose with a scheme other than `http(s)` (`_SCHEME_LINK`) that
    `compact` left out, whole: the value list splits `chrome://apps` into two plain words
    and lists neither, `file:///home/u/x.html` as its path, yet the agent opens or types
    the link whole next (gemini-cli tune: `chrome://apps`, `helium://apps` lost from an
    aged turn's digest). An `http(s)` link is listed whole already (`whole_links`)."""
    if "://" not in source:
        return []
    links = (m.group().rstrip(_LINK_END) for m in _SCHEME_LINK.finditer(source))
    return [link for link in dict.fromkeys(links)
            if link not in compact and link not in known and len(link) <= RECORD_CELL_CHARS * 2]


@functools.lru_cache(maxsize=16)  # read only: an aged turn's two value lists read it again
def whole_links(source: str) -> Mapping[str, str]:
    """The links and e-mail addresses of `source`, by the value the list would name them
    with (a link's host and path, an address's local part): listed whole, as written, they
    are what an agent opens or writes to next (`https://…/lineups/`, `laura.hall@mcp.com`);
    the value list splits them at `:` and `@` and drops a trailing `/`."""
    out: dict[str, str] = {}
    for link in _links(source):
        parts = values(link)
        lead = parts[1] if "://" in link[:12] and len(parts) > 1 else parts[0] if parts else ""
        if lead and len(link) <= RECORD_CELL_CHARS * 2:
            out.setdefault(lead, link)
    return out


def mentions_line(lost: list[str], cap: int) -> str:
    """The line listing values a rewrite left out (the first `cap` of them)."""
    more = f" (+{len(lost) - cap} more)" if len(lost) > cap else ""
    return f"[omitted text mentions: {' '.join(lost[:cap])}{more}]"


def notable(value: str) -> bool:
    """A value an agent re-types (a name with a digit, `_`, `.`, `/`, camelCase), not a
    plain word, a digest or a blob."""
    return bool(_NOTABLE.search(value)) and len(value) <= 80 and not _HASH.search(value)


def _cut(line: str, limit: int = MAX_LINE_CHARS) -> str:
    return line if len(line) <= limit else line[:limit] + " …"


def _omitted(n: int) -> str:
    return f"[…{n} lines]"


def _keep_lines(lines: list[str], keep: set[int], limit: int = MAX_LINE_CHARS) -> str:
    out, gap = [], 0
    for i, line in enumerate(lines):
        if i in keep:
            if gap:
                out.append(_omitted(gap))
                gap = 0
            out.append(_cut(line, limit))
        else:
            gap += 1
    if gap:
        out.append(_omitted(gap))
    return "\n".join(out)


# --- JSON ---------------------------------------------------------------------------------


def _shrink(value: Any, level: int, depth: int = 0) -> Any:
    keep_items = 3 if level == 1 else 1
    max_str = 200 if level == 1 else 80
    if isinstance(value, dict):
        return {k: _shrink(v, level, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        head = [_shrink(v, level, depth + 1) for v in value[:keep_items]]
        if len(value) > keep_items:
            head.append(f"… {len(value) - keep_items} more")
        return head
    if isinstance(value, str) and len(value) > max_str:
        return value[:max_str] + f"… ({len(value)} chars)"
    return value


def _json(text: str, level: int) -> str | None:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        value = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return None
    return orjson.dumps(_shrink(value, level)).decode()


# --- logs and tables ----------------------------------------------------------------------


def _is_log(lines: list[str]) -> bool:
    if len(lines) < 20:
        return False
    stamped = sum(1 for line in lines[:200] if _TIMESTAMP.search(line))
    return stamped >= min(len(lines), 200) * 0.3


def _log(lines: list[str], level: int) -> str:
    window, tail = (2, 3) if level == 1 else (1, 2)
    keep = set(range(min(2, len(lines))))
    first_error = next((i for i, line in enumerate(lines) if _ERROR.search(line)), None)
    if first_error is not None:
        keep |= set(range(max(first_error - window, 0), min(first_error + window + 1, len(lines))))
    keep |= set(range(max(len(lines) - tail, 0), len(lines)))
    return _keep_lines(lines, keep)


def _is_table(lines: list[str]) -> bool:
    if len(lines) < 6:
        return False
    piped = [line for line in lines if line.count("|") >= 2]
    if len(piped) >= len(lines) * 0.8:
        return True
    commas = [line.count(",") for line in lines[:50] if line.strip()]
    tabs = [line.count("\t") for line in lines[:50] if line.strip()]
    return any(min(c) >= 2 and max(c) == min(c) for c in (commas, tabs) if c)


def _table(lines: list[str], level: int) -> str:
    sample = 5 if level == 1 else 2
    header = 2 if len(lines) > 1 and set(lines[1].strip()) <= set("|-:+ ") else 1
    keep = set(range(header + sample)) | {len(lines) - 1}
    return _keep_lines(lines, keep)


# --- text ---------------------------------------------------------------------------------


def _salient(lines: list[str], level: int) -> str:
    """First line, errors with a line either side, definitions (their own allowance), then
    lines naming paths or line numbers, then the last line, within the level's budget."""
    budget = SALIENT_LINES.get(level, 1)
    keep: list[int] = [0]
    for i in [i for i, line in enumerate(lines) if _ERROR.search(line)][:2]:
        keep.extend(range(max(i - 1, 0), min(i + 2, len(lines))))
    keep.extend(i for i, line in enumerate(lines) if _PATH.search(line) or _LINE_REF.search(line))
    keep.append(len(lines) - 1)
    chosen = list(dict.fromkeys(keep))[:budget]
    definitions = [i for i, line in enumerate(lines) if _DEFINITION.search(line)]
    return _keep_lines(lines, set(chosen) | set(definitions[: DEFINITION_LINES.get(level, 2)]))


FENCE_LINES = 8


def _short_fence(fence: str) -> str:
    lines = fence.splitlines()
    if len(lines) <= FENCE_LINES + 2:
        return fence
    return _keep_lines(lines, {0, 1, 2, len(lines) - 2, len(lines) - 1})


# The info strings of a fenced shell block (```` ```bash ````, `sh`, `shell`, unlabelled).
_SHELL_INFOS = frozenset({"", "bash", "sh", "shell", "zsh", "console"})


def _shell_blocks(text: str) -> list[list[str]]:
    """The lines of each fenced shell block of an assistant turn. Fences are paired in
    order, so the closing fence of a ```` ```python ```` block never opens one."""
    out: list[list[str]] = []
    info: str | None = None  # the open fence's info string
    body: list[str] = []
    for line in text.splitlines():
        if not line.startswith("```"):
            if info is not None:
                body.append(line)
            continue
        if info is None:
            info, body = line[3:].strip().lower(), []
            continue
        if info in _SHELL_INFOS and body:
            out.append(body)
        info = None
    return out


def shell_commands(text: str) -> list[str]:
    """The command line of each fenced shell block of an assistant turn (`$ sed -n 10,20p
    a.py`; a longer block, a heredoc, its first line and how many lines follow)."""
    out: list[str] = []
    for body in _shell_blocks(text):
        first = _BLOB.sub(lambda m: f"{m[0][:40]}…({len(m[0])} chars)", body[0])
        more = f" […{len(body) - 1} lines]" if len(body) > 1 else ""
        out.append(f"$ {_cut(first)}{more}")
    return out


# The mention list of a masked text-tool turn: up to 10 values (a level-3 digest's cap, not
# growing with the turn's length), and only values an earlier turn's shell blocks carried too
# (`typed`): what the agent typed in two scripts (a reproduction script's set-up names,
# `INSTALLED_APPS`, `schema_editor.create_model`) it is likely to type once more, a script's
# one-off names rarely. Every value of the bodies, 6 of them, cost @0.1 -0.10 for recall
# +0.12 on the mini-SWE queues' tune split; these 10 -0.06 for +0.13 (bench/README.md, "A
# masked text-tool turn keeps the names it typed before").
MASK_VALUES = MENTION_CAP[3]


def shell_digest(text: str, known: frozenset[str] = frozenset(), original: str = "",
                 typed: Callable[[str], bool] | None = None) -> str:
    """An aged text-tool turn's commands as its mask keeps them: each block's command line
    (`shell_commands` of `text`, the turn as last sent), then the notable values the rest of
    the blocks of `original` (the turn as the client sent it; `text` if empty) name that the
    model sees nowhere else (a heredoc script's names, an edit's line numbers) and that
    `typed` (an earlier turn typed them too; any value without it), names first."""
    lines = "\n".join(shell_commands(text))
    if not lines:
        return ""
    seen = set(values(lines)) | known
    source = _LINE_NO.sub(" ", without_encoded(_shell_bodies(original or text)))
    lost = sorted((v for v in (_long_path(v, source) for v in values(source))
                   if v.lstrip("/") not in seen and _NOTABLE.search(v)
                   and (v.startswith("/") or (len(v) <= 80 and not _HASH.search(v)))
                   and (typed is None or typed(v))), key=_priority)
    if not lost:
        return lines
    forms = _written_forms(source)
    return f"{lines}\n{mentions_line([forms.get(v, v) for v in lost[:MASK_VALUES]], MASK_VALUES)}"


# A line that is one tag alone, opening (`<tool-use>`, `<save args='main.py'>`) or closing
# (`</thinking>`): the markup a text-tool agent writes its calls and its reasoning in.
_TAG_LINE = re.compile(r"[ \t]*<(/?)([A-Za-z][\w.:-]*)(?:\s[^<>\n]*)?>[ \t]*")
MARKUP_DEPTH = 2  # an element and the elements it opens directly (`<tool-use>` `<save …>`)


def markup(text: str) -> str:
    """The skeleton of an assistant turn's markup: its lines that are a tag alone, outside
    fenced code, in order, an element and its children only (`MARKUP_DEPTH`: not the
    HTML a `<save>` element writes), each closing tag with the opening line it closes,
    `…` where text stood between them (`<thinking>…</thinking><tool-use><shell>…</shell>
    </tool-use>`); "" when the turn has none. An agent that writes its calls as markup
    writes the same tags on every turn, and its next turn is read for them: a digest or a
    mask that keeps its prose's first line and its code left its old turns without them
    (bench/README.md, "Aged replies keep their markup")."""
    lines = _FENCE.sub("", text).splitlines()
    open_at: list[tuple[str, int]] = []  # the open elements: name, index of the opening line
    kept: dict[int, str] = {}
    for i, line in enumerate(lines):
        m = _TAG_LINE.fullmatch(line)
        if m is None:
            continue
        name = m.group(2)
        if not m.group(1):
            open_at.append((name, i))
            continue
        at = next((k for k in range(len(open_at) - 1, -1, -1) if open_at[k][0] == name), None)
        if at is None:
            continue
        if at < MARKUP_DEPTH:
            start = open_at[at][1]
            kept[start] = lines[start].strip()
            kept[i] = lines[i].strip()
        del open_at[at:]
    out: list[str] = []
    last = -1
    for i in sorted(kept):
        if out and i > last + 1 and kept[i].startswith("</") and not out[-1].startswith("</"):
            out.append("…")
        if not out or kept[i] != out[-1]:  # a tag written twice in a row (`<think>`), once
            out.append(kept[i])
        last = i
    return "".join(out)


def _shell_bodies(text: str) -> str:
    """The lines of a turn's fenced shell blocks after each block's command line."""
    return "\n".join(line for body in _shell_blocks(text) for line in body[1:])


@functools.lru_cache(maxsize=8192)
def shell_values(text: str) -> frozenset[str]:
    """The values the bodies of a turn's fenced shell blocks carry (`_shell_bodies`)."""
    return frozenset(values(_LINE_NO.sub(" ", _shell_bodies(text))))


def _codey(sentences: list[str], known: frozenset[str]) -> list[str]:
    """Up to 3 sentences (after the first) naming code, paths or numbers, in their order:
    those naming a notable value the model has not read above first (the turn's own
    findings: `348 / 12 = 29`), then those that only repeat what it read."""
    codey = [i for i, x in enumerate(sentences) if i and _CODEY.search(x)]
    new = [
        i for i in codey
        if any(_NOTABLE.search(v) and v not in known for v in values(sentences[i]))
    ]
    chosen = sorted([*dict.fromkeys([*new, *codey])][:3])
    return [sentences[i][:300] for i in chosen]


# The agent's latest talk turn, aged on a small call with no target, keeps the lines that
# close on a value of the current step (`step`: the values of the latest result and request):
# the sentence the agent re-tells when the step is done ("…from order #W5565470.").
# bench/README.md, "Recall >= 99% on every split, part two": tau2 retail-4.1 runs' tune
# recall 98.21 -> 99.49%; every line naming a step value (not only closing on one) cost the
# short runs 0.2-3.4 points of late reduction.
def _valued(sentences: list[str], step: frozenset[str]) -> list[str]:
    """The lines (after the first sentence) that close on a notable value of the step."""
    rest = "\n".join(sentences[1:]).splitlines()
    return [_cut(line, DIGEST_LINE_CHARS) for line in (x.strip() for x in rest)
            if any(_NOTABLE.search(v) and v in step and _closes(line, v) for v in values(line))]


def _closes(line: str, value: str) -> bool:
    """Whether `value` is the line's closing words (the value, then a full stop)."""
    return line.endswith((f"{value}.", f"{value}!", f"{value}?"))


# The lines of code a text-tool agent's prose names (`line 405.`, `Lines 276-279:`, a prose line
# opening on its number, `1025: \`if not value\``), each as written with its closing `.` or
# `:`: a shell agent reasons over line numbers and re-types them in its next turns (an insert
# before 405, `sed -n '400,410p'`), and a digest that drops the turn's prose lost them. An
# aged turn's digest keeps the last LINE_REFS of them, between ellipses. Issue-7 yardstick
# (bench/README.md, "An aged shell turn keeps the lines its prose named"): mini-SWE-agent
# queues' tune recall 98.911 -> 99.05, runs 99.29 -> 99.39; with a `[lines named: …]` header
# the runs' cost @0.1 fell 0.12 point, without it 0.06.
_LINE_REF = re.compile(
    r"\b[Ll]ines?\s+\d+(?:\s*-\s*\d+)?[.:]?|^[ \t]*\d{2,}(?:-\d+)?:", re.MULTILINE)
LINE_REFS = 6


# A masked turn lists at most this many of its `path:line` citations (OpenCode's longest
# plan cites 17)
CITED_LINES = 24


def cited_lines(prose: str, known: frozenset[str] = frozenset()) -> list[str]:
    """The files with a line that `prose` cites (`core/bun.lock:41`, `_FILE_LINE`), distinct,
    in written order, up to CITED_LINES, none longer than a listed value's 80 characters (a
    traceback's `…/site-packages/…/orchestrator.py:216`) nor in `known`."""
    cited = (m.group() for m in re.finditer(_FILE_LINE, _ESCAPED.sub(" ", prose)))
    return [v for v in dict.fromkeys(cited) if len(v) <= 80 and v not in known][:CITED_LINES]


def line_refs(prose: str) -> str:
    """The lines of code `prose` names (`_LINE_REF`), the last LINE_REFS distinct ones as
    written, between ellipses; "" when it names none."""
    refs = list(dict.fromkeys(m.strip() for m in _LINE_REF.findall(prose)))[-LINE_REFS:]
    return f"… {' … '.join(refs)} …" if refs else ""


def _assistant(
    text: str, level: int, whole_commands: bool = False, known: frozenset[str] = frozenset(),
    step: frozenset[str] = frozenset(), named_lines: bool = False,
) -> str:
    fences = [m.group(0) for m in _CODE.finditer(text) if _kept_code(m)]
    prose = _CODE.sub(lambda m: " " if _kept_code(m) else m.group(0), text).strip()
    sentences = [x for x in re.split(r"(?<=[.!?:])\s+", prose) if x.strip()] if prose else []
    parts: list[str] = []
    if level == 1 and sentences:
        # the first sentence, and those naming code, paths or numbers
        parts = [sentences[0][:300], *_codey(sentences, known)]
    if level >= 3:  # an old command keeps its shape, not the payload it pasted
        fences = [_BLOB.sub(lambda m: f"{m[0][:40]}…({len(m[0])} chars)", f) for f in fences]
        if not whole_commands:
            fences = [_short_fence(f) for f in fences]
    parts.extend(fences)
    if named_lines and level >= 3 and (refs := line_refs(prose)):
        parts.append(refs)
    if not parts and sentences and step and level >= 2:
        parts = [sentences[0][:300], *_valued(sentences, step)]
    return "\n".join(parts) if parts else (sentences[0][:300] if sentences else "")


# A line that is a file's path and nothing else, heading a fenced block of its code: a
# code-search result groups the spans it found under such lines (Moatless Tools' `Viewed
# relevant code:` / `django/forms/boundfield.py` / ```` ``` ````), and the agent types the
# path next, as the file it views or edits. A digest (level 3) lists such paths first, with
# the names the text defines: ranked as any path, they fell past the cap of a search result
# naming 200+ values (Moatless runs, tune: 17 of 36 missed values were such paths; recall
# 98.63 -> 99.29%, cost @0.1 -0.02; bench/README.md, "Code-search results' file paths").
# Keeping the lines themselves instead gained the same recall for 0.13 point of cost @0.1.
# Such a path is listed however long (below PATH_MAX_CHARS): a list drops other values of
# more than 80 characters, and a test fixture's path (`tests/roots/test-ext-autosummary-
# imported_members/autosummary_dummy_package/__init__.py`, 86) is typed next as any other
# (Moatless queues, tune: recall 98.59 -> 98.82%; bench/README.md,
# "Code-search results: long path lines").
# With each path, the first and last line numbers of the numbered code under it (a `cat -n`
# listing's `  1810\t…`): the agent views a range next that starts or ends where a span it
# read did (`ViewCode` 262-302, 1732-1810), and a list ranked them as bare numbers, last
# (Moatless queues, tune: recall 98.82 -> 99.05%; bench/README.md, "Code-search results: long
# path lines").
_PATH_LINE = re.compile(rf"(?:/?(?:[\w.+-]+/)+)?[\w+-][\w.+-]*\.(?:{_FILE_EXTENSIONS})")
_NUMBERED = re.compile(r"\s*(\d+)\t")
HEADER_LINES = 8


def _header_paths(text: str) -> set[str]:
    """The values of the first HEADER_LINES lines of `text` that are a path alone, each
    above a fence (`_PATH_LINE`), and the first and last line numbers of each one's block."""
    if "```" not in text:
        return set()
    lines = [line for line in text.splitlines() if line.strip()]
    out: set[str] = set()
    heads = 0
    for i, (line, below) in enumerate(itertools.pairwise(lines)):
        if heads == HEADER_LINES:
            break
        if not (_PATH_LINE.fullmatch(line.rstrip()) and below.startswith("```")):
            continue
        heads += 1
        out.update(v for v in values(line) if len(v) < PATH_MAX_CHARS)
        numbers = []
        for code in itertools.takewhile(lambda x: not x.startswith("```"), lines[i + 2 :]):
            if m := _NUMBERED.match(code):
                numbers.append(m.group(1))
        if numbers:
            out.update((numbers[0], numbers[-1]))
    return out


FOCUS_LINES = 1  # 1 measured best: 2-3 cost ~0.5 points of late saving, no recall gained


def _digest(lines: list[str], known: frozenset[str], focus: frozenset[str] = frozenset()) -> str:
    """First line, up to two error lines, the lines carrying the most focus terms and the
    last line; the rest is left to the values. A numbered line is a file's source, not an
    error the command met; a line all of whose values the model has read above (a status
    line every edit prints, the `[File: …]` header of a file the agent just wrote) is left
    out, the first line too: the command above it says what the output was."""
    if not lines:
        return ""
    errors = [i for i, line in enumerate(lines)
              if _ERROR.search(line) and not _VIEW_LINE_NO.match(line)]
    read = code_line if numbered_listing(lines) else str  # a listing's line numbers: not values
    keep: set[int] = set()
    for i in [0, *errors[:2], *_focus_lines(lines, focus), len(lines) - 1]:
        if not set(_VALUE.findall(read(lines[i]))) <= known:
            keep.add(i)
    return _keep_lines(lines, keep, DIGEST_LINE_CHARS)


# A trailer: the banner-headed run of `Label: value` lines a runner prints after every
# output (`=== EXECUTION INFO ===` / `Return code: 0` / `Execution time: 0.04 seconds`).
# The same few labels close every run of the tool; the lines above it are the result the
# agent copies next, so the trailer's own values are listed after the result's. Issue 7
# (bench/README.md, "part twenty-two", variant R, and "part twenty-two's variant R on every
# row": deepseek runs tune recall 99.18 -> 99.19%, every other row's recall and cost equal;
# keeping the line above the banner as the digest's last line instead cost the claude
# queues' tune split 0.3 points of cost @0.1 and 0.1 recall).
_BANNER = re.compile(r"^\s*([=*#~-])\1{2,}.*\1{3}\s*$|^\s*([=*#~-])\2{2,}\s*$")
_LABELLED = re.compile(r"^\s*[A-Za-z][A-Za-z ]{0,30}:\s*\S.{0,60}$")
TRAILER_LINES = 5


def trailer_start(lines: list[str]) -> int:
    """Where the output's trailer begins (its banner's index), or `len(lines)` if it has
    none: a banner, then 1..TRAILER_LINES non-blank `Label: value` lines closing the output,
    under at least one line that is not a banner."""
    body = [i for i, line in enumerate(lines) if line.strip()]
    tail = body[-TRAILER_LINES - 1:]
    for k, i in enumerate(tail):
        rest = tail[k + 1:]
        if (_BANNER.match(lines[i]) and rest and all(_LABELLED.match(lines[j]) for j in rest)
                and any(not _BANNER.match(lines[j]) for j in body if j < i)):
            return i
    return len(lines)


def _trailer_values(text: str) -> set[str]:
    """The values only an output's trailer names (its labels, its run's time)."""
    lines = text.splitlines()
    start = trailer_start(lines)
    if start == len(lines):
        return set()
    return set(values("\n".join(lines[start:]))) - set(values("\n".join(lines[:start])))


def _focus_lines(lines: list[str], focus: frozenset[str]) -> list[int]:
    """Up to FOCUS_LINES lines (after the first) with the most distinct focus terms."""
    if not focus:
        return []
    hits = [(focus_hits(line, focus), i) for i, line in enumerate(lines) if i]
    best = sorted((h for h in hits if h[0]), key=lambda h: (-h[0], h[1]))[:FOCUS_LINES]
    return sorted(i for _, i in best)


def _structured(
    text: str, kind: str, level: int, known: frozenset[str], focus: frozenset[str],
    whole_commands: bool, step: frozenset[str] = frozenset(), named_lines: bool = False,
) -> str:
    if kind in ("assistant", "tool_call"):
        return _assistant(text, level, whole_commands, known,
                          step if kind == "assistant" else frozenset(), named_lines)
    compact = _json(text, level)
    if compact is not None:
        return compact
    lines = [line for line in text.splitlines() if not _PROMPT.match(line)]
    if numbered_listing(lines):  # its kept lines keep their numbers, not the padding
        lines = [_compact_gutter(line) for line in lines]
    if len(lines) <= SHORT_LINES.get(level, 3):
        if level >= 3:  # lines that all read as prompts (`<output>`, `</output>`) kept
            return _digest([line for line in lines if line.strip()] or lines
                           or text.splitlines(), known, focus)
        return "\n".join(_cut(line) for line in lines)
    if len(lines) <= 3:
        return "\n".join(_cut(line) for line in lines) if level == 1 else _cut(text[:200])
    if level >= 3:
        return _digest([line for line in lines if line.strip()] or lines, known, focus)
    if _is_log(lines):
        return _log(lines, level)
    if _is_table(lines):
        return _table(lines, level)
    return _salient(lines, level)


# --- MCP content blocks ---------------------------------------------------------------------

_BLOCK_KEYS = frozenset({"type", "text", "annotations", "_meta"})


def envelope(text: str) -> str | None:
    """The text an MCP-style content block carries (`{"type": "text", "text": "…"}`, or a
    list of them), or None when `text` is not one: a tool result forwarded as the JSON of its
    content blocks is digested as the payload it carries, whose own structure (a JSON table,
    a list of hits, a report) the JSON digest would otherwise see as one long string."""
    head = text[:24].lstrip()
    if not (head.startswith('{"type"') or head.startswith('[{"type"')):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    blocks = value if isinstance(value, list) else [value]
    parts: list[str] = []
    for block in blocks:
        if not (isinstance(block, dict) and block.get("type") == "text"
                and isinstance(block.get("text"), str) and block.keys() <= _BLOCK_KEYS):
            return None
        parts.append(block["text"])
    return "\n".join(parts) if parts else None


# --- a JSON record whose bulk is one text field ------------------------------------------------

# A record's string field this long at least, holding this share of the record's characters,
# is its text: a file API's `{"name": …, "path": …, "content": "<a README>"}`, a template's
# body. Digested as a JSON record, the text was one string cut at its head, the names in it
# (datasets, links, commands) cut with it; digested as the text it is, its lines carrying the
# task's terms stay and its values are listed (bench/README.md, "A JSON record's text field
# digested as text").
RECORD_TEXT_CHARS = 1000
RECORD_TEXT_SHARE = 0.7
RECORD_SHORT_CHARS = 120  # a record's other scalar fields this long at most go in its header


def record_text(text: str) -> tuple[str, str] | None:
    """(header, body) of a JSON object whose one string field is its text (RECORD_TEXT_CHARS
    long at least, a line break and a space in it, RECORD_TEXT_SHARE of the record's
    characters): the body is that field's value, the header the record's compact JSON with
    its other short scalar fields and the text field's key naming the body's length. None for
    any other text."""
    stripped = text.strip()
    if len(stripped) < RECORD_TEXT_CHARS or not stripped.startswith("{"):
        return None
    try:
        value = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    key, body = max(((k, v) for k, v in value.items() if isinstance(v, str)),
                    key=lambda kv: len(kv[1]), default=("", ""))
    if (len(body) < RECORD_TEXT_CHARS
            or len(orjson.dumps(body)) < RECORD_TEXT_SHARE * len(stripped)
            or "\n" not in body or " " not in body):
        return None
    head = {k: (f"({len(body)} chars below)" if k == key else v) for k, v in value.items()
            if k == key or ((isinstance(v, str | int | float | bool) or v is None)
            and len(str(v)) <= RECORD_SHORT_CHARS)}
    return orjson.dumps(head).decode(), body


FIELD_CHARS = 60  # a field value this long at most is one an agent copies whole
# Characters of an unwrapped payload's digest given to its field values: one per this many
# characters of the payload, at least FIELD_MIN.
FIELD_CHARS_PER_CHAR = 8
FIELD_MIN = 240
_FIELD_SPLIT = re.compile(r"\s*(?:\||\t|\n|\s{2,}|\"\s*[:,]?\s*\"?|^\"|\"$)\s*")
_KEY = re.compile(r"^[\w .()/-]{1,40}:\s+(?=\S)")
# a framework's (or our own) mark where it cut a text short, `[... 76373 characters cut ...]`:
# no value of the payload, never listed as one (a cut block's fields line listed it;
# bench/README.md, "Toolathlon queues' recall, part twelve")
_CUT_MARK = re.compile(
    r"(?i)\[[^\]\n]{0,24}?\b\d[\d,]*\s+(?:characters?|chars?|bytes|lines|tokens)\s+"
    r"(?:cut|truncated|omitted|elided|removed)\b[^\]\n]{0,24}\]?")


def _leaves(value: Any, out: list[str]) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _leaves(v, out)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, out)
    elif isinstance(value, str):
        out.append(value)


def fields(text: str) -> list[str]:
    """Short multi-word values of a payload (a JSON document's string leaves, a table's
    cells, the value of a `Key: value` line, a Markdown `- **Key:** value` read as one), in
    order of first appearance: column headers, titles, names and questions an agent re-types
    whole, which the value list (one word at a time) cannot carry; a text's section titles
    (a Markdown heading, a line ending in a colon) after its other fields, so that a capped
    line keeps the values ("part nineteen": claude queue 98.96 -> 98.97 tune, 98.75 -> 98.77
    holdout). Then the names inside a JSON document's text leaves (`_text_names`), which its
    digest cuts at their head.
    Issue-7 yardstick (bench/README.md, "Toolathlon queues' recall, part seventeen"):
    claude queues recall 98.68 -> 98.82 tune, 98.67 -> 98.75 holdout, cost equal."""
    stripped = text.strip()
    raw: list[str] = []
    if stripped[:1] in ("[", "{"):
        try:
            _leaves(orjson.loads(stripped), raw)
        except orjson.JSONDecodeError:
            raw = []
    names = _text_names(raw)
    heads: list[str] = []
    if not raw:
        for line in stripped.splitlines():
            # a section title (`### 4. Customer Service`, `Promotion Details:`) names no value
            # an agent copies: listed after the other fields, which a capped line keeps first
            into = heads if _MARKDOWN_HEAD.match(line) or _BARE_HEAD.match(line) else raw
            line = _MARKDOWN_KEY.sub(r"\1:", _MARKDOWN_HEAD.sub("", line))
            for cell in _FIELD_SPLIT.split(line):
                key = _KEY.match(cell)
                # `Key: two words`: the value alone (the cell repeated it); `Date: 2025-10-17`,
                # whose value is one word, the cell
                into.append(cell[key.end():] if key and " " in cell[key.end():].strip() else cell)
    out = (" ".join(f.split()) for f in raw + heads)
    return list(dict.fromkeys(
        [f for f in out
         if " " in f and len(f) <= FIELD_CHARS and any(c.isalpha() for c in f)
         and not _CUT_MARK.search(f)] + names
    ))


# A Markdown list item's bold key, `- **Options:** Very willing, …` or `**Date**: …`: read
# as the `Options: …` line it is (the bullet and the emphasis are no part of the value).
_MARKDOWN_KEY = re.compile(r"^[ \t]*(?:[-*+•][ \t]+|\d{1,3}[.)][ \t]+)?(?:\*\*|__)"
                           r"([\w .()/-]{1,40}?)(?::(?:\*\*|__)|(?:\*\*|__):)")
# A Markdown heading's mark (`### 4. `): no part of the line's value. (A plain list item's
# bullet stays: `- academic_warning_sink` is a field, and stripped to one word it was listed
# in the records line instead, crowding out the destinations there; part fifteen's test.)
_MARKDOWN_HEAD = re.compile(r"^[ \t]*#{1,6}[ \t]+(?:\d{1,3}[.)][ \t]+)?")
# A plain-text section title: a line of words ending in a colon, nothing after it
# (`📅 Promotion Details:`; not `- Date: 2025-10-17`, not a bulleted `- Options:`).
_BARE_HEAD = re.compile(r"^[ \t]*[^\s\-*+•|][^:|\t]{0,58}:[ \t]*$")
# A name inside running text: two or more capitalised words (`English Entrance Qualification
# Examination`, `Language Lab L101`), joined by at most one short lower-case word between.
_NAME_RUN = re.compile(
    r"(?<![\w-])[A-Z][\w'&.-]*(?:[ \t]+(?:(?:of|and|for|the|de|in|on|at|to)[ \t]+)?"
    r"[A-Z][\w'&-]*)+")


def _text_names(leaves: list[str]) -> list[str]:
    """The names (`_NAME_RUN`) in a JSON document's text leaves — strings longer than a field
    with a line break (an announcement's `message`, a page's `body`) — in order: a course,
    an exam, a person named in a record's text, which the JSON digest cuts at the string's
    head and the value list splits into words."""
    out: list[str] = []
    for leaf in leaves:
        if len(leaf) <= FIELD_CHARS or "\n" not in leaf:
            continue
        out.extend(m.group().rstrip(".") for m in _NAME_RUN.finditer(leaf))
    return [n for n in out if " " in n and len(n) <= FIELD_CHARS]


def _with_fields(payload: str, compact: str, known: frozenset[str],
                 focus: frozenset[str], bound: int | None = None) -> str:
    """`compact` and a line of the payload's field values it left out, within a size bound
    (FIELD_CHARS_PER_CHAR, or `bound` characters): those naming the focus terms first, then
    in order."""
    lost = [f for f in fields(payload) if f not in compact and f not in known]
    if not lost:
        return compact
    lead = lead_terms(focus)
    lost.sort(key=lambda f: not focus_hits(f, lead))
    if bound is None:
        bound = max(FIELD_MIN, len(payload) // FIELD_CHARS_PER_CHAR)
    return _with_line(compact, "omitted fields", lost, bound, current_terms(focus))


# A plain-text output's `Key: several words` line (a script's printed `Title: Welcome to
# English Literature-7`): its value is one an agent re-types whole, yet a digest drops the line
# when each of its words is read above, and the value list carries the words one at a time.
# Listed only when the digest kept none of the output's lines (`_ELIDED_ONLY`): listed under
# every plain-text digest, the added lines moved fold decisions and lost more than they
# gained (claude queue tune recall 98.97 -> 98.85; bench/README.md, "part twenty-one").
# And only when such lines are a tenth of its lines at least (KEYED_SHARE): a printed record,
# not a page whose header names it (a browser observation's `Title:` / `URL:` tab lines over
# hundreds of accessibility-tree lines, its title also the tree's root): listed there, the
# line cost webchorearena holdout 0.11 of cost @0.1 and no value (bench/README.md, "part
# twenty-one's fields line for printed records only").
_KEYED_LINE = re.compile(r"^[ \t]*[A-Za-z][A-Za-z _()/-]{0,39}:[ \t]+([A-Za-z].*?)[ \t]*$",
                         re.MULTILINE)
_ELIDED_ONLY = re.compile(r"(?:\[…\d+ lines\]\n?)+")
KEYED_SHARE = 10  # `Key: value` lines are at least 1 in KEYED_SHARE of a record's lines


def _keyed_record(text: str) -> bool:
    """Whether `text`'s `Key: value` lines are at least 1 in KEYED_SHARE of its lines."""
    lines = sum(1 for line in text.splitlines() if line.strip())
    return len(_KEYED_LINE.findall(text)) * KEYED_SHARE >= lines


def _lost_keyed(text: str, compact: str, known: frozenset[str],
                focus: frozenset[str]) -> list[str]:
    """The multi-word values of `text`'s `Key: value` lines (FIELD_CHARS long at most) that
    `compact` and `known` do not carry, those naming the focus terms first, then in order."""
    out = (" ".join(v.split()) for v in _KEYED_LINE.findall(text))
    lost = [v for v in dict.fromkeys(out)
            if " " in v and len(v) <= FIELD_CHARS and any(c.isalpha() for c in v)
            and v not in compact and v not in known and not _CUT_MARK.search(v)]
    lead = lead_terms(focus)
    lost.sort(key=lambda v: not focus_hits(v, lead))
    return lost


def _with_line(compact: str, label: str, lost: list[str], bound: int,
               current: frozenset[str] = frozenset()) -> str:
    """`compact` and a line `[label: a; b (+n more)]` of `lost`'s first items, in order,
    within `bound` characters (each item and its separator), then those of the rest that
    name `current` (a queue's current task's own terms, `_extra`)."""
    kept: list[str] = []
    used = 0
    for f in lost:
        if used + len(f) + 2 > bound:
            break
        kept.append(f)
        used += len(f) + 2
    if current:
        kept += _extra(lost[len(kept):], lambda f: focus_hits(f, current) > 0)
    if not kept:
        return compact
    more = f" (+{len(lost) - len(kept)} more)" if len(lost) > len(kept) else ""
    return f"{compact}\n[{label}: {'; '.join(kept)}{more}]"


# --- a large payload's records: the short cells that name each one ---------------------------

# Keys whose values name a record (an id, a name, an address, a code, a link): the values an
# agent picks from a listing and re-types in a later call, one record at a time.
_NAMING_KEY = re.compile(
    r"(?i)(?:^|[_.-])(?:id|ids|name|names|title|email|mail|e-mail|url|link|href|code|slug|"
    r"login|username|user|sku|key|label|value|repo|path|file|filename|symbol|number|phone)$"
    r"|(?:Id|Name|Title|Email|Url|Code|Key|Number)$"
)
# a member that is a list of strings (a form field's options, a record's tags): its items are
# the choices an agent types back, named by the list's key
_LIST = re.compile(r'"([^"\\\n]{1,60})"\s*:\s*\[\s*((?:"(?:[^"\\\n]|\\.){0,240}"\s*(?:,\s*)?)+)\]')
_LIST_KEY = re.compile(r"(?i)option|choice|enum|values|tags|labels|categor|answers")
_STRING = re.compile(r'"((?:[^"\\\n]|\\.){0,240})"')
_PAIR = re.compile(r'"([^"\\\n]{1,60})"\s*:\s*("(?:[^"\\\n]|\\.){0,240}"|-?\d+(?:\.\d+)?)')
# A link or an e-mail address in running text: kept whole (the value list splits them). A
# link keeps the parentheses and square brackets it opens and closes itself, nested two deep,
# as GitHub's autolinker and twitter-text do (`…/wiki/Foo_(bar)`, `…/S(d3adb33f)/page`,
# `…?filter[state]=open`); a closer it did not open ends it (`(see https://…/a_(b))` is
# `https://…/a_(b)`), and so does its trailing punctuation (`_links`). Before, any bracket
# ended it: `…/wiki/Foo_`. A brace still does: `…/events{/privacy}` is a URI template, its
# link `…/events` (GitHub's API lists hundreds).
_LINK_CHAR = r"[^\s\"'<>()\[\]{}|\\`]"
_BRACKETS = (("\\(", "\\)"), ("\\[", "\\]"))
_LINK_INNER = "|".join(f"{o}{_LINK_CHAR}*{c}" for o, c in _BRACKETS)
_LINK_GROUP = "|".join(f"{o}(?:{_LINK_CHAR}|{_LINK_INNER})*{c}" for o, c in _BRACKETS)
# An address starts where its run of name characters does: tried at every character of a
# long run with no `@` (a blob, a minified line), it took quadratic time (20,000 characters:
# 4.7 s).
_LINK = re.compile(rf"https?://(?:{_LINK_CHAR}|{_LINK_GROUP})+"
                   r"|(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# A link of another scheme (`chrome://apps`, `file:///…`, `s3://…`, `ssh://…`), as `_LINK`
# reads one; its scheme starts where its run of name characters does (`_bare_links`)
_SCHEME_LINK = re.compile(rf"(?<![\w+.-])(?!https?://)[A-Za-z][\w+.-]{{0,15}}://"
                          rf"(?:{_LINK_CHAR}|{_LINK_GROUP})+")
_LINK_END = ".,;:!?*~"  # GitHub's autolinker's trailing punctuation, but for `_` (`…/Foo_`)

_JSON_ESCAPE = re.compile(r'\\(u[0-9a-fA-F]{4}|["\\/bfnrt])')
_UNESCAPE = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\",
             "/": "/"}
_CUT_BLOCK = re.compile(r'^\s*\[?\s*\{\s*"type"\s*:\s*"text"\s*,\s*"text"\s*:\s*"')
RECORD_CELL_CHARS = 60  # a naming cell this long at most (a link: twice as long)
# Characters of a large payload's digest given to the cells naming its records: one per this
# many characters of the payload. Payloads shorter than RECORD_MIN_PAYLOAD get none.
RECORD_CHARS_PER_CHAR = 8
RECORD_MIN_PAYLOAD = 2400  # ~600 tokens: shorter results are kept whole or digested as before


def _links(text: str) -> Iterator[str]:
    """The links and e-mail addresses of `text` (`_LINK`), without their trailing
    punctuation, in order."""
    for m in _LINK.finditer(text):
        yield m.group().rstrip(_LINK_END)


_CLOSERS = {")": "(", "]": "["}


def _link_end(link: str) -> str:
    """A link read to the end of its line or word, as GitHub's autolinker ends it: without
    its trailing punctuation, nor a trailing closer it did not open (`…/a_(b)).` is
    `…/a_(b)`)."""
    while True:
        link = link.rstrip(_LINK_END)
        opener = _CLOSERS.get(link[-1:])
        if opener is None or link.count(opener) >= link.count(link[-1]):
            return link
        link = link[:-1]


def _unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        return chr(int(code[1:], 16)) if code[0] == "u" else _UNESCAPE[code]
    return _JSON_ESCAPE.sub(one, text)


def cut_payload(text: str) -> str | None:
    """The text a content block cut short carries (a framework cut its JSON mid-string, so
    `envelope` cannot read it): everything after its `"text": "` with the string escapes
    decoded; any cut marker stays as it was. None for any other text (a block that parses,
    or text that is not a content block)."""
    m = _CUT_BLOCK.match(text[:64])
    if m is None or envelope(text) is not None:
        return None
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return _unescape(text[m.end():])
    return None


def _naming_cells(payload: str, lines: bool = False) -> list[str]:
    """The values naming a payload's records, in order: a JSON (or JSON-like, cut) payload's
    string members of at least 4 characters and numbers of at least 3 digits under keys that
    name a record (`id`, `name`, `email`, `url`, `code`, `value`, …), read at a second level
    where JSON is serialised inside its strings; with `lines`, a text's records listed one a
    line (`_TEXT_CELL`); then every link and e-mail address."""
    out: list[str] = []
    levels = [payload]
    if payload.count('\\"') >= 4:
        levels.append(_unescape(payload))
    for text in levels:
        for key, raw in _PAIR.findall(text):
            if not _NAMING_KEY.search(key):
                continue
            if raw.startswith('"'):
                value = " ".join(_unescape(raw[1:-1]).split())
                link = value.startswith(("http://", "https://"))
                if (len(value) < 4 or len(value) > RECORD_CELL_CHARS * (2 if link else 1)
                        or _HASH.fullmatch(value.split("/")[-1] or "-")):
                    continue
            else:
                value = raw
                if len(value.lstrip("-").split(".")[0]) < 3:
                    continue
            out.append(value)
        for key, items in _LIST.findall(text):
            if _NAMING_KEY.search(key) or _LIST_KEY.search(key):
                out.extend(v for v in (" ".join(_unescape(i).split())
                                       for i in _STRING.findall(items))
                           if 4 <= len(v) <= RECORD_CELL_CHARS)
    json_cells = bool(out)
    if not out and lines:  # a text listing records one a line: their names and paths
        out.extend(_csv_cells(payload))
        for m in _TEXT_CELL.finditer(payload):
            value = (m.group(1) or m.group(2) or m.group(3)).rstrip(".,;:!?")
            if 4 <= len(value) <= RECORD_CELL_CHARS * 2 and not _HASH.fullmatch(value):
                out.append(value)
    for value in ([] if json_cells else _links(payload)):  # JSON: its url/href members
        if len(value) <= RECORD_CELL_CHARS * 2:
            out.append(value)
    return list(dict.fromkeys(out))


CSV_MIN_ROWS = 2  # data rows under the header line


def _csv_cells(payload: str) -> list[str]:
    """A comma-separated table's cells that tell its rows apart (`179`, `Frank Phillips`;
    not a value repeated on another row, `active`), row by row: a file of records (a roster,
    an export) the agent reads once and works through one row a call. Empty unless every
    line after the header has as many commas as it, with at least 2 columns and
    CSV_MIN_ROWS rows; quoted cells with commas make a line not count."""
    rows = [line.strip() for line in payload.strip().splitlines() if line.strip()]
    if len(rows) < CSV_MIN_ROWS + 1:
        return []
    width = rows[0].count(",")
    if width < 1 or '"' in payload or any(row.count(",") != width for row in rows):
        return []
    cells = [[c.strip() for c in row.split(",")] for row in rows[1:]]
    count: dict[str, int] = {}
    for row in cells:
        for c in set(row):
            count[c] = count.get(c, 0) + 1
    return [c for row in cells for c in row
            if count[c] == 1 and (len(c) >= 4 or (len(c) == 3 and c.isdigit()))
            and len(c) <= RECORD_CELL_CHARS]


# What names a record in a text that lists them one a line: a list item that is one name
# (`- academic_warning_sink`, `2. report.docx`), a `Key: value` line whose value is one
# path, address or link (`Destination: logging.googleapis.com/projects/p/buckets/b`), and
# the code a table's row starts with (`01711100  算法分析与设计 -01班 …`, `COMP130141.01 …`;
# four digits at least, not a date) — what an agent copies into its next call's arguments
# many steps after it listed them.
_TEXT_CELL = re.compile(
    r"^[ \t]*(?:[-*•]|\d{1,3}[.)])[ \t]+([\w.@/:-]+)[ \t]*$"
    r"|^[ \t]*[\w .()-]{1,40}:[ \t]+([\w.+-]+(?:@|/)[\w.+@/:*-]+)[ \t]*$"
    r"|^[ \t]*([A-Z]{0,6}\d{4,}(?:\.\d+)?)(?=[ \t]+\S)", re.MULTILINE)


def _with_records(payload: str, compact: str, known: frozenset[str],
                  focus: frozenset[str]) -> str:
    """`compact` and a line of the cells naming a large payload's records that it left out
    (ids, names, e-mails, codes; a text payload's records listed one a line, as a masked
    block names them, and its links and addresses), within RECORD_CHARS_PER_CHAR: those
    naming the focus terms first, then in order, links last. A payload under
    RECORD_MIN_PAYLOAD lists only its links and e-mail addresses, within FIELD_MIN.
    Issue-7 yardstick, Toolathlon (bench/README.md, "Toolathlon recall, part four"): recall
    +0.0 to +2.1 points on every split for 0.2 to 1.2 points of cost @0.1; the text lines and
    the short payloads' addresses ("Toolathlon queues' recall, part fifteen"): a sink
    listing's `Destination: logging.googleapis.com/…/exam_log-…` (longer than the value
    list's 80 characters) and an e-mail's `… at myersj@mcp.com` (its local part ranked as a
    plain word), each copied whole into a later call, were in no digest."""
    short = len(payload) < RECORD_MIN_PAYLOAD
    cells = (list(dict.fromkeys(_links(payload)))
             if short else _naming_cells(payload, lines=True))
    lost = [c for c in cells if c not in compact and c not in known
            and len(c) <= RECORD_CELL_CHARS * 2]
    if not lost:
        return compact
    # links last: a record's link repeats its id, and is several cells long; a cell that
    # names the task inside a longer name (`_pages/publications.html`) before the others
    lead = lead_terms(focus)
    lost.sort(key=lambda c: (not focus_hits(c, lead), c.startswith(("http://", "https://")),
                             0 if focus_hits(c, lead) else -focus_parts(c, lead)))
    return _with_line(compact, "records", lost,
                      FIELD_MIN if short else len(payload) // RECORD_CHARS_PER_CHAR,
                      current_terms(focus))


# A line whose value is a link (`Link: https://…`, `URL: http://…`); a text with at least
# LINK_RECORDS of them lists records that each carry one (a web search's hits: `Title:` /
# `Link:` / `Snippet:`), and those links are what the agent opens or cites next. A browser's
# page has one (`URL:`), two at most on the shared corpora; no tool text there has three.
_LINK_LINE = re.compile(r"^[ \t]*[\w .()/-]{1,40}:[ \t]+(https?://\S+)[ \t]*$", re.MULTILINE)
LINK_RECORDS = 3


def _with_links(text: str, compact: str, known: frozenset[str],
                focus: frozenset[str]) -> str:
    """`compact` and a line of the links a text's records carry (one a `Key: link` line, at
    least LINK_RECORDS of them) that it left out, whole: the value list splits a link at
    `:` and a line digest keeps one or two of them. Within one character per
    RECORD_CHARS_PER_CHAR of the text, at least FIELD_MIN; those naming the focus terms
    first, then in order."""
    links = [_link_end(link) for link in _LINK_LINE.findall(text)]
    if len(links) < LINK_RECORDS:
        return compact
    lost = [link for link in dict.fromkeys(links)
            if link not in compact and link not in known and len(link) <= RECORD_CELL_CHARS * 2]
    if not lost:
        return compact
    lead = lead_terms(focus)
    lost.sort(key=lambda c: not focus_hits(c, lead))
    return _with_line(compact, "records", lost,
                      max(FIELD_MIN, len(text) // RECORD_CHARS_PER_CHAR), current_terms(focus))


# A quoted string of a few words, a later one a file (`"start": "bun run src/index.ts"`,
# `command: "bun scripts/gen.sh.ts"`): a command a config or a script holds, which an agent
# later runs as written, while the value list carries its words one at a time. An aged
# output's digest lists the shortest such commands whole (the plain form before its
# `--watch` variant; COMMAND_CHARS), unless a text the model reads before it already carries
# them (an earlier read of the same file, its digest): a file read four times lists them once.
# Issue-7 yardstick (bench/README.md, "Session 76, oc76"): OpenCode runs tune recall 98.540
# -> 99.150, cost @0.1 -0.023; every command on every digest (session 72's `93063a7`) cost
# -0.163 there, the shortest without that check -0.106.
_QUOTED = re.compile(r'(?:^|[\w"]):[ \t]*"([a-z][\w.-]*(?: [^"\\\n]{1,58})?)"', re.MULTILINE)
_FILE_WORD = re.compile(r"(?:^|\s)(?:\.{0,2}/)?[\w.-]+(?:/[\w.-]+)*\.[A-Za-z]{1,4}(?=\s|$)")
COMMAND_CHARS = 40  # 60: two commands, cost -0.109 on that split; 30: as 40


def _quoted_commands(source: str) -> list[str]:
    """The quoted commands of `source` (`_QUOTED`: a few words after a key, a later one
    naming a file), distinct, in order."""
    out = []
    for m in _QUOTED.finditer(_LINE_NO.sub(" ", source)):
        command = m[1]
        if (" " in command and len(command) <= FIELD_CHARS
                and _FILE_WORD.search(command.split(" ", 1)[1])):
            out.append(command)
    return list(dict.fromkeys(out))


def _lost_commands(source: str, compact: str, said: Callable[[str], bool] | None) -> list[str]:
    """The quoted commands of `source` that neither `compact` nor a text the model reads
    before it (`said`) carries, the shortest first."""
    lost = [c for c in _quoted_commands(source)
            if c not in compact and not (said is not None and said(c))]
    return sorted(lost, key=len)


def summarize(
    text: str,
    kind: str,
    level: int = 1,
    known: frozenset[str] = frozenset(),
    focus: frozenset[str] = frozenset(),
    whole_commands: bool = False,
    step: frozenset[str] = frozenset(),
    named_lines: bool = False,
    periods: bool = False,
    said: Callable[[str], bool] | None = None,
) -> str:
    """A shorter rendering of `text`; values it leaves out are listed unless `known`
    (`periods`: a value ending a sentence listed with its period, `values`).
    `focus` (lower-cased terms of the task and the latest tool calls, see focus.py): a
    digest keeps the lines that carry most of them and lists their values first.
    `whole_commands`: an assistant turn's digest keeps its commands whole (one of the
    agent's latest turns: the code it just wrote is what it edits and re-types next).
    `named_lines`: an assistant turn's digest (level 3) keeps the lines of code its prose named
    (`line_refs`; a text-tool agent's turn).
    `said`: whether a text the model reads before this one carries a string whole (a tool
    result's quoted commands are listed unless it does; None: listed)."""
    prose = kind in ("assistant", "tool_call")
    payload = None if prose else envelope(text)
    if payload is not None:  # an MCP content block: digested as the text it carries
        text = payload
    record = None if prose else record_text(text)
    head = ""
    if record is not None:
        # a JSON record whose bulk is one text field: its short fields, then the digest of
        # the text as a content block's (its lines, its fields, the links naming records)
        head, text = record
        payload = text
    if not prose:  # encoded data (base64, a `data:` URI) kept as what it is and how long
        text = describe(without_ansi(text))
        payload = text if payload is not None else None
    source = text if prose else _PROMPT.sub("", text)
    # A turn's prose lists only the notable values it omits (names with digits, `_`, `.`, `/`,
    # camelCase), at the digest level too: an aged turn is re-sent at full price once, at
    # the step that digests it, then cached on every call, and its plain words are not what
    # an agent re-types. Issue-7 yardstick, all sessions (bench/README.md, 2026-11-30 swecost7):
    # cost saved @0.1 SWE-agent 10.3% -> 11.7%, web 65.5 -> 65.9, agentdojo 47.8 -> 48.4,
    # late reduction +0.3..1.6 points, recall unchanged on every corpus.
    notable_only = prose
    compact = _structured(text, kind, level, known, focus, whole_commands, step, named_lines)
    if payload is not None:
        compact = _with_fields(source, compact, known, focus)
        compact = _with_records(payload, compact, known, focus)
    elif not prose and (cut := cut_payload(text)) is not None:
        # a content block cut short: its digest is the raw text's as before, and, as a whole
        # block's, its short multi-word field values (a record's `Long Beach, US`, read
        # from the quoted cells left of its JSON) and the cells naming its records.
        # Issue-7 yardstick (bench/README.md, "part eleven"): Toolathlon claude queues tune
        # recall 97.6 -> 97.7; no other corpus has a cut block.
        compact = _with_fields(cut, compact, known, focus, FIELD_MIN)
        compact = _with_records(cut, compact, known, focus)
    elif kind == "tool_result":
        # a plain text listing records by their links (search hits): the links, whole
        compact = _with_links(source, compact, known, focus)
        # a quoted command that names a file (`"start": "bun run src/index.ts"`): whole
        compact = _with_line(compact, "omitted commands", _lost_commands(source, compact, said),
                             COMMAND_CHARS)
        # a printed record whose digest kept none of its lines: its `Key: value` values
        if level >= 3 and _ELIDED_ONLY.fullmatch(compact)  and _keyed_record(source):
            compact = _with_line(compact, "omitted fields",
                                 _lost_keyed(source, compact, known, focus), FIELD_MIN,
                                 current_terms(focus))
    out = _mentions(source, compact, known, level, notable_only, focus, periods,
                    named_lines and prose)
    if kind == "tool_call" and level >= 3 and not _FENCE.search(text):
        # An aged turn that made tool calls and ran no command keeps none of its prose, only
        # the notable values it names: its calls (sent whole) say what it did, and its
        # first sentence restated the plan they carried out (agentdojo's `<thinking>`
        # blocks, web's reasoning before each click). The shorter of the two, so a turn of
        # a few words is not replaced by a longer list. Issue-7 yardstick (bench/README.md,
        # "Aged turns that made tool calls"): agentdojo holdout late 24.5% -> 26.8%.
        calls_only = _mentions(source, "", known, level, notable_only, focus, periods).lstrip("\n")
        return min(out, calls_only, key=len)
    return f"{head}\n{out}" if head else out


# --- what a masked MCP content block keeps ----------------------------------------------------

# Characters of field values a masked content block keeps at most: those of its records that
# carry the most terms of the task and of the latest calls (focus.py).
KEPT_CHARS = 160
KEPT_CELL_CHARS = 60  # a cell this long at most is one an agent copies whole
KEPT_MIN_CELL = 4  # shorter cells are not values an agent re-types
# Characters a masked block gives, after those cells, to the cells naming its records (ids,
# names, e-mails, codes, links; a text payload's links and addresses): one per this many
# characters of its payload, at least KEPT_CHARS. What an agent picks from a listing many
# steps after reading it, whether or not the task names it. Issue-7 yardstick, Toolathlon
# (bench/README.md, "Toolathlon recall, part eight"): deepseek runs recall 98.5 / 97.7 -> 99.0
# / 98.2 (tune / holdout) for 0.5 / 0.9 point of cost @0.1; one per 4: no more recall, more
# cost. Only while the session has fewer than `whole_block_turns` turns (`stages/base`):
# ungated, the deepseek queues' cost @0.1 fell under keep-1 masking's.
MASKED_RECORD_CHARS_PER_CHAR = 8


def _records(value: Any, out: list[list[str]]) -> None:
    """A JSON document's records: per object, its own string and number members."""
    if isinstance(value, dict):
        own = [str(v) for v in value.values()
               if isinstance(v, str | int | float) and not isinstance(v, bool)]
        if own:
            out.append(own)
        for v in value.values():
            if isinstance(v, dict | list):
                _records(v, out)
    elif isinstance(value, list):
        scalars = [str(v) for v in value if isinstance(v, str | int | float)
                   and not isinstance(v, bool)]
        if scalars:
            out.append(scalars)
        for v in value:
            if isinstance(v, dict | list):
                _records(v, out)


def records(payload: str) -> list[list[str]]:
    """A payload's records and their cells: a JSON document's objects (their scalar
    members), else its lines (cells split as `fields` splits them, a `Key: value` cell's
    value beside it)."""
    stripped = payload.strip()
    out: list[list[str]] = []
    if stripped[:1] in ("[", "{"):
        try:
            _records(orjson.loads(stripped), out)
        except orjson.JSONDecodeError:
            out = []
        else:
            return out
    for line in stripped.splitlines():
        cells: list[str] = []
        for cell in _FIELD_SPLIT.split(line):
            cells.append(cell)
            key = _KEY.match(cell)
            if key:
                cells.append(cell[key.end():])
        if any(cells):
            out.append(cells)
    return out


def kept_fields(text: str, focus: frozenset[str], seen: frozenset[str] = frozenset(),
                bound: int = KEPT_CHARS, names: bool = False) -> list[str]:
    """What a masked MCP content block (or one cut short, `cut_payload`) keeps of its
    payload: the short cells (field values, names, ids) of the records that carry the most
    focus terms, within `bound` characters; then, with `names`, the cells naming its records
    (of a text payload: the names and paths it lists one a line, `_TEXT_CELL`, then its
    links and addresses), within one character per MASKED_RECORD_CHARS_PER_CHAR of the
    payload (at least KEPT_CHARS); cells whose values the model reads anyway (`seen`) left
    out. Empty for any other text."""
    payload = (envelope(text) or cut_payload(text)) if focus else None
    if payload is None:
        return []
    scored = [(focus_hits(" ".join(cells), focus), i, cells)
              for i, cells in enumerate(records(payload))]
    kept: list[str] = []
    used = 0
    for _, _, cells in sorted((s for s in scored if s[0]), key=lambda s: (-s[0], s[1])):
        for cell in (" ".join(c.split()) for c in cells):
            if (not KEPT_MIN_CELL <= len(cell) <= KEPT_CELL_CHARS or cell in kept
                    or _HASH.search(cell) or set(values(cell)) <= seen):
                continue
            if used + len(cell) + 2 > bound:
                break
            kept.append(cell)
            used += len(cell) + 2
        else:
            continue
        break
    if not names:
        return kept
    # then the cells naming its records (`_naming_cells`), whichever terms they carry
    room = max(KEPT_CHARS, len(payload) // MASKED_RECORD_CHARS_PER_CHAR)
    used = 0
    cells = _naming_cells(payload, lines=True)
    # stable: a name carrying the task's terms as parts first (a link's path names every
    # record's folder: left in its place)
    cells.sort(key=lambda c: 0 if _LINK.fullmatch(c) else -focus_parts(c, focus))
    for cell in cells:
        if cell in kept or set(values(cell)) <= seen:
            continue
        if used + len(cell) + 2 > room:
            break
        kept.append(cell)
        used += len(cell) + 2
    return kept
