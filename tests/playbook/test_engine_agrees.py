"""The context engine and the learner read a class's playbook settings the same way: the
global `playbook.defaults` merged with the class's own `playbook:` section."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.context.engine import CallContext, ContextEngine, InjectedBlock
from gateway.context.session import MemorySessionStore
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.playbook.config import class_playbook
from gateway.settings import Settings

MODELS = Path(__file__).resolve().parents[2] / "config" / "models.yaml"


class RecordingSource:
    """A playbook that records the cap it was asked to fill."""

    def __init__(self) -> None:
        self.caps: list[int] = []

    async def block_for_session(
        self, tenant: str, task_class: str, session_id: str, query: str, cap_tokens: int
    ) -> InjectedBlock:
        self.caps.append(cap_tokens)
        text = "<playbook>\n[a-00001] read the test first\n</playbook>"
        return InjectedBlock(text, ["a-00001"], 12)

    def pinned_block(self, pin: bytes) -> InjectedBlock | None:
        return None


@pytest.mark.parametrize(
    "own",
    [None, {"cap_tokens": 200}, {"enabled": False}],
    ids=["no-section", "cap-only", "disabled"],
)
async def test_engine_injects_as_the_learner_learns(
    tmp_path: Path, own: dict[str, object] | None
) -> None:
    spec = {} if own is None else {"playbook": own}
    settings = Settings(
        config=tmp_path / "absent.yaml",
        models_file=MODELS,
        playbook={"defaults": {"enabled": True, "cap_tokens": 300}},
        task_classes={"sql": spec},
    )
    learner = class_playbook(settings, "sql")
    source = RecordingSource()
    engine = ContextEngine(
        settings, None, Metrics(), DropLog("/dev/null", "none", None), None, source,
        sessions=MemorySessionStore(),
    )
    body = {"messages": [{"role": "user", "content": "How many orders shipped late?"}]}
    call = CallContext("t1", "tr1", {"x-ctxgate-task-class": "sql"})
    fitted = await engine.fit(body, call)
    injected = bool(fitted.injected_bullet_ids)
    assert injected is learner.enabled
    assert source.caps == ([learner.cap_tokens] if learner.enabled else [])
