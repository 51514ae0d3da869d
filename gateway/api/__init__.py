"""The HTTP surface: chat completions, the verbatim /v1 proxy, health, feedback, admin."""
