"""The context engine fixtures (real Redis, real embedder) for the wire-format tests."""

from tests.context.conftest import drop_log_path, embedder, engine, redis_client, settings

__all__ = ["drop_log_path", "embedder", "engine", "redis_client", "settings"]
