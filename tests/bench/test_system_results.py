"""The yardstick's blind spot: values a client's mid-chat system messages carry.

The issue's yardstick counts a value as needed only when an earlier non-system message holds
it; `bench.replay --system-results` also counts system messages after the first other
message (tool results sent back as system messages), never the leading system prompt.
"""

from __future__ import annotations

from bench.corpora import Session
from bench.corpus_run import replay_session
from bench.yardstick import needed_values, needed_with_system_results
from gateway.context.replay import build_engine
from gateway.settings import Settings

PROMPT = {"role": "system", "content": "You are a shell agent. Config lives in /etc/agent.conf."}
TASK = {"role": "user", "content": "Write the report and show where it went."}
WRITE = {"role": "assistant", "content": "```sh\nmake report\n```"}
RESULT = {"role": "system", "content": "Ran command: make report\nSaved to /tmp/report_42.txt"}
SHOW = {"role": "assistant", "content": "```sh\ncat /tmp/report_42.txt /etc/agent.conf\n```"}
EARLIER = [PROMPT, TASK, WRITE, RESULT]


def test_a_result_sent_as_a_system_message_is_a_source_only_when_asked() -> None:
    assert needed_values(SHOW, EARLIER) == set()
    assert needed_with_system_results(SHOW, EARLIER) == {"/tmp/report_42.txt"}


def test_the_leading_system_prompt_is_never_a_source() -> None:
    assert "/etc/agent.conf" not in needed_with_system_results(SHOW, EARLIER)
    assert needed_with_system_results(SHOW, [PROMPT]) == set()


async def test_a_replay_counts_the_wider_sources_only_with_the_option() -> None:
    session = Session("system-results", [*EARLIER, SHOW])
    engine = build_engine(Settings())
    try:
        plain = await replay_session(engine, session, corpus="plain")
        wide = await replay_session(engine, session, corpus="wide", system_results=True)
    finally:
        assert engine.embedder is not None
        engine.embedder.close()
    assert [r["needed"] for r in plain] == [0, 0]
    assert [r["needed"] for r in wide] == [0, 1]
    assert wide[-1]["methods"]["none"]["recall"] == 1.0
