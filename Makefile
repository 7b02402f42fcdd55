# Two commands set everything up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# make serve [SNAPSHOT=dir] [HOST=address] [PORT=n]: unset, docsrv's own defaults (docsrv/config.py).
SNAPSHOT ?=
HOST ?=
PORT ?=

.PHONY: serve test lint install clean bench bench-full

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/docsrv serve $(if $(SNAPSHOT),--snapshot $(SNAPSHOT)) $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

test: $(STAMP)
	$(BIN)/python -m pytest

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
	rm -rf $(VENV) build *.egg-info
