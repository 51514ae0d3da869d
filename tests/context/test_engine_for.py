"""`gateway.context.replay.engine_for`: the replay engine for a `with` block, its embedder's
worker thread shut down when the block ends, also when it ends by an exception."""

import pytest

from gateway.context.replay import engine_for
from gateway.settings import Settings


def _runs(engine) -> bool:  # type: ignore[no-untyped-def]
    try:
        engine.embedder._pool.submit(int).result()
    except RuntimeError:  # "cannot schedule new futures after shutdown"
        return False
    return True


def test_the_embedder_is_closed_when_the_block_ends() -> None:
    with engine_for(Settings()) as engine:
        assert engine.embedder is not None and _runs(engine)
    assert not _runs(engine)


def test_the_embedder_is_closed_when_the_block_raises() -> None:
    with pytest.raises(ValueError), engine_for(Settings()) as engine:
        assert _runs(engine)
        raise ValueError("a bench tool failing mid-corpus")
    assert not _runs(engine)


def test_without_an_embedder_there_is_nothing_to_close() -> None:
    with engine_for(Settings(), with_embedder=False) as engine:
        assert engine.embedder is None
