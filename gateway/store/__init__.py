"""Redis: the embedded server, the client, and every key name (see keys.py)."""


def as_text(value: object) -> str:
    """A Redis reply (bytes: the clients run with decode_responses off) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
