"""A long session's body decoded from where its previous call's left off (issue 7).

A session's next call is its last call's body with new messages appended: the same bytes up
to the closing `]` of `messages`, the same bytes after it. Decoding the whole body again
made every call pay for the session's history (1 ms of orjson at call 300 of the synthetic
session, 753 KB, on every call, bypassed or fitted). `BodyCache` keeps, per tenant, the
last few large bodies with where their `messages` array closes and what it decoded to; a
body that starts and ends with one of them is decoded as that body's values plus its new
messages, and only those are decoded.

Exact by construction, not by heuristics: JSON's grammar is context free, so a text whose
value at one place is replaced by another value decodes to the same object with that value
replaced. A body is split as `head [messages] tail` only when `head "<nonce>" tail` decodes
to an object whose `messages` is that nonce (a random string: the client cannot place it)
and `[messages]` decodes to an array; a later body `head [old , new] tail` only when `[new]`
decodes to a non-empty array. Anything else (another layout, an error) is decoded whole,
so an error reads exactly as before. Decoded values are shared with the call that cached
them: nothing downstream writes to a request's messages (adapters build their own).

A body resumed so is also validated from where its kept body's validation ended
(`resume(..., check=)`): its kept messages passed the wire format's checks in that body, so
only the new ones are checked (`WireFormat.validate_from`), the same error raised as by the
whole walk (0.4-1 ms of checks over 602 messages at call 300, on every call).

A body of a megabyte or more (issue 10: decoded a piece at a time on the fitting thread, so
that the loop keeps its turn) is resumed there too (`decode_traced(..., off_loop=True)`),
never on the loop: its kept bytes compared a megabyte at a time, its new messages decoded a
piece at a time past a megabyte (`pieces.members_in_pieces`), validated from where its last
one's validation ended. Without it every late call of the longest sessions (Toolathlon's,
1-1.5 MB from call ~130) was decoded whole a piece at a time (17-23 ms), validated whole
and byte-checked by the engine. Such bodies are kept apart, up to `MAX_LARGE_BYTES` each
and `LARGE_BYTES` in all, and dropped only where one is kept: on the fitting thread, never
by a small body's keeping.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.api.pieces import PIECEWISE_BYTES, Unsure, members_in_pieces, parse_large
from gateway.context.prefix import Lineage
from gateway.errors import GatewayError, InvalidJSON

Decode = Callable[[bytes], dict[str, Any]]
# A wire format's name and its `validate_from(body, start, state) -> state`.
Check = tuple[str, Callable[[dict[str, Any], int, Any], Any]]
KEY = b'"messages"'
SPACE = b" \t\n\r"  # JSON's whitespace (bytes.strip's default also takes \v and \f)
MIN_BYTES = 1 << 16  # smaller bodies decode in well under 0.1 ms: not kept
# From a megabyte a body is decoded, fitted and freed on the fitting thread (issue 10): such
# a body (`large`) is resumed, split and kept there only (`decode_traced(..., off_loop=True)`),
# never on the event loop, and kept apart: a large body is only ever dropped by keeping
# another large one (on the thread), so that no eviction frees 10^5 messages on the loop.
MAX_BODY_BYTES = PIECEWISE_BYTES
MAX_BYTES = 1 << 25  # the bodies kept, all tenants (their decoded values take ~3x more)
# A large body is kept up to 8 MiB (the longest session recorded, Toolathlon's claude
# queue, ends at 1.5 MiB): past it a body is decoded whole (a piece at a time) as before.
# The large bodies kept, all tenants, hold 16 MiB of bytes (and ~3x that of decoded values,
# shared with the calls in flight): the last body of a few long sessions at once.
MAX_LARGE_BYTES = 1 << 23
LARGE_BYTES = 1 << 24
PER_TENANT = 16  # bodies kept per tenant, newest first (sessions of one agent share a head)
TAIL_TRIES = 32  # closing brackets tried from the end when a body is first split
KEY_TRIES = 4  # places where the list's name opens an array, tried in order
# Every body kept gets a number (`Lineage.body`), unique in the process (every BodyCache
# draws from it: the engine that compares them may serve several routes' caches).
_NUMBERS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class _Split:
    """A body kept: its bytes, where its `messages` array closes, and its decoded parts."""

    raw: bytes
    end: int  # where `messages`' last member ends (the whitespace and `]` after it: tail)
    top: dict[str, Any]  # the body's other members, its list's member holding the nonce
    messages: list[Any]  # the list's members (`messages`; a Responses body's `input`)
    # Per wire format: its validation's state after all of `messages`, once they passed.
    checked: dict[str, Any] = field(default_factory=dict)
    number: int = field(default_factory=lambda: next(_NUMBERS))

    def body(self, name: str) -> dict[str, Any]:
        body = dict(self.top)  # the same key order: the list stays where it was
        body[name] = list(self.messages)
        return body


class BodyCache:
    """Decodes request bodies, a session's later bodies from its earlier one's values.

    `name`: the body's member that grows, a list (`messages`: Chat Completions and
    Anthropic Messages; `input`: OpenAI Responses). One cache per wire format, so that a
    body is only ever resumed from (and its lineage only names) one of its own format."""

    def __init__(self, max_bytes: int = MAX_BYTES, min_bytes: int = MIN_BYTES,
                 name: str = "messages", large_bytes: int = LARGE_BYTES,
                 max_large: int = MAX_LARGE_BYTES) -> None:
        self.name = name
        self._key = orjson.dumps(name)
        self._max_bytes = max_bytes
        self._min_bytes = min_bytes
        self._large_bytes = large_bytes  # the large bodies kept (`MAX_BODY_BYTES` on), in all
        self._max_large = max_large  # a larger body is not kept
        self._nonce = secrets.token_hex(16)
        # The bodies kept, oldest first: those under `MAX_BODY_BYTES`, and the large ones.
        self._order: OrderedDict[int, tuple[str, _Split]] = OrderedDict()
        self._large: OrderedDict[int, tuple[str, _Split]] = OrderedDict()
        self._by_tenant: dict[str, list[tuple[int, _Split]]] = {}  # newest first
        self._serial = 0
        self._bytes = 0  # of the bodies in `_order`
        self._held = 0  # of those in `_large`
        self._lock = threading.Lock()  # the loop and the fitting thread both decode
        self.resumed = 0  # bodies decoded from a kept one (read by tests and benches)

    def decode(self, tenant: str, raw: bytes, whole: Decode,
               off_loop: bool = False) -> dict[str, Any]:
        """`whole(raw)`'s value (or its error), from a kept body's values when one fits."""
        return self.decode_traced(tenant, raw, whole, off_loop)[0]

    def decode_traced(self, tenant: str, raw: bytes, whole: Decode, off_loop: bool = False,
                      check: Check | None = None) -> tuple[dict[str, Any], Lineage | None]:
        """`decode`, and the body's lineage when it is kept (None: it is not). `off_loop`:
        called on the fitting thread, where a large body (`MAX_BODY_BYTES` to `max_large`)
        is resumed or split and kept too: its kept bytes compared a megabyte at a time and
        its new messages (or, split, its list) decoded a piece at a time past a megabyte,
        as `whole` decodes it (`pieces.py`); on the loop such a body is `whole(raw)`. With
        `check`, a body resumed (its lineage names an earlier body) is validated too, as
        `resume` validates it; any other is not."""
        if not self._min_bytes <= len(raw) < (self._max_large if off_loop else MAX_BODY_BYTES):
            return whole(raw), None
        resumed = self._resume_traced(tenant, raw, check)
        if resumed is not None:
            return resumed
        split = self._split(raw)
        if split is None:
            value = whole(raw)
            split = self._split_before(raw, value)
            if split is None:
                return value, None
        self._keep(tenant, split)
        return split.body(self.name), Lineage(split.number)

    def resume(self, tenant: str, raw: bytes,
               check: Check | None = None) -> dict[str, Any] | None:
        """`raw`'s value from one of the tenant's kept bodies and its new messages, or None
        when it continues none of them (cheap: a few comparisons of bytes in C). With
        `check`, the value returned is validated too (its error raised: the wire format's
        `validate`'s), from where the kept body's validation by that format ended."""
        resumed = self.resume_traced(tenant, raw, check)
        return None if resumed is None else resumed[0]

    def resume_traced(self, tenant: str, raw: bytes, check: Check | None = None
                      ) -> tuple[dict[str, Any], Lineage] | None:
        """`resume`, and what it proved: the body's messages up to the kept body's count
        are that body's, decoded from the very same bytes (`Lineage`; the engine then
        skips its own byte check of them)."""
        if not self._min_bytes <= len(raw) < MAX_BODY_BYTES:
            return None  # a large body is the fitting thread's (`decode_traced`)
        return self._resume_traced(tenant, raw, check)

    def _resume_traced(self, tenant: str, raw: bytes, check: Check | None = None
                       ) -> tuple[dict[str, Any], Lineage] | None:
        # Only bodies `raw` may continue: a small body's never holds a large one, so that
        # no large one is freed on the loop (when the thread drops it meanwhile).
        with self._lock:
            candidates = [(serial, kept) for serial, kept in self._by_tenant.get(tenant, ())
                          if len(kept.raw) <= len(raw)]
        for serial, kept in candidates:
            split = self._resume(kept, raw)
            if split is not None:
                self.resumed += 1
                self._keep(tenant, split, replacing=serial)
                body = split.body(self.name)
                if check is not None:
                    _check(kept, split, body, check)
                return body, Lineage(split.number, kept.number, len(kept.messages))
        return None

    def _resume(self, kept: _Split, raw: bytes) -> _Split | None:
        """`raw` as `kept`'s body with messages appended, or None if it is not that."""
        tail = len(kept.raw) - kept.end
        if len(raw) < len(kept.raw) or not (
                raw.endswith(memoryview(kept.raw)[kept.end:])
                and _repeats(raw, kept.raw, kept.end)):
            return None
        end = len(raw) - tail
        middle = raw[kept.end:end]
        comma = False
        if kept.messages:  # after the last kept message: nothing, or `, new...`
            middle = middle.lstrip(SPACE)
            comma = middle.startswith(b",")
            if middle and not comma:
                return None
            middle = middle[1:]
        new = decode_members(middle) if comma or middle.strip(SPACE) else []
        if new is None or (comma and not new):
            return None  # not an array, or `[a, ]` (a trailing comma): decoded whole
        return _Split(raw, end, kept.top, kept.messages + new)

    def _split(self, raw: bytes) -> _Split | None:
        """`raw` as `head [messages] tail`, each part decoded, or None. The first few
        places where the name opens an array are tried (a Responses body's `"input": [`
        may follow a tool schema's `"input"`): the nonce says which one is the body's."""
        for start in _array_starts(raw, self._key):
            split = self._split_at(raw, start)
            if split is not None:
                return split
        return None

    def _split_at(self, raw: bytes, start: int) -> _Split | None:
        close = len(raw)
        for _ in range(TAIL_TRIES):
            close = raw.rfind(b"]", start, close)
            if close < 0:
                return None
            split = self._split_closed(raw, start, close)
            if split is not None:
                return split
        return None

    def _split_before(self, raw: bytes, value: dict[str, Any]) -> _Split | None:
        """`raw` (decoded whole: `value`) split where its list closes right before the
        member that follows the list in `value`, or None. A client that writes `tools`
        after `messages` (the openai SDK's order) puts more closing brackets after the
        list than `_split` tries from the end: only a `]` followed by that member's name
        is tried here, from the last."""
        keys = list(value)
        at = keys.index(self.name) if self.name in keys else len(keys) - 1
        if at >= len(keys) - 1:
            return None  # no list, or the last member: `_split`'s first tries
        follows = re.compile(rb"\][ \t\n\r]*,[ \t\n\r]*" + re.escape(orjson.dumps(keys[at + 1]))
                             + rb"[ \t\n\r]*:")
        for start in _array_starts(raw, self._key):
            closes = [m.start() for m in follows.finditer(raw, start)]
            for close in reversed(closes[-TAIL_TRIES:]):
                split = self._split_closed(raw, start, close)
                if split is not None:
                    return split
        return None

    def _split_closed(self, raw: bytes, start: int, close: int) -> _Split | None:
        """`raw` as `head [messages] tail`, its list opening at `start` and closing at
        `close`, each part decoded, or None when that is not where the body's list is."""
        after = raw[close + 1:]
        if after.lstrip(SPACE)[:1] not in (b",", b"}"):
            return None
        try:  # a megabyte of members other than the list: a piece at a time
            top = parse_large(raw[:start] + orjson.dumps(self._nonce) + after)
        except InvalidJSON:
            return None
        if not isinstance(top, dict) or top.get(self.name) != self._nonce:
            return None
        messages = decode_members(raw[start + 1:close])
        if messages is None:  # e.g. `{"messages": "<nonce>"}` from a last `]}` of a later
            return None  # list (`tools`): an earlier `]` may still be the one
        end = close  # before the whitespace ahead of `]`: an indented body's next call
        while raw[end - 1] in SPACE:  # puts its `,` right after the last message
            end -= 1
        return _Split(raw, end, top, messages)

    def _keep(self, tenant: str, split: _Split, replacing: int | None = None) -> None:
        """Keep `split` (forgetting the body it continues, `replacing`), then forget the
        oldest bodies of its kind past their bounds: a large body only drops large ones
        (and the one it continues), so only the fitting thread, which keeps them, frees
        them. What is dropped is freed once the lock is let go (a large body's values take
        milliseconds to free)."""
        large = len(split.raw) >= MAX_BODY_BYTES
        order = self._large if large else self._order
        dropped: list[tuple[str, _Split] | None] = []
        with self._lock:
            if replacing is not None:
                dropped.append(self._drop(replacing))
            self._serial += 1
            order[self._serial] = (tenant, split)
            self._by_tenant.setdefault(tenant, []).insert(0, (self._serial, split))
            if large:
                self._held += len(split.raw)
            else:
                self._bytes += len(split.raw)
            alike = [serial for serial, kept in self._by_tenant[tenant]
                     if (len(kept.raw) >= MAX_BODY_BYTES) == large]
            if len(alike) > PER_TENANT:
                dropped.append(self._drop(alike[-1]))
            while (self._held > self._large_bytes if large
                   else self._bytes > self._max_bytes):
                dropped.append(self._drop(next(iter(order))))

    def _drop(self, serial: int) -> tuple[str, _Split] | None:
        """Forget a kept body (the lock held; one another thread dropped first: nothing),
        returned for the caller to free."""
        entry = self._order.pop(serial, None)
        if entry is not None:
            self._bytes -= len(entry[1].raw)
        else:
            entry = self._large.pop(serial, None)
            if entry is None:
                return None
            self._held -= len(entry[1].raw)
        tenant = entry[0]
        mine = [kept for kept in self._by_tenant[tenant] if kept[0] != serial]
        if mine:
            self._by_tenant[tenant] = mine
        else:
            del self._by_tenant[tenant]
        return entry


