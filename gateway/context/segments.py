"""Find retrieved documents inside a message's text: XML-like tags, numbered documents and
markdown sections. Returns contiguous spans that together cover the text exactly."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TAGGED = re.compile(
    r"<(document|doc|context|source|search_result|result|passage|chunk|file|article)\b[^>]*>"
    r".*?</\1\s*>",
    re.IGNORECASE | re.DOTALL,
)
_NUMBERED = re.compile(
    r"^(?:\[\d+\]|(?:document|doc|source|passage|result|chunk)\s*#?\d+\s*[:.)\]-])",
    re.IGNORECASE,
)
_HEADING = re.compile(r"^#{1,4} \S", re.MULTILINE)
MIN_DOC_CHARS = 80
# A fenced code block, fences paired in order (as `summarize` reads an assistant turn's)
_FENCED = re.compile(r"```.*?```", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    knowledge: bool


def _cover(text: str, docs: list[tuple[int, int]]) -> list[Span]:
    spans: list[Span] = []
    pos = 0
    for start, end in docs:
        if start > pos:
            spans.append(Span(pos, start, False))
        spans.append(Span(start, end, True))
        pos = end
    if pos < len(text):
        spans.append(Span(pos, len(text), False))
    return spans


def _tagged(text: str) -> list[tuple[int, int]]:
    return [
        (m.start(), m.end()) for m in _TAGGED.finditer(text) if m.end() - m.start() >= MIN_DOC_CHARS
    ]


def _paragraphs(text: str) -> list[tuple[int, int]]:
    bounds, pos = [], 0
    for m in re.finditer(r"\n\s*\n", text):
        bounds.append((pos, m.end()))
        pos = m.end()
    bounds.append((pos, len(text)))
    return [b for b in bounds if b[1] > b[0]]


def _numbered(text: str) -> list[tuple[int, int]]:
    paras = _paragraphs(text)
    docs: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for i, (start, end) in enumerate(paras):
        if _NUMBERED.match(text[start:end].lstrip()):
            if current:
                docs.append(current)
            current = (start, end)
        elif current and i < len(paras) - 1:
            current = (current[0], end)  # a document's continuation paragraph
        elif current:
            docs.append(current)  # the message's last paragraph is the asker's own words
            current = None
    if current:
        docs.append(current)
    return docs if len(docs) >= 2 else []


def in_code_block(text: str, pos: int) -> bool:
    """Whether `pos` of `text` lies inside a fenced code block: a section found there opens
    at a comment of the code (`# Load images`) or of a quoted file, not at a heading of the
    text around it."""
    for block in _FENCED.finditer(text):
        if block.start() >= pos:
            return False
        if pos < block.end():
            return True
    return False


def _sections(text: str) -> list[tuple[int, int]]:
    starts = [m.start() for m in _HEADING.finditer(text)]
    if len(starts) < 2:
        return []
    ends = [*starts[1:], len(text)]
    return list(zip(starts, ends, strict=True))


def find_documents(text: str, *, sections: bool) -> list[Span]:
    """Spans of `text`; knowledge spans are recognisable documents. One span when none."""
    if len(text) >= 2 * MIN_DOC_CHARS:
        for finder in (_tagged, _numbered):
            docs = finder(text)
            if docs:
                return _cover(text, docs)
        if sections:
            docs = [d for d in _sections(text) if d[1] - d[0] >= MIN_DOC_CHARS]
            if len(docs) >= 2:
                return _cover(text, docs)
    return [Span(0, len(text), False)]
