#!/usr/bin/env bash
# The long schema-fuzzing run: the same checks as tests/test_fuzz.py with many more cases.
# Usage: bench/fuzz.sh [EXAMPLES]   (default 2000 per operation)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
DOCSRV_FUZZ_EXAMPLES=${1:-2000} "$PYTHON" -m pytest -q -s tests/test_fuzz.py
