"""A parser for the subset of LogQL the dashboards use, for the tests (no Loki here).

Log queries: a stream selector `{label op "value", ...}` and a pipeline of line filters
(`|= != |~ !~`), parsers (`| json`, `| logfmt`), label filters (`| name op value`),
`| label_format a=`tmpl``, `| line_format `tmpl``, `| unwrap name`. Metric queries: range
functions over a log query with `[range]`, and aggregations (`sum by (...) (...)`,
`topk(n, ...)`), grouping before or after. Anything else is a syntax error, so a query the
parser cannot read fails the test instead of passing unchecked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|`[^`]*`)
  | (?P<duration>\[[^\]]+\])
  | (?P<op>\|=|\|~|!=|!~|=~|==|>=|<=|[|{}(),=<>])
  | (?P<number>\d+(?:\.\d+)?)
  | (?P<ident>[A-Za-z_$][A-Za-z0-9_$.]*)
""", re.X)
RANGE_FUNCTIONS = {"count_over_time", "rate", "bytes_over_time", "bytes_rate", "sum_over_time",
                   "avg_over_time", "max_over_time", "min_over_time", "first_over_time",
                   "last_over_time", "quantile_over_time", "absent_over_time"}
AGGREGATIONS = {"sum", "avg", "min", "max", "count", "topk", "bottomk", "stddev", "stdvar"}
LABEL_OPS = {"=", "!=", "=~", "!~", "==", ">", "<", ">=", "<="}
TEMPLATE_FIELD = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)")


class LogQLError(ValueError):
    pass


@dataclass
class LogQuery:
    matchers: list[tuple[str, str, str]] = field(default_factory=list)
    parsers: list[str] = field(default_factory=list)
    line_filters: list[tuple[str, str]] = field(default_factory=list)
    label_filters: list[tuple[str, str, str]] = field(default_factory=list)
    formatted: dict[str, set[str]] = field(default_factory=dict)  # new label -> fields read
    line_format_fields: set[str] = field(default_factory=set)
    unwrap: str | None = None
    range: str | None = None

    @property
    def fields_read(self) -> set[str]:
        """Every label or extracted field the pipeline names (not the ones it defines)."""
        read = {name for name, _, _ in self.label_filters} | self.line_format_fields
        for used in self.formatted.values():
            read |= used
        if self.unwrap:
            read.add(self.unwrap)
        return read - set(self.formatted)


@dataclass
class Query:
    log: LogQuery
    functions: list[str] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        match = TOKEN.match(text, pos)
        if match is None:
            raise LogQLError(f"cannot read {text[pos:pos + 20]!r} in {text!r}")
        pos = match.end()
        kind = match.lastgroup or ""
        if kind != "ws":
            out.append((kind, match.group()))
    return out


def _unquote(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1]
    return bytes(token[1:-1], "utf-8").decode("unicode_escape")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.tokens, self.i = text, _tokens(text), 0

    def peek(self, offset: int = 0) -> tuple[str, str]:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else ("end", "")

    def take(self, kind: str | None = None, value: str | None = None) -> str:
        got_kind, got = self.peek()
        if (kind and got_kind != kind) or (value and got != value):
            raise LogQLError(f"expected {value or kind}, got {got!r} in {self.text!r}")
        self.i += 1
        return got

    def query(self) -> Query:
        query = self.expr()
        if self.peek()[0] != "end":
            raise LogQLError(f"trailing {self.peek()[1]!r} in {self.text!r}")
        return query

    def expr(self) -> Query:
        kind, value = self.peek()
        if value == "{":
            return Query(self.log_query())
        if kind != "ident":
            raise LogQLError(f"unexpected {value!r} in {self.text!r}")
        name = self.take("ident")
        grouping = self.grouping()
        self.take(value="(")
        if name in RANGE_FUNCTIONS:
            log = self.log_query()
            log.range = self.take("duration")
            self.take(value=")")
            inner = Query(log)
        elif name in AGGREGATIONS:
            if self.peek()[0] == "number":
                self.take("number")
                self.take(value=",")
            inner = self.expr()
            self.take(value=")")
        else:
            raise LogQLError(f"unknown function {name!r} in {self.text!r}")
        grouping |= self.grouping()
        inner.functions.insert(0, name)
        inner.grouping |= grouping
        return inner

    def grouping(self) -> set[str]:
        if self.peek()[1] not in ("by", "without"):
            return set()
        self.take("ident")
        self.take(value="(")
        labels = set()
        while self.peek()[1] != ")":
            labels.add(self.take("ident"))
            if self.peek()[1] == ",":
                self.take(value=",")
        self.take(value=")")
        return labels

    def log_query(self) -> LogQuery:
        log = LogQuery()
        self.take(value="{")
        while self.peek()[1] != "}":
            label = self.take("ident")
            op = self.take("op")
            if op not in ("=", "!=", "=~", "!~"):
                raise LogQLError(f"bad matcher operator {op!r} in {self.text!r}")
            log.matchers.append((label, op, _unquote(self.take("string"))))
            if self.peek()[1] == ",":
                self.take(value=",")
        self.take(value="}")
        while self.peek()[1] in ("|", "|=", "!=", "|~", "!~"):
            self.stage(log)
        return log

    def stage(self, log: LogQuery) -> None:
        op = self.take("op")
        if op != "|":
            log.line_filters.append((op, _unquote(self.take("string"))))
            return
        name = self.take("ident")
        if name in ("json", "logfmt"):
            log.parsers.append(name)
        elif name == "unwrap":
            log.unwrap = self.take("ident")
        elif name == "line_format":
            log.line_format_fields |= set(TEMPLATE_FIELD.findall(_unquote(self.take("string"))))
        elif name == "label_format":
            while True:
                target = self.take("ident")
                self.take(value="=")
                kind, source = self.peek()
                self.i += 1
                log.formatted[target] = (set(TEMPLATE_FIELD.findall(_unquote(source)))
                                         if kind == "string" else {source})
                if self.peek()[1] != ",":
                    break
                self.take(value=",")
        else:
            op = self.take("op")
            if op not in LABEL_OPS:
                raise LogQLError(f"bad label filter {name} {op} in {self.text!r}")
            kind, value = self.peek()
            self.i += 1
            log.label_filters.append((name, op, _unquote(value) if kind == "string" else value))


def parse(text: str) -> Query:
    """The query's stream selector, pipeline, functions and grouping labels."""
    return _Parser(text).query()


LABEL_VALUES = re.compile(r"^label_values\((?P<selector>\{.*\}),\s*(?P<label>\w+)\)$")


def parse_label_values(text: str) -> tuple[LogQuery, str]:
    """A Grafana Loki variable query `label_values({selector}, label)`."""
    match = LABEL_VALUES.match(text.strip())
    if match is None:
        raise LogQLError(f"not a label_values query: {text!r}")
    return _Parser(match["selector"]).log_query(), match["label"]
