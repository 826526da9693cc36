#!/usr/bin/env bash
# The unit subset: everything but programs (integration), learning runs,
# subprocesses of the entry point or a tool (cli) and in-process tests of
# several seconds (slow): nothing launches a program
# (under a minute on 2 cores). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Two workers (APEX_TEST_WORKERS), tests handed out one by one (no program here;
# a module fixture is made once per worker).
exec .venv/bin/python -m pytest -p no:cacheprovider -n "${APEX_TEST_WORKERS:-2}" --dist load \
  --no-loadscope-reorder -m "not integration and not learning and not cli and not ray and not slow" \
  --durations=10 "$@"
