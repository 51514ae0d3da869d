"""Benchmarks: gateway overhead against LiteLLM (`bench.overhead`), context replay, playbook."""
