"""A call's drop log does not depend on whether its engine keeps a prefix cache. Once old
turns are folded, a call between steps whose new output is decided on arrival on the
session's prefix (a JSON record laid out with spaces, sent minified) is one step past the
session's latest; the folded runs with no drop events of their own (an exchange sent as it
came) carry the call's latest step, so on that call they carry the new one whether the fold
is taken from the prefix's memo (renumbered) or made anew (no cache)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from gateway.context.fold import FOLD_REASONS
from gateway.settings import Settings
from tests.context.sessions import fit_both, memory_engine
from tests.context.test_fold import support_queue

TOOLS = [{"type": "function", "function": {"name": "get_reservation",
                                           "parameters": {"type": "object"}}}]


def _result(k: int) -> str:
    """One in three lookups returns a JSON record laid out with spaces (minified on arrival),
    one in three a short line no stage touches, the others a list of segments."""
    if k % 3 == 2:
        return json.dumps({"reservation_id": f"RES{k:03d}X", "user_id": f"cust_{k:03d}_4411",
                           "flights": [{"flight": f"HAT{k:03d}{i}", "date": f"2024-05-{10 + i}",
                                        "seat": f"{i}A"} for i in range(6)],
                           "status": "confirmed"}, indent=2)
    if k % 3 == 0:
        return f"RES{k:03d}X: no segments"
    return "\n".join(f"segment {i}: flight HAT{k:03d}{i} on 2024-05-{10 + i} seat {i}A"
                     for i in range(12))


async def test_a_cached_and_an_uncached_engine_log_the_same_fold_steps(
    settings: Settings, embedder: Any
) -> None:
    cached = memory_engine(settings, embedder, True)
    plain = memory_engine(settings, embedder, False)
    session = uuid.uuid4().hex
    messages = support_queue(50, _result)
    moved = 0
    async for end, fitted, again, on_prefix in fit_both(cached, plain, messages, TOOLS, session):
        assert (fitted.body, fitted.tokens_after) == (again.body, again.tokens_after), end
        assert fitted.drops == again.drops, end
        folds = {d.step for d in fitted.drops if d.reason in FOLD_REASONS}
        latest = max((d.step for d in fitted.drops), default=0)
        if on_prefix and latest in folds:
            moved += 1
    # calls on the prefix whose fold events carry the step this call brought
    assert moved >= 3, moved
