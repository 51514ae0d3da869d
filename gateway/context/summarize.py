"""Extractive, structure-aware compression of one text. Deterministic; never invents text.

- JSON keeps its shape: every key stays, arrays keep their first elements, long strings
  are cut.
- Logs keep a window around the first error and the tail.
- Tables keep the header and a sample of rows.
- Other text (tool output, files, prose) keeps its salient lines: the first line, lines
  that name paths, errors, line numbers and definitions, plus a window around errors;
  assistant turns keep their commands (fenced blocks) and their first sentence.
Level 2 is stricter than level 1.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_ERROR = re.compile(
    r"(?i)\b(error|exception|traceback|failed|failure|fatal|panic|denied|not found|"
    r"no such|cannot|can't|undefined|segfault|assert\w*)\b|\bE\d{3}\b|exit (code|status) [1-9]")
_PATH = re.compile(r"(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.(?:py|js|ts|tsx|go|rs|java|c|h|cc|cpp|rb|php"
                   r"|json|ya?ml|toml|md|txt|cfg|ini|sh|sql|html|css|lock|xml|csv)\b")
_LINE_REF = re.compile(r"(?i)\bline \d+|:\d+:|\(\d+ lines total\)|\d+ (more )?lines? (above|below)")
_DEFINITION = re.compile(r"^\s*(?:\d+:)?\s*(?:async\s+)?(def|class|function|fn|func|interface|"
                         r"struct|impl|public|private|protected|export)\b")
_TIMESTAMP = re.compile(r"^\s*\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|^\s*\d{2}:\d{2}:\d{2}|"
                        r"^\s*(DEBUG|INFO|WARN|WARNING|ERROR|TRACE)\b")
_FENCE = re.compile(r"```.*?```", re.DOTALL)
MAX_LINE_CHARS = 240


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " …"


def _omitted(n: int) -> str:
    return f"[… {n} lines omitted …]"


def _keep_lines(lines: list[str], keep: set[int]) -> str:
    out, gap = [], 0
    for i, line in enumerate(lines):
        if i in keep:
            if gap:
                out.append(_omitted(gap))
                gap = 0
            out.append(_cut(line))
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
    window, tail = (5, 10) if level == 1 else (2, 4)
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
    budget = 14 if level == 1 else 8
    window = 1
    keep: list[int] = [0]
    errors = [i for i, line in enumerate(lines) if _ERROR.search(line)]
    for i in errors[:3]:
        keep.extend(range(max(i - window, 0), min(i + window + 1, len(lines))))
    for i, line in enumerate(lines):
        if _PATH.search(line) or _LINE_REF.search(line) or _DEFINITION.search(line):
            keep.append(i)
    keep.extend(range(max(len(lines) - 2, 0), len(lines)))  # the tail: result or prompt
    chosen: list[int] = []
    for i in keep:  # first-listed reasons win when the budget runs out
        if i not in chosen:
            chosen.append(i)
    return _keep_lines(lines, set(chosen[:budget]))


def _assistant(text: str, level: int) -> str:
    fences = _FENCE.findall(text)
    prose = _FENCE.sub(" ", text).strip()
    sentence = re.split(r"(?<=[.!?])\s", prose, maxsplit=1)[0][:300] if prose else ""
    parts = [sentence] if sentence and level == 1 else []
    parts.extend(fences)
    return "\n".join(parts) if parts else sentence


def summarize(text: str, kind: str, level: int = 1) -> str:
    if kind in ("assistant", "tool_call"):
        return _assistant(text, level)
    compact = _json(text, level)
    if compact is not None:
        return compact
    lines = text.splitlines()
    if len(lines) <= 3:
        return "\n".join(_cut(line) for line in lines) if level == 1 else _cut(text[:200])
    if _is_log(lines):
        return _log(lines, level)
    if _is_table(lines):
        return _table(lines, level)
    return _salient(lines, level)
