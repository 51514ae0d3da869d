"""Every Redis key and stream name the gateway uses, in one place.

Keys that belong to a tenant carry the tenant in a hash tag (`{t:...}`) so that a Redis
Cluster keeps one tenant's keys in one slot (multi-key Lua scripts stay legal) while
spreading tenants across slots.

Which keys must share a slot, and why (audited for Redis Cluster, issue 13):

- `playbook_bullets`, `playbook_meta`, `playbook_applied` of one tenant/class: merge.lua
  reads and writes all three atomically, and `PlaybookStore.replace` writes bullets and meta
  in one MULTI. They share the `{t:tenant}` tag, hence one slot.
- `session`, `forecast`, `trace`, `trace_learned`, `playbook_delta`, `agent_runs`: each is used
  alone (one key per command or per script); they carry the tenant tag anyway, so a tenant
  lives on one node.
- `class_evidence`, `class_forecast`, `class_forecast_history` of one task class share the
  `{fc:class}` tag: the controller's commit script writes the forecast and its history
  atomically (they are per class across tenants: signals are counts, no content).
- Untagged keys are only ever used one at a time: the trace stream and its dead letters
  (XADD/XREADGROUP/XACK on one key), `PLAYBOOK_INDEX` (one set), `trace_owner` (looked up
  before the tenant is known), `embedding` (shared by all tenants, spread over all slots
  on purpose; read with pipelined GETs, never MGET).

Pipelines that mix slots are non-transactional (`transaction=False`): a cluster client
splits them by node. Nothing uses KEYS or SCAN; the playbooks are listed from
`PLAYBOOK_INDEX`.
"""

from __future__ import annotations

import zlib

PREFIX = "ctxgate"

# Global streams and indexes (one slot each).
TRACE_STREAM = f"{PREFIX}:traces"
TRACE_DEAD_LETTER = f"{PREFIX}:traces:dead"
TRACE_GROUP = "learners"
PLAYBOOK_INDEX = f"{PREFIX}:playbooks"  # set of "tenant/task_class"


def _tenant(tenant: str) -> str:
    return f"{PREFIX}:{{t:{tenant}}}"


def session(tenant: str, session_id: str) -> str:
    """Hash: the session's task class, compaction state and pinned playbook block."""
    return f"{_tenant(tenant)}:session:{session_id}"


def agent_class(tenant: str, fingerprint: str) -> str:
    """String: the task class decided for one agent (system prompt + tool set, hashed), so
    every session of the agent gets it, whichever starts with a short call."""
    return f"{_tenant(tenant)}:agent:{fingerprint}"


def agent_runs(tenant: str, fingerprint: str) -> str:
    """Hash: how long one agent's sessions run (`reached:N`: its sessions that made N calls,
    N each of `agents.RUN_MARKS`), for the calls a step on its next sessions is weighed over
    (`steps.agent_left`)."""
    return f"{_tenant(tenant)}:agent_runs:{fingerprint}"


def forecast(tenant: str, task_class: str) -> str:
    """Hash: what the class has used (completion sizes, overflows) for its budget forecast."""
    return f"{_tenant(tenant)}:forecast:{task_class}"


def _forecast_class(task_class: str) -> str:
    return f"{PREFIX}:{{fc:{task_class}}}"


def class_evidence(task_class: str) -> str:
    """Hash: live fidelity signals of a class, `{mode}:{count}` -> running total."""
    return f"{_forecast_class(task_class)}:evidence"


def class_forecast(task_class: str) -> str:
    """Hash: the controller's forecast of a class (scale, version, evidence judged so far)."""
    return f"{_forecast_class(task_class)}:caps"


def class_forecast_history(task_class: str) -> str:
    """List: the forecast's moves, newest first, capped (JSON each)."""
    return f"{_forecast_class(task_class)}:caps:history"


def token_scale(model: str) -> str:
    """Hash: estimated and provider-reported input tokens of a model with no public tokenizer."""
    return f"{PREFIX}:tokscale:{model}"


def trace(tenant: str, trace_id: str) -> str:
    """Hash: one call's trace record, looked up by feedback (tenant-scoped: no cross-tenant hit)."""
    return f"{_tenant(tenant)}:trace:{trace_id}"


def account_piece(tenant: str, digest: str) -> str:
    """String: a run of an explainer account's entries, named by its hash (a trace's account
    names the pieces it is made of: a long session's calls share most of theirs)."""
    return f"{_tenant(tenant)}:acctpiece:{digest}"


def trace_owner(trace_id: str) -> str:
    """String: the tenant of a trace, for the admin explainer (which is given no tenant)."""
    return f"{PREFIX}:traceowner:{trace_id}"


def trace_learned(tenant: str, trace_id: str, kind: str) -> str:
    """String: the stream entry a worker learns a trace (or its feedback, by `kind`) from;
    any other entry for it is a duplicate (a write that timed out, then written again)."""
    return f"{_tenant(tenant)}:learned:{kind}:{trace_id}"


def playbook_bullets(tenant: str, task_class: str) -> str:
    """Hash: bullet id -> bullet JSON."""
    return f"{_tenant(tenant)}:pb:{task_class}:bullets"


def playbook_meta(tenant: str, task_class: str) -> str:
    """Hash: version, per-section id counters."""
    return f"{_tenant(tenant)}:pb:{task_class}:meta"


def playbook_applied(tenant: str, task_class: str) -> str:
    """Set: ids of operations already merged (idempotency)."""
    return f"{_tenant(tenant)}:pb:{task_class}:applied"


def embedding(model: str, content_hash: str) -> str:
    """String: a cached embedding (float32 bytes) of one text under one model."""
    return f"{PREFIX}:emb:{model}:{content_hash}"


def playbook_delta(tenant: str, trace_id: str) -> str:
    """String: the Curator's operations for one trace, kept so a redelivery reuses them."""
    return f"{_tenant(tenant)}:pb:delta:{trace_id}"



def trace_shard(tenant: str, shards: int) -> int:
    """The trace shard of a tenant: stable, so one tenant's traces stay in order."""
    return zlib.crc32(tenant.encode()) % shards if shards > 1 else 0


def trace_stream(shard: int = 0) -> str:
    """Stream of trace shard `shard` (shard 0 is the unsharded stream's name)."""
    return TRACE_STREAM if shard == 0 else f"{TRACE_STREAM}:{shard}"


def trace_dead_letter(shard: int = 0) -> str:
    """Dead letters of trace shard `shard`, kept beside it."""
    return TRACE_DEAD_LETTER if shard == 0 else f"{TRACE_STREAM}:{shard}:dead"
