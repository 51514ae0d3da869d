"""One call explained: what the client sent against what went upstream, message by message.

After a fitted call each managed route stores a compact *account* with the call's trace
(`account_of`): the client's roles, the render plan (per message sent: the client's index
and, when rewritten, the text sent in its place), the drops, the budget and its source, the
playbook block. `explain` turns it into the answer of `GET /admin/traces/{trace_id}` and
`ctxgate explain`: for every client message kept, digested (with the digest) or dropped,
each drop with its stage, reason and tokens; the class and budget the call got and why; the
playbook block it carried and where. The account holds no kept message's text; its lists
that grow with the session (roles, plan, drops) are stored in pieces of 64 entries under
their hash (`split_account`), which a session's calls share up to their first change, so a
call writes what changed, not its whole account (the trace's TTL bounds how many are kept).
"""

from __future__ import annotations

import hashlib
import sys
import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import orjson

from gateway.context.fold import FOLD_REASONS
from gateway.store import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.context.engine import FittedCall

ACCOUNT_FIELD = "account"  # of the trace hash (gateway/learner/traces.py writes it)
DROP_FIELDS = ("message_index", "item_id", "kind", "stage", "action", "reason",
               "tokens_before", "tokens_after", "kept_as", "step")
WHY = {
    "header": "the request's x-ctxgate-budget-tokens header",
    "forecast": "the class's caps as its forecast moved them from live evidence, or an "
    "output reserve forecast from the class's observed completions, bounded by the model's "
    "window",
    "config": "the class's caps, bounded by the model's window less the configured (or the "
    "request's own max_tokens) output reserve",
    "unmanaged": "none: the call was not fitted",
}
STORE_DOWN_REASON = "failed open: store unavailable"
PIECED = ("roles", "plan", "drops")  # the account's lists that grow with the session
PIECE = 64  # entries per piece: a call rewrites only the pieces from its first change on
Pieces = tuple[tuple[str, bytes], ...]  # (hash, JSON of a run of entries)


def account_of(fitted: FittedCall, budget_source: str) -> dict[str, Any]:
    """The compact record stored with the trace (JSON-ready)."""
    account = _head(fitted, budget_source)
    for name, source in _sources(fitted).items():
        account[name] = _entries(name, source)
    return account


def _head(fitted: FittedCall, budget_source: str) -> dict[str, Any]:
    """The account's fields, its lists (`PIECED`) as placeholders in their order."""
    request = fitted.request or {}
    block = fitted.block
    return {
        "v": 1,
        "task_class": fitted.task_class,
        "session_id": fitted.session_id,
        "model": request.get("model"),
        "budget": fitted.budget,
        "budget_source": budget_source,
        "tokens_before": fitted.tokens_before,
        "tokens_after": fitted.tokens_after,
        "short_ids": fitted.short_ids,  # tool-call ids sent as `call_ids.short_id` of them
        "roles": None, "plan": None, "drops": None,
        "playbook": None if block is None else {
            "bullet_ids": list(block.bullet_ids), "tokens": block.tokens, "text": block.text},
    }


def _sources(fitted: FittedCall, roles: list[str] | None = None) -> dict[str, Sequence[Any]]:
    """What the account's lists are made of: the messages' roles (`roles`, when known),
    the plan's entries and the drop events (between steps a session's calls hand over the
    same objects, grown)."""
    messages = (fitted.request or {}).get("messages") or []
    plan = fitted.plan
    if plan is None:  # nothing rendered (passed through): every message went as sent
        plan = [(i, None) for i in range(len(messages))]
    return {"roles": roles_of(messages) if roles is None else roles, "plan": plan,
            "drops": fitted.drops}


def _entries(name: str, source: Sequence[Any]) -> list[Any]:
    if name == "plan":
        return [i if text is None else [i, text] for i, text in source]
    if name == "drops":
        return [[d.message_index, d.item_id, d.kind, d.stage, d.action, d.reason,
                 d.tokens_before, d.tokens_after, d.kept_as, d.step] for d in source]
    return list(source)


def split_account(account: dict[str, Any]) -> tuple[bytes, Pieces]:
    """The account as stored: its long lists cut into pieces of `PIECE` entries from the
    start, each stored once under its hash (`keys.account_piece`) and named in the account
    in its place (`{"pieces": [hash, ...]}`). The calls of a long session share the pieces
    before their first change, so what a call writes grows with what changed, not with
    the session (the whole account was ~100 KB per call at call 300)."""
    return AccountPieces(0).split(None, account, lambda _name, entries: list(entries))


