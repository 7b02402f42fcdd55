# Two commands set everything up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# What docsrv runs with (make serve), and that with what its tests and lint need (the rest).
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
# make serve [SNAPSHOT=dir] [HOST=address] [PORT=n]: unset, docsrv's own defaults (docsrv/config.py).
SNAPSHOT ?=
HOST ?=
PORT ?=

# The tests start hundreds of docsrv processes: each keeps the bytecode of what it imports (and
# pytest its rewritten test modules), however the machine sets PYTHONDONTWRITEBYTECODE, rather
# than compile docsrv again at every start.
TESTS_ENV := PYTHONDONTWRITEBYTECODE=

SPHINX_VENV := .venv-sphinx
SPHINX_STAMP := $(SPHINX_VENV)/.installed

.PHONY: serve test test-browser test-edge lint lock install clean bench bench-full

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Exact versions (with their hashes) from requirements.lock, then docsrv itself: every machine and
# every CI run installs the same packages. `make lock` writes the lock anew from pyproject.toml.
# requirements.lock holds what docsrv runs with (the Dockerfile installs it), requirements-test.lock
# that and what its tests and lint need.
$(RUN_STAMP): pyproject.toml requirements.lock | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP) requirements-test.lock
	$(BIN)/python -m pip install --quiet -r requirements-test.lock
	touch $(STAMP)

lock: | $(BIN)/python
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --generate-hashes --python-version 3.11 --no-header --upgrade -o requirements.lock
	$(BIN)/uv pip compile pyproject.toml --extra test --generate-hashes --python-version 3.11 --no-header --upgrade \
		--constraint requirements.lock -o requirements-test.lock

install: $(RUN_STAMP)

serve: $(RUN_STAMP)
	$(BIN)/docsrv serve $(if $(SNAPSHOT),--snapshot $(SNAPSHOT)) $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

# promtool (Debian's prometheus package) lints /metrics in one test: installed when missing and
# apt-get can (the test says it is skipped otherwise). Debian's postgresql is the source database
# that `docsrv snapshot follow`'s tests start (tests/source_db.py): installed when missing.
test: $(STAMP)
	command -v promtool >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus) \
		|| echo "promtool not installed: its test is skipped"
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql)
	$(TESTS_ENV) $(BIN)/python -m pytest

# The original's in-page search in a real browser: Debian's chromium (installed when missing),
# a Sphinx that bundles jQuery in a virtual environment of its own (tests/browser/requirements-sphinx.txt).
test-browser: $(STAMP) $(SPHINX_STAMP)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(TESTS_ENV) $(BIN)/python -m pytest -n 0 -m browser tests/browser

# A real edge cache: Debian's varnish and varnish-modules (installed when missing) in front of
# docsrv, purged with what `docsrv snapshot diff` prints (tests/edge).
test-edge: $(STAMP)
	dpkg -s varnish varnish-modules >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq varnish varnish-modules)
	$(TESTS_ENV) $(BIN)/python -m pytest -n 0 -m edge tests/edge

$(SPHINX_STAMP): tests/browser/requirements-sphinx.txt
	$(PYTHON) -m venv $(SPHINX_VENV)
	$(SPHINX_VENV)/bin/python -m pip install --quiet -r tests/browser/requirements-sphinx.txt
	touch $(SPHINX_STAMP)

# ruff (rules chosen in pyproject.toml) over the code, tests and benches; mypy over docsrv/.
lint: $(STAMP)
	$(BIN)/ruff check docsrv tests bench
	$(BIN)/mypy

# Quick (under 10 minutes): every system and endpoint class on the small snapshot.
bench: $(STAMP)
	$(BIN)/python bench/run.py --scale small --duration 3 --runs 3 --memory

# The full comparison on the medium snapshot, longer runs.
bench-full: $(STAMP)
	$(BIN)/python bench/run.py --scale medium --duration 10 --runs 3 --warmup 3 --memory

clean:
	rm -rf $(VENV) $(SPHINX_VENV) build *.egg-info
