# The two commands of the README: `make run` (the control plane on embedded defaults)
# and `make test` (the test suite). Both build .venv from the project's own files first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test lint venv bench bench-quick

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# The project itself, editable: the `agentrun` console script (the runner and the terminal
# client, runner/cli.py) runs this checkout's code.
$(VENV)/.runner-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

venv: $(VENV)/.runner-installed

# `up` starts the embedded PostgreSQL itself when DATABASE_URL is unset; the tests get it
# from the same wrapper (which just runs the command when DATABASE_URL is set).
run: venv
	$(PY) manage.py up

test: venv
	$(PY) -m agentrun.embedded_db exec -- $(PY) -m pytest

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# Benchmarks (bench/README.md): their own database `agentrun_bench` on the machine's
# PostgreSQL, loopback only, never part of `make test`. Peers and profilers are installed
# from requirements-bench.txt only here.
$(VENV)/.bench-installed: $(VENV)/.installed requirements-bench.txt
	$(PY) -m pip install --quiet -r requirements-bench.txt
	touch $@

bench: $(VENV)/.bench-installed
	$(PY) -m bench all --profile

bench-quick: $(VENV)/.bench-installed
	$(PY) -m bench all --quick
