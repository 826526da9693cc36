#!/usr/bin/env bash
# Sets everything up (first run only), lints, and runs the whole test suite:
# unit, integration (multi-process Launchpad programs) and learning tests.
# Extra arguments go to pytest, e.g. -m "not learning".
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Two workers (APEX_TEST_WORKERS; 0 runs in this process), one test file each
# at a time: a file's tests share its fixtures (e.g. a Ray cluster). Files go
# out longest first (tests/conftest.py orders them; xdist keeps that order).
exec .venv/bin/python -m pytest -p no:cacheprovider -n "${APEX_TEST_WORKERS:-2}" --dist loadfile \
  --no-loadscope-reorder --durations=25 "$@"