Known = tuple[Sequence[Any], str, bytes]  # a piece's source entries, its hash, its JSON


class AccountPieces:
    """`split_account` for a session's calls, remembering per session (a bounded LRU) the
    pieces of its latest account with the objects each was made from: a piece whose
    sources are the same (between steps: every piece but the last ones, the same objects
    handed over) is neither built, serialised nor hashed again."""

    def __init__(self, sessions: int = 1024) -> None:
        self._sessions = sessions
        self._by_session: OrderedDict[Any, dict[str, list[Known]]] = OrderedDict()
        # Per session: its latest call's roles, and the number of the body they are of
        # (`Lineage.body`): a call whose body the gateway proved to repeat that one's
        # messages reads the roles of its new messages only.
        self._roles: OrderedDict[Any, tuple[int, list[str]]] = OrderedDict()
        self._lock = threading.Lock()  # the loop and the fitting thread both split

    def of(self, fitted: FittedCall, budget_source: str) -> tuple[bytes, Pieces]:
        """A fitted call's account as stored (`split_account(account_of(...))`)."""
        key = (fitted.tenant, fitted.session_id)
        account = _head(fitted, budget_source)
        account.update(_sources(fitted, self._roles_of(key, fitted)))
        return self.split(key, account, _entries)

    def _roles_of(self, key: Any, fitted: FittedCall) -> list[str]:
        """`roles_of` the call's messages, from its session's last call's when its body
        was proven to continue that call's (`fitted.lineage`)."""
        messages = (fitted.request or {}).get("messages") or []
        lineage = fitted.lineage
        if lineage is None or not self._sessions:
            return roles_of(messages)
        with self._lock:
            kept = self._roles.pop(key, None)
        if kept is not None and kept[0] == lineage.after and len(kept[1]) == lineage.count:
            roles = kept[1] + roles_of(messages[lineage.count:])
        else:
            roles = roles_of(messages)
        with self._lock:
            self._roles[key] = (lineage.body, roles)
            if len(self._roles) > self._sessions:
                self._roles.popitem(last=False)
        return roles

    def split(self, key: Any, account: dict[str, Any],
              entries: Callable[[str, Sequence[Any]], list[Any]]) -> tuple[bytes, Pieces]:
        """`account` (its `PIECED` lists as sources that `entries` turns into entries)."""
        with self._lock:
            before = self._by_session.get(key, {})
        pieces: dict[str, bytes] = {}
        head, memo = dict(account), {}
        for name in PIECED:
            source = account.get(name)
            if source is None:
                continue
            if len(source) <= PIECE:
                head[name] = entries(name, source)
                continue
            known, old = [], before.get(name, ())
            for k, start in enumerate(range(0, len(source), PIECE)):
                chunk = source[start:start + PIECE]
                if k < len(old) and old[k][0] == chunk:  # the same objects: identity, in C
                    # with this call's objects: a step's equal new ones then compare by identity
                    known.append((chunk, old[k][1], old[k][2]))
                    continue
                raw = orjson.dumps(entries(name, chunk))
                known.append((chunk, hashlib.blake2b(raw, digest_size=16).hexdigest(), raw))
            pieces.update((digest, raw) for _, digest, raw in known)
            head[name], memo[name] = {"pieces": [digest for _, digest, _ in known]}, known
        self._remember(key, memo)
        return orjson.dumps(head), tuple(pieces.items())

    def _remember(self, key: Any, memo: dict[str, list[Known]]) -> None:
        if not self._sessions:
            return
        with self._lock:
            self._by_session[key] = memo
            self._by_session.move_to_end(key)
            if len(self._by_session) > self._sessions:
                self._by_session.popitem(last=False)


async def _joined(redis: aioredis.Redis, tenant: str,
                  account: dict[str, Any]) -> dict[str, Any] | None:
    """`account` with its pieced lists read back, or None when a piece has expired."""
    wanted = [(name, account[name]["pieces"]) for name in PIECED
              if isinstance(account.get(name), dict)]
    if not wanted:
        return account
    read = await read_pieces(redis, tenant, [digest for _, names in wanted for digest in names])
    if read is None:
        return None
    raws, joined = iter(read), dict(account)
    for name, names in wanted:
        entries: list[Any] = []
        for _ in names:
            entries.extend(orjson.loads(next(raws)))
        joined[name] = entries
    return joined


