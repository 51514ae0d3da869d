"""A call between steps that decides new outputs on arrival numbers its decisions one step
after the session's latest; the prefix keeps that latest step with the decisions it is of,
so the next such call does not walk every decision for it. The steps (and so the drop log's
lines) are the ones an engine without the prefix cache gives, and the kept step is always
the latest among the decisions it is of."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.settings import Settings
from tests.context.sessions import fit_both, memory_engine
from tests.context.test_arrival_repeats_prefix import TOOLS, _session


async def test_arrival_cuts_take_the_step_after_the_latest_without_walking_again(
    settings: Settings, embedder: Any
) -> None:
    cached = memory_engine(settings, embedder, True)
    plain = memory_engine(settings, embedder, False)
    session = uuid.uuid4().hex
    kept_before = 0  # calls that cut on arrival on the prefix with the latest step kept
    entries = cached.prefixes._entries
    assert entries is not None
    state = await cached.sessions.load("t1", session)
    kept = None  # the prefix's latest step after the previous call
    async for end, fitted, again, on_prefix in fit_both(cached, plain, _session(48), TOOLS,
                                                          session):
        mine = await cached.sessions.load("t1", session)
        theirs = await plain.sessions.load("t1", session)
        assert mine.decisions == theirs.decisions, end  # steps included
        assert (fitted.body, fitted.drops) == (again.body, again.drops), end
        if (on_prefix and len(mine.decisions) > len(state.decisions)
                and kept is not None and kept[0] is state.decisions):
            kept_before += 1
        prefix = entries.get(("t1", session))
        kept = prefix.latest if prefix is not None else None
        if kept is not None:
            decisions, step = kept
            assert step == max((d.step for d in decisions.values()), default=0), end
        state = mine
    assert kept_before >= 5, kept_before
