"""A reader for Grafana Alloy's configuration syntax, enough to check ours structurally.

Blocks `name "label" { ... }` (nested), attributes `name = value`; values are strings,
numbers, booleans, lists, objects `{ key = value, "key" = value }` and references
(`local.file_match.droplog.targets`, kept as `Ref`). `//` comments are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>-?\d+(?:\.\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[{}\[\]=,])
""", re.X)


@dataclass(frozen=True)
class Ref:
    path: str


@dataclass
class Block:
    name: str
    label: str | None
    attrs: dict[str, Any] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)

    def block(self, name: str) -> Block:
        found = [b for b in self.blocks if b.name == name]
        assert len(found) == 1, f"{self.name}: {len(found)} {name} blocks"
        return found[0]


class _Reader:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            match = TOKEN.match(text, pos)
            if match is None:
                raise ValueError(f"cannot read {text[pos:pos + 30]!r}")
            pos = match.end()
            if match.lastgroup != "ws":
                self.tokens.append((match.lastgroup or "", match.group()))
        self.i = 0

    def peek(self, offset: int = 0) -> tuple[str, str]:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if value is not None and token[1] != value:
            raise ValueError(f"expected {value!r}, got {token[1]!r}")
        self.i += 1
        return token

    def body(self, until: str) -> tuple[dict[str, Any], list[Block]]:
        attrs: dict[str, Any] = {}
        blocks: list[Block] = []
        while self.peek()[1] != until:
            kind, name = self.take()
            if kind != "ident":
                raise ValueError(f"expected a name, got {name!r}")
            if self.peek()[1] == "=":
                self.take("=")
                attrs[name] = self.value()
                continue
            label = None
            if self.peek()[0] == "string":
                label = self.take()[1][1:-1]
            self.take("{")
            inner_attrs, inner_blocks = self.body("}")
            self.take("}")
            blocks.append(Block(name, label, inner_attrs, inner_blocks))
        return attrs, blocks

    def value(self) -> Any:
        kind, token = self.take()
        if kind == "string":
            return bytes(token[1:-1], "utf-8").decode("unicode_escape")
        if kind == "number":
            return float(token)
        if kind == "ident":
            return {"true": True, "false": False, "null": None}.get(token, Ref(token))
        if token == "[":
            items = []
            while self.peek()[1] != "]":
                items.append(self.value())
                if self.peek()[1] == ",":
                    self.take(",")
            self.take("]")
            return items
        if token == "{":
            obj = {}
            while self.peek()[1] != "}":
                key_kind, key = self.take()
                obj[key[1:-1] if key_kind == "string" else key] = (self.take("="), self.value())[1]
                if self.peek()[1] == ",":
                    self.take(",")
            self.take("}")
            return obj
        raise ValueError(f"unexpected {token!r}")


def parse(text: str) -> list[Block]:
    """The top-level blocks of an Alloy configuration."""
    reader = _Reader(text)
    attrs, blocks = reader.body("")
    if attrs:
        raise ValueError(f"top-level attributes {sorted(attrs)}")
    return blocks
