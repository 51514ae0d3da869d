"""Metrics, traces and logs: the gateway's observability, defined in one place each."""
