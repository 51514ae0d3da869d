"""Encoded data in a text: base64 and base64url runs (one line or wrapped), `data:` URIs.

A digest lists the values of what it leaves out (`summarize._mentions`): the pieces a
value extractor cuts a base64 run into at `+` and `=` are no value an agent re-types, and
a 13,420-character base64 video's digest was 664 characters of them out of 871
(bench/README.md, "A digest says what encoded data is instead of listing its pieces").
Decided by structure only: a run of the alphabet, long, standing alone (not a segment of a
path, a URL or a name), with upper and lower case and digits changing often. An identifier
stays a value: a hex hash (no capitals), a UUID or an order id (short), a path (`.` and
words), a CamelCase or Title-Case name (a change of case per word, not every other letter).
"""

from __future__ import annotations

import functools
import itertools
import re

ENCODED_MIN_CHARS = 100  # shorter runs are ids, keys, tokens: listed like any value
# Share of neighbouring letters and digits of a different kind (upper, lower, digit): about
# 0.5-0.65 in base64 (of a video 0.51, of English text 0.55-0.6), one change a word in a
# CamelCase or Title-Case name (~0.15-0.2); a hex digest has no capitals at all.
ENCODED_CHANGES = 0.3
ENCODED_CASE_SHARE = 0.1  # at least this share of capitals and of small letters

_ENCODED = re.compile(
    r"(?P<head>data:[\w.+-]+/[\w.+-]+(?:;[\w.+-]+=[\w.+-]+)*;base64,)(?P<uri>[A-Za-z0-9+/_-]+={0,2})"
    # a run standing alone: after a space, quote, `:` or an escaped newline, never inside
    # a path, a URL's segment or query (`/`, `=`, `.`), or a longer name
    r"|(?:(?<![\w+/=.\\-])|(?<=\\[nrt]))"
    # wrapped (MIME, PEM: lines of 64 or 76), its last line shorter where padded (`=`: a
    # short line of text after the run is not taken for it)
    r"(?P<run>[A-Za-z0-9+/]{60,}(?:(?:(?:\r?\n|\\n)[A-Za-z0-9+/]{60,})+"
    r"(?:(?:\r?\n|\\n)[A-Za-z0-9+/]{1,59}(?==))?)?={0,2}"
    r"|[A-Za-z0-9_-]{100,}={0,2})(?![\w+/=.-])"
)
# A cheap first look: a text without such a stretch has no encoded run (most tool texts).
_CANDIDATE = re.compile(r"[A-Za-z0-9+/_-]{60}|data:")
_SEPARATORS = re.compile(r"\s|\\[nrt]")
# What a digest keeps of a run: what it is and how long (`describe`); never listed as values.
_MARKER = re.compile(r"\[base64 data, [\d,]+ chars\]")


def _kind(c: str) -> int:
    return 0 if c.isupper() else 1 if c.islower() else 2


def looks_encoded(run: str) -> bool:
    """Whether `run` (a run of the base64 or base64url alphabet, its line breaks
    included) is encoded data by its structure (ENCODED_MIN_CHARS, ENCODED_CASE_SHARE,
    ENCODED_CHANGES)."""
    body = _SEPARATORS.sub("", run).rstrip("=")
    if len(body) < ENCODED_MIN_CHARS:
        return False
    alnum = [c for c in body if c.isalnum()]
    n = len(alnum)
    upper = sum(c.isupper() for c in alnum)
    lower = sum(c.islower() for c in alnum)
    if upper < ENCODED_CASE_SHARE * n or lower < ENCODED_CASE_SHARE * n or upper + lower == n:
        return False  # no capitals (hex, a path), no small letters, or no digits at all
    kinds = [_kind(c) for c in alnum]
    changes = sum(a != b for a, b in itertools.pairwise(kinds))
    return changes >= ENCODED_CHANGES * n


def _chars(payload: str) -> str:
    return f"[base64 data, {len(_SEPARATORS.sub('', payload)):,} chars]"


@functools.lru_cache(maxsize=256)  # a text is digested at several levels, call after call
def describe(text: str) -> str:
    """`text` with each encoded run (`looks_encoded`, a `data:` URI's payload) replaced by
    what it is and how long: `[base64 data, 13,368 chars]`."""
    if len(text) < ENCODED_MIN_CHARS or not _CANDIDATE.search(text):
        return text

    def said(m: re.Match[str]) -> str:
        if m["head"]:
            return f"{m['head']}{_chars(m['uri'])}" if len(m["uri"]) >= ENCODED_MIN_CHARS else m[0]
        return _chars(m["run"]) if looks_encoded(m["run"]) else m[0]

    return _ENCODED.sub(said, text)


def without_encoded(text: str) -> str:
    """`text` without its encoded runs and what `describe` said of them (a space each): the
    text a digest takes its value lists from."""
    return _MARKER.sub(" ", describe(text)) if len(text) >= ENCODED_MIN_CHARS else text
