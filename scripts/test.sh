#!/usr/bin/env bash
# Sets everything up (first run only), lints, and runs the whole test suite:
# unit, integration (multi-process Launchpad programs) and learning tests.
# Extra arguments go to pytest, e.g. -m "not learning".
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest -p no:cacheprovider --durations=25 "$@"