async def read_pieces(redis: aioredis.Redis, tenant: str, digests: list[str]
                      ) -> list[bytes] | None:
    """The stored pieces named (`keys.account_piece`), or None when one is gone."""
    # GETs in a pipeline, not MGET: a tenant's keys share a slot, but keep to one pattern.
    async with redis.pipeline(transaction=False) as pipe:
        for digest in digests:
            pipe.get(keys.account_piece(tenant, digest))
        raws: list[bytes | None] = await pipe.execute()
    return None if any(raw is None for raw in raws) else cast(list[bytes], raws)


def unmanaged_account(messages: list[dict[str, Any]], session_id: str, model: Any,
                      reason: str = STORE_DOWN_REASON) -> dict[str, Any]:
    """The account of a call that went upstream exactly as the client sent it (fitting
    failed open): every message sent as is, nothing dropped, no budget, no playbook."""
    return {
        "v": 1, "task_class": "unmanaged", "unmanaged": reason, "session_id": session_id,
        "model": model, "budget": None, "budget_source": "unmanaged",
        "tokens_before": None, "tokens_after": None,
        "roles": roles_of(messages),
        "plan": None,  # every message, in order, as sent
        "drops": [], "playbook": None,
    }


def roles_of(messages: list[dict[str, Any]]) -> list[str]:
    """Each message's role, interned: a 100,000-message call's list then holds a handful of
    strings, and freeing it (wherever the trace writer drops it) is one pass, not 10^5."""
    return [sys.intern(str(m.get("role"))) for m in messages]


def _folded_into(sent: list[int], drops_of: Mapping[int | None, list[dict[str, Any]]]
                 ) -> dict[int, int]:
    """Per client message folded (a `folded_exchange` drop, not sent): the message whose
    note carries it, the latest one sent before it (a run goes whole, right after it)."""
    order = sorted(sent)
    into = {}
    for i, drops in drops_of.items():
        if i is None or not any(d["reason"] in FOLD_REASONS for d in drops):
            continue
        k = bisect_left(order, i)
        if k and (k == len(order) or order[k] != i):
            into[i] = order[k - 1]
    return into


def _playbook_target(roles: list[str], sent: list[int]) -> int | None:
    """Where `inject_block` put the block: the first system/developer message sent (its
    index among the sent messages), or None when it opened a new system message."""
    for j, i in enumerate(sent):
        if roles[i] in ("system", "developer"):
            return j
    return None


def explain(account: Mapping[str, Any], trace_id: str, tenant: str) -> dict[str, Any]:
    """The account as a reader wants it: one entry per client message, in order."""
    roles: list[str] = list(account["roles"])
    sent: list[int] = []
    digests: dict[int, str] = {}
    plan = account["plan"]
    for entry in range(len(roles)) if plan is None else plan:
        if isinstance(entry, int):
            sent.append(entry)
        else:
            sent.append(int(entry[0]))
            digests[int(entry[0])] = str(entry[1])
    drops_of: dict[int | None, list[dict[str, Any]]] = {}
    for raw in account["drops"]:
        drop = dict(zip(DROP_FIELDS, raw, strict=True))
        drops_of.setdefault(drop["message_index"], []).append(drop)
    playbook = account.get("playbook")
    target = _playbook_target(roles, sent) if playbook else None
    offset = 1 if playbook and target is None else 0  # a new system message went first
    position = {i: j + offset for j, i in enumerate(sent)}
    into = _folded_into(sent, drops_of)
    carries: dict[int, list[int]] = {}
    for i, j in into.items():
        carries.setdefault(j, []).append(i)
    messages = []
    for i, role in enumerate(roles):
        drops = drops_of.get(i, [])
        status = ("folded" if i in into else "dropped" if i not in position
                  else "digested" if i in digests else "kept")
        messages.append({
            "index": i, "role": role, "status": status, "sent_as": position.get(i),
            # an old finished exchange folded into a note in the message before it (fold.py)
            "folded_into": into.get(i), "carries_folded": carries.get(i, []),
            "tokens_before": sum(d["tokens_before"] for d in drops) if drops else None,
            "tokens_after": sum(d["tokens_after"] for d in drops) if drops else None,
            "digest": digests.get(i),
            "playbook_appended": playbook is not None and target is not None
            and position.get(i) == target + offset,
            "drops": [{k: v for k, v in d.items() if k != "message_index"} for d in drops],
        })
    saved = sum(d["tokens_before"] - d["tokens_after"] for ds in drops_of.values() for d in ds)
    source = str(account["budget_source"])
    return {
        "trace_id": trace_id, "tenant": tenant, "session_id": account["session_id"],
        "task_class": account["task_class"], "model": account.get("model"),
        "unmanaged": account.get("unmanaged"),  # why the call was not fitted, if it was not
        "budget": {"tokens": account["budget"], "source": source, "why": WHY.get(source, "")},
        "tokens": {"before": account["tokens_before"], "after": account["tokens_after"],
                   "playbook": playbook["tokens"] if playbook else 0, "saved_by_drops": saved},
        "upstream": {"messages": len(sent) + offset,
                     "playbook_in": None if not playbook else (
                         0 if target is None else target + offset),
                     "playbook_new_message": bool(playbook) and target is None,
                     # every tool-call id longer than 9 characters went as a 9-character
                     # hash of it, call and result alike (gateway/context/call_ids.py)
                     "tool_call_ids": "short" if account.get("short_ids") else "as sent"},
        "playbook": playbook,
        "messages": messages,
    }


