# Two commands: `make run` and `make test`. Each sets up what it needs first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# CPU build of PyTorch, pinned: an unpinned torch (also as sentence-transformers'
# requirement) would pull a CUDA build of several GB.
TORCH  := torch==2.13.0

.PHONY: run test lint typecheck bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.torch: | $(PY)
	$(PIP) install -q $(TORCH)
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(PIP) install -q -e '.[test]'
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/ctxgate serve

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check gateway tests bench
	$(VENV)/bin/mypy

test: $(VENV)/.installed-test lint
	$(VENV)/bin/pytest -q

bench: $(VENV)/.installed-test
	$(PY) -m bench.overhead
	$(PY) -m bench.replay
	$(PY) -m bench.playbook

clean:
	rm -rf $(VENV) .ctxgate .pytest_cache .mypy_cache .ruff_cache
