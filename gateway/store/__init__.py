"""Redis: the embedded server, the client, and every key name (see keys.py)."""
