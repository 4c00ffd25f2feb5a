# Two Primitives: `make lab` to learn, `make test` to check everything. Both build .venv once, from the pins in
# pyproject.toml, and reuse it afterwards (the stamp below is only rewritten when pyproject.toml changes).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
STAMP  := $(VENV)/.installed
LAB_ARGS ?=
# make test runs the suite in this many processes (pytest-xdist), a test file each at a time: most tests wait on
# kernels and servers, so two keep two cores busy
TEST_PROCESSES ?= 2
HUB_ARGS ?=
# The classroom's proxy (npm's configurable-http-proxy, pinned in package-lock.json); make lab never needs it
NODE_STAMP := node_modules/.installed
# nbgrader shells out to `alembic`: every course command runs with the environment's bin/ first on PATH.
export PATH := $(BIN):$(PATH)
# what was asked for (`make lab`, `make test`), named in setup's advice; `deps` passes it on to the make it starts
GOALS ?= $(MAKECMDGOALS)

.PHONY: help lab hub test test-fast lint setup deps environments exercises bench-lessons docs

help:
	@echo "make lab            set up .venv if needed and open JupyterLab on the course"
	@echo "make test           set up .venv if needed and run the whole test suite"
	@echo "make test-fast      the suite without the classroom hub, the grading cluster and the browser tests"
	@echo "make lint           ruff (lint, import order, format) and pyright on the code, as make test checks them"
	@echo "make hub            (instructors, as root) the classroom on JupyterHub: HUB_ARGS=\"--students alice,bob\""
	@echo "make exercises      (instructors) regenerate exercises/ from solutions/ with nbgrader"
	@echo "make bench-lessons  time every lesson notebook against the 60 s budget"
	@echo "make docs           the course's site into docs/_build/html: every lesson with its outputs, the guides"

setup: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { \
	  echo "error: $(PYTHON) was not found. Install Python 3.11 (python.org, 'brew install python@3.11'," \
	       "'apt install python3.11-venv' or pyenv), or point to it: make PYTHON=/path/to/python3.11 $(GOALS)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || { \
	  echo "error: $(PYTHON) is Python $$($(PYTHON) -c 'import platform; print(platform.python_version())'), the course needs 3.11." \
	       "Run: make PYTHON=/path/to/python3.11 $(GOALS)"; exit 1; }
	@# as root, from a Python every account can run (students' servers run .venv): twoprim/classroom/setup_python.py
	@test -x $(VENV)/bin/python || { \
	  py="$$($(PYTHON) twoprim/classroom/setup_python.py $(PYTHON) $(if $(filter file default,$(origin PYTHON)),,--explicit))" \
	  && $$py -m venv $(VENV); }
	@$(CURDIR)/course --check-venv   # a .venv copied or moved here from another folder: pointed here first
	$(VENV)/bin/python -m pip install --quiet --upgrade "pip>=24"
	$(VENV)/bin/python -m pip install --quiet --no-compile -e ".[test,docs,dev]"
	@# the bytecode pip would write one file at a time, on every core (62 s of install became 48 s on 2 cores): kernels
	@# that cannot write into .venv (students' on the hub) import torch from it. A file that does not compile is
	@# skipped, as pip skips it (third-party test data written for Python 2)
	$(VENV)/bin/python -c 'import compileall, sysconfig; compileall.compile_dir(sysconfig.get_path("purelib"), quiet=2, workers=0)'
	$(VENV)/bin/python -m twoprim.course install-config
	@touch $(STAMP)

# ./course lab: --allow-root when root, the next free port when 8888 is taken, the lesson URL printed last; like
# every ./course command, it first points a .venv copied or moved here from another folder at this one.
lab: $(STAMP)
	@$(CURDIR)/course lab $(LAB_ARGS)

# ./course hub: an account per student, the exchange, the instructor's formgrader, on loopback; Ctrl-C stops it all.
hub: deps
	@$(CURDIR)/course hub $(HUB_ARGS)

# Both environments, built side by side when either is missing or out of date: pip's install keeps about one core
# busy, and npm ci's 6 s of a fresh checkout's setup then cost no time of their own
deps:
	@$(MAKE) --no-print-directory --jobs=2 GOALS="$(GOALS)" environments

environments: $(STAMP) $(NODE_STAMP)
	@:

$(NODE_STAMP): package-lock.json
	@command -v npm >/dev/null || { \
	  echo "error: npm was not found: the classroom's proxy (configurable-http-proxy) installs with it." \
	       "Install Node.js and npm: apt-get install nodejs npm (Debian, Ubuntu) or dnf install nodejs npm"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

test: deps
	@$(CURDIR)/course --check-venv   # copied or moved since .venv was built: point .venv here
	$(BIN)/python -m pytest --numprocesses=$(TEST_PROCESSES) --dist=loadfile --no-loadscope-reorder

# For development: every test but those marked `servers` (JupyterHub, the Dask cluster and PostgreSQL, Chromium)
test-fast: deps
	@$(CURDIR)/course --check-venv
	$(BIN)/python -m pytest --numprocesses=$(TEST_PROCESSES) --dist=loadfile --no-loadscope-reorder -m "not servers"

# The code's checks (tests/test_tooling.py runs the same three in make test; `pre-commit install` runs them at each
# commit): ruff's lint and import order, ruff's formatting, pyright's types; configured in pyproject.toml (pyright
# told so with -p: without it a pyrightconfig.json in any folder above the checkout takes its place)
lint: deps
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	node_modules/.bin/pyright -p .

exercises: $(STAMP)
	$(CURDIR)/course generate

bench-lessons: $(STAMP)
	$(CURDIR)/course bench-lessons

# The site: the lessons rendered from their executed copies (.artifacts/executed/, which `make test` writes; a lesson
# without a current copy is executed first), the guides, the benchmarks and the API reference; sphinx -W -n
docs: deps
	@$(CURDIR)/course --check-venv
	$(BIN)/python docs/build.py --out docs/_build