def _check(kept: _Split, split: _Split, body: dict[str, Any], check: Check) -> None:
    """`body` (`split`'s) validated by `check`'s format from where `kept`'s validation
    ended (from its first message if it was not validated by that format), the state
    after it noted on `split`; its error raised cut loose from this frame, as `as_is`
    raises one."""
    name, validate_from = check
    start, state = kept.checked.get(name, (0, None))
    try:
        state = validate_from(body, start, state)
    except GatewayError as refused:
        error = refused
    else:
        split.checked[name] = (len(split.messages), state)
        return
    body = {}
    error.__traceback__ = error.__context__ = error.__cause__ = None
    raise error


def _repeats(raw: bytes, kept: bytes, end: int) -> bool:
    """`raw` starts with `kept[:end]`: compared a megabyte at a time (each compare holds the
    interpreter), so that on the fitting thread the loop waits at most one piece."""
    view = memoryview(kept)
    return all(raw.startswith(view[at:min(at + PIECEWISE_BYTES, end)], at)
               for at in range(0, end, PIECEWISE_BYTES))


def _array_starts(raw: bytes, key: bytes = KEY) -> list[int]:
    """Where the first `KEY_TRIES` places `"<name>": [` open an array (whether one is the
    body's own member is checked when the body is split)."""
    starts: list[int] = []
    at = raw.find(key)
    while at >= 0 and len(starts) < KEY_TRIES:
        rest = raw[at + len(key):at + len(key) + 64].lstrip(SPACE)
        if rest.startswith(b":") and rest[1:].lstrip(SPACE).startswith(b"["):
            starts.append(raw.index(b"[", at + len(key)))
        at = raw.find(key, at + len(key))
    return starts


