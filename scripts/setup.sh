#!/usr/bin/env bash
# Creates .venv with CPython 3.10 and installs apex with the locked dependency
# set. Idempotent: does nothing when pyproject.toml's [build-system] and [project]
# tables and the lock are unchanged.
# Finds Python 3.10 by itself: $APEX_PYTHON, pyenv (3.10.13, then any 3.10),
# then python3.10 / python3 on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

is_py310() { "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 10) else 1)' >/dev/null 2>&1; }

find_python() {
  if [ -n "${APEX_PYTHON:-}" ] && is_py310 "$APEX_PYTHON"; then echo "$APEX_PYTHON"; return 0; fi
  local pyenv_bin="" prefix v
  if command -v pyenv >/dev/null 2>&1; then pyenv_bin=pyenv
  elif [ -x "${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv" ]; then pyenv_bin="${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv"; fi
  if [ -n "$pyenv_bin" ]; then
    if prefix=$("$pyenv_bin" prefix 3.10.13 2>/dev/null) && is_py310 "$prefix/bin/python"; then
      echo "$prefix/bin/python"; return 0
    fi
    for v in $("$pyenv_bin" versions --bare 2>/dev/null | grep -E '^3\.10(\.|$)' | sort -V -r); do
      if prefix=$("$pyenv_bin" prefix "$v" 2>/dev/null) && is_py310 "$prefix/bin/python"; then
        echo "$prefix/bin/python"; return 0
      fi
    done
  fi
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10*/bin/python python3.10 python3; do
    if command -v "$c" >/dev/null 2>&1 && is_py310 "$c"; then command -v "$c"; return 0; fi
  done
  return 1
}

# What the install depends on: pyproject.toml up to its [tool.*] tables (a lint
# or test setting does not rebuild the venv) and the lock.
stamp_of() { { sed '/^\[tool\./,$d' pyproject.toml; cat requirements-py310.lock.txt; } | sha256sum | cut -d' ' -f1; }

if [ -x .venv/bin/python ] && is_py310 .venv/bin/python && [ -f .venv/.apex-stamp ] \
   && [ "$(cat .venv/.apex-stamp)" = "$(stamp_of)" ]; then
  exit 0
fi

if ! PY=$(find_python); then
  echo "apex setup: CPython 3.10 not found (dm-launchpad 0.5 ships cp310 wheels only)." >&2
  echo "  Install it (e.g. 'pyenv install 3.10.13') or set APEX_PYTHON=/path/to/python3.10." >&2
  exit 1
fi
echo "apex setup: creating .venv with $PY ($("$PY" --version 2>&1))"
rm -rf .venv
"$PY" -m venv .venv
# pip's warnings on a successful install (setuptools' editable-install notice, a
# machine's pip config naming missing local indexes) are not the user's to act
# on: pip's output goes to .venv/pip-install.log and is shown only if it fails.
pip_quiet() {
  if ! .venv/bin/python -m pip "$@" >>.venv/pip-install.log 2>&1; then
    cat .venv/pip-install.log >&2
    echo "apex setup: pip failed (log: .venv/pip-install.log)" >&2
    exit 1
  fi
}
# Python 3.10's bundled pip (23.0) builds the dm-acme sdist with a deprecated path.
pip_quiet install --quiet --upgrade "pip>=24"
pip_quiet install --quiet -c requirements-py310.lock.txt -e '.[dev,atari,ray,box2d,minatar,wandb,mlflow]'
stamp_of > .venv/.apex-stamp
echo "apex setup: done in ${SECONDS} s ($(.venv/bin/python -m pip --version | cut -d' ' -f1-2)); the run's clock starts after this"
