"""The context engine fixtures (real Redis; the real embedder is tests/conftest.py's) for the
wire-format tests."""

from tests.context.conftest import drop_log_path, engine, redis_client, settings

__all__ = ["drop_log_path", "engine", "redis_client", "settings"]