def decode_members(members: bytes) -> list[Any] | None:
    """The array `[members]` decoded as orjson decodes it where a body's `messages` sits
    (one level in: its depth limit applies as in the whole body), or None if that is not
    an array. Under `PIECEWISE_BYTES`: orjson in one go; past it (on the fitting thread,
    a large body's): a piece at a time, as `parse_large` decodes a body that large."""
    if len(members) >= PIECEWISE_BYTES:
        with contextlib.suppress(Unsure):
            return members_in_pieces(members)
    try:
        value = orjson.loads(b"".join((b"[[", members, b"]]")))
    except orjson.JSONDecodeError:
        return None
    # One element, a list: the inner `[` closed by the `]` after `members`, not inside it.
    return value[0] if len(value) == 1 and isinstance(value[0], list) else None


RUN = 16  # messages per run the encoder remembers (`BodyEncoder`)
RUN_BYTES = 1 << 24  # the runs' JSON kept, all sessions (their messages are shared)


class BodyEncoder:
    """`orjson.dumps` of a body to forward, its list of messages (`name`: a Responses
    body's `input`) encoded a run of `RUN` at a time, each run's JSON remembered by the
    identity of the message objects it holds.

    A session's next fitted call forwards mostly the same message objects (the client's,
    decoded once by `BodyCache`; the engine's rewritten copies kept by its prefix; a
    Messages or Responses body's items as its render memo gave them last time), so
    between steps only its last run or two are encoded again, not the whole history (2 ms
    of orjson for the call-300 body here). Exact: orjson writes a list as `[` its members
    joined by `,` `]`, so the runs' JSON joined is the list's; the body's other members are
    encoded with the list holding a random string (a client cannot place it) that is
    found exactly once and replaced; a remembered run holds its message objects, so their
    ids cannot be reused while it is kept, and nothing writes to a message once decoded or
    rendered (the engine's rewrites are copies, as `MessageRuns` in the trace writer
    relies on too). Anything else (no such list, an error) is encoded whole, so an
    error reads exactly as before.

    Runs are kept up to `max_bytes` of JSON in all and `per_tenant` per tenant (the
    tenant's least recently used run dropped first, then everybody's). The encoder of
    bodies of a megabyte or more (`Fitting.large_encoder`) is called on the fitting thread
    only, where such bodies are fitted and freed (issue 10): its runs, which hold those
    bodies' messages, are dropped there only, and freed once its lock is let go."""

    def __init__(self, max_bytes: int = RUN_BYTES, per_tenant: int | None = None) -> None:
        self._max_bytes = max_bytes
        self._per_tenant = max_bytes if per_tenant is None else per_tenant
        self._key = secrets.token_hex(16)
        self._nonce = orjson.dumps(self._key)
        # run key -> (tenant, run, JSON), least recently used first; and per tenant
        self._runs: OrderedDict[tuple[int, ...], tuple[str, list[Any], bytes]] = OrderedDict()
        self._tenants: dict[str, OrderedDict[tuple[int, ...], None]] = {}
        self._bytes = 0
        self._tenant_bytes: dict[str, int] = {}
        self._lock = threading.Lock()  # the loop and the fitting thread both encode
        self.reused = 0  # runs not encoded again (read by tests and benches)
        self.encoded = 0  # runs encoded (read by tests and benches)

    def dumps(self, body: dict[str, Any], name: str = "messages", tenant: str = "") -> bytes:
        messages = body.get(name)
        if type(messages) is not list or len(messages) < 2 * RUN:
            return orjson.dumps(body)
        top = dict(body)
        top[name] = self._key
        dropped: list[Any] = []  # runs dropped: freed once the lock is let go
        try:
            head = orjson.dumps(top)
            at = head.find(self._nonce)
            if at < 0 or head.find(self._nonce, at + 1) >= 0:
                return orjson.dumps(body)
            parts = [head[:at], b"["]
            for lo in range(0, len(messages), RUN):
                parts += (self._run(messages[lo:lo + RUN], tenant, dropped), b",")
        except orjson.JSONEncodeError:
            return orjson.dumps(body)  # raises as it did
        parts[-1] = b"]"  # the last run's comma
        parts.append(head[at + len(self._nonce):])
        return b"".join(parts)  # one copy of the bytes (a fresh 750 KB costs ~0.5 ms here)

    def _run(self, run: list[Any], tenant: str, dropped: list[Any]) -> bytes:
        """The JSON of `run`'s members joined by `,` (a list's without its brackets)."""
        key = tuple(map(id, run))
        with self._lock:
            known = self._runs.get(key)
            if known is not None:
                self._runs.move_to_end(key)
                self._tenants[known[0]].move_to_end(key)
                self.reused += 1
                return known[2]
        raw = orjson.dumps([run])[2:-2]  # as deep as in the body: orjson's limit applies alike
        self.encoded += 1
        if len(run) < RUN:
            return raw  # a session's last run grows with its next call: not kept
        with self._lock:
            if key not in self._runs:
                self._runs[key] = (tenant, run, raw)
                self._tenants.setdefault(tenant, OrderedDict())[key] = None
                self._bytes += len(raw)
                self._tenant_bytes[tenant] = self._tenant_bytes.get(tenant, 0) + len(raw)
            while self._tenant_bytes.get(tenant, 0) > self._per_tenant:
                dropped.append(self._drop(next(iter(self._tenants[tenant]))))
            while self._bytes > self._max_bytes:
                dropped.append(self._drop(next(iter(self._runs))))
        return raw

    def _drop(self, key: tuple[int, ...]) -> tuple[str, list[Any], bytes]:
        """Forget a run (the lock held), returned for the caller to free."""
        entry = self._runs.pop(key)
        tenant = entry[0]
        self._bytes -= len(entry[2])
        self._tenant_bytes[tenant] -= len(entry[2])
        order = self._tenants[tenant]
        del order[key]
        if not order:
            del self._tenants[tenant], self._tenant_bytes[tenant]
        return entry