async def load_explained(redis: aioredis.Redis, trace_id: str) -> dict[str, Any] | None:
    """The explained call, or None when no account of it is kept (unknown, expired, or a
    call that was not fitted)."""
    owner = await redis.get(keys.trace_owner(trace_id))
    if owner is None:
        return None
    tenant = owner.decode() if isinstance(owner, bytes) else str(owner)
    raw = await redis.hget(keys.trace(tenant, trace_id), ACCOUNT_FIELD)
    if raw is None:
        return None
    account = await _joined(redis, tenant, orjson.loads(raw))
    return None if account is None else explain(account, trace_id, tenant)


def render_text(explained: Mapping[str, Any]) -> str:
    """`ctxgate explain`'s plain-text account."""
    budget, tokens = explained["budget"], explained["tokens"]
    out = [
        f"trace {explained['trace_id']}  tenant {explained['tenant']}  "
        f"session {explained['session_id']}",
        f"class {explained['task_class']}  model {explained['model']}"
        + (f"  ({explained['unmanaged']})" if explained.get("unmanaged") else ""),
        f"budget {budget['tokens']} tokens ({budget['source']}: {budget['why']})"
        if budget["tokens"] is not None else f"budget none ({budget['why']})",
        f"tokens {tokens['before']} -> {tokens['after']}  (drops saved "
        f"{tokens['saved_by_drops']}, playbook block {tokens['playbook']})"
        if tokens["before"] is not None else "tokens not counted (sent as the client sent it)",
        f"upstream got {explained['upstream']['messages']} of {len(explained['messages'])} "
        "messages" + ("  (tool-call ids shortened)"
                      if explained["upstream"].get("tool_call_ids") == "short" else ""),
        "",
    ]
    playbook = explained["playbook"]
    if playbook:
        where = ("a new first system message" if explained["upstream"]["playbook_new_message"]
                 else f"upstream message {explained['upstream']['playbook_in']}")
        out.append(f"playbook block ({playbook['tokens']} tokens, bullets "
                   f"{', '.join(playbook['bullet_ids']) or '-'}) in {where}")
    for m in explained["messages"]:
        sent = "-" if m["sent_as"] is None else str(m["sent_as"])
        if m.get("folded_into") is not None:
            sent = f"folded into #{m['folded_into']}"
        line = f"#{m['index']:<4} {m['role']:<10} {m['status']:<9} -> {sent}"
        if m["tokens_before"] is not None:
            line += f"  {m['tokens_before']} -> {m['tokens_after']} tokens"
        out.append(line)
        for d in m["drops"]:
            kept = f" kept as {d['kept_as']}" if d["kept_as"] else ""
            out.append(f"        {d['stage']}/{d['action']} {d['reason']} {d['kind']} "
                       f"{d['item_id']} {d['tokens_before']} -> {d['tokens_after']} "
                       f"(step {d['step']}){kept}")
        if m["digest"] is not None:
            digest = m["digest"] if len(m["digest"]) <= 400 else m["digest"][:400] + "..."
            out.append("        digest: " + digest.replace("\n", "\n                "))
    return "\n".join(out)
