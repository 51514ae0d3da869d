"""Redis: the embedded server, the client, and every key name (see keys.py)."""

from redis.exceptions import ClusterDownError, SlotNotCoveredError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# Redis not answering (down, restarting, loading its data, a cluster failing over): what
# the gateway fails open on, and what the trace writer keeps traces through. A cluster
# failing a primary over answers CLUSTERDOWN or TRYAGAIN, or leaves a slot uncovered in the
# client's map (SlotNotCoveredError, not a RedisError): unavailable, not a bug.
STORE_DOWN = (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError,
              SlotNotCoveredError)


def as_text(value: object) -> str:
    """A Redis reply (bytes: the clients run with decode_responses off) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
