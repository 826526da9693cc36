#!/usr/bin/env bash
# Creates .venv-sb3 (at the repository root, beside .venv): the peer of bench/solve_vs_sb3.py, Stable-Baselines3
# DQN, in a virtual environment of its own (it is not a dependency of apex).
# Idempotent: does nothing but print the versions when they are already installed.
#
# Python 3.10: $(pyenv prefix 3.10.13)/bin/python where pyenv exists, else python3.10,
# else python3.
#
# torch: PyPI has no CPU-only Linux wheel; its torch pulls the CUDA libraries (about
# 4 GB installed) and runs on CPU all the same. PyTorch's own CPU index cannot be
# reached from this project's machines (only the package registries can); where it
# can, SB3_TORCH_INDEX_URL=<that index> installs the +cpu build of the same version.
set -euo pipefail
cd "$(dirname "$0")"

SB3_VERSION=2.9.2
GYMNASIUM_VERSION=1.4.0
TORCH_VERSION=2.14.1 # the newest torch with a CPython 3.10 wheel
NUMPY_VERSION=2.2.6
CLOUDPICKLE_VERSION=3.1.3
MINATAR_VERSION=1.0.15  # bench/vs_sb3.py minatar
BOX2D_VERSION=2.3.10    # bench/vs_sb3.py classic (LunarLander), with pygame
PYGAME_VERSION=2.6.1
VENV=../../.venv-sb3

is_py310() { "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 10) else 1)' >/dev/null 2>&1; }

find_python() {
  local pyenv_bin="" prefix c
  if command -v pyenv >/dev/null 2>&1; then pyenv_bin=pyenv
  elif [ -x "${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv" ]; then pyenv_bin="${PYENV_ROOT:-$HOME/.pyenv}/bin/pyenv"; fi
  if [ -n "$pyenv_bin" ] && prefix=$("$pyenv_bin" prefix 3.10.13 2>/dev/null) && is_py310 "$prefix/bin/python"; then
    echo "$prefix/bin/python"; return 0
  fi
  for c in python3.10 python3; do
    if command -v "$c" >/dev/null 2>&1 && is_py310 "$c"; then command -v "$c"; return 0; fi
  done
  return 1
}

# Prints the installed versions; exits non-zero when one differs from the pins.
check_versions() {
  "$VENV/bin/python" - "$SB3_VERSION" "$GYMNASIUM_VERSION" "$TORCH_VERSION" "$NUMPY_VERSION" \
    "$CLOUDPICKLE_VERSION" "$MINATAR_VERSION" "$BOX2D_VERSION" "$PYGAME_VERSION" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

names = ["stable-baselines3", "gymnasium", "torch", "numpy", "cloudpickle", "minatar", "box2d", "pygame"]
ok = True
for name, want in zip(names, sys.argv[1:]):
    try:
        have = version(name)
    except PackageNotFoundError:
        have = None
    # a +cpu build of the pinned torch counts as the pinned version
    ok &= have is not None and have.split("+")[0] == want
    print(f"  {name}=={have}")
print(f"  python {sys.version.split()[0]}")
sys.exit(0 if ok else 1)
EOF
}

# pip's global config here names local indices that may not exist: drop those warnings.
quiet_pip() {
  "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

if [ -x "$VENV/bin/python" ] && is_py310 "$VENV/bin/python" && check_versions >/dev/null 2>&1; then
  echo "sb3 peer venv .venv-sb3 is up to date:"
  check_versions
  exit 0
fi

PY=$(find_python) || { echo "setup_sb3.sh: no Python 3.10 found" >&2; exit 1; }
echo "creating .venv-sb3 with $PY"
if ! { [ -x "$VENV/bin/python" ] && is_py310 "$VENV/bin/python"; }; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
fi
if [ -n "${SB3_TORCH_INDEX_URL:-}" ]; then
  quiet_pip install --quiet --index-url "$SB3_TORCH_INDEX_URL" "torch==$TORCH_VERSION"
fi
quiet_pip install --quiet \
  "stable-baselines3==$SB3_VERSION" \
  "gymnasium==$GYMNASIUM_VERSION" \
  "torch==$TORCH_VERSION" \
  "numpy==$NUMPY_VERSION" \
  "cloudpickle==$CLOUDPICKLE_VERSION" \
  "minatar==$MINATAR_VERSION" \
  "box2d==$BOX2D_VERSION" \
  "pygame==$PYGAME_VERSION"
echo "sb3 peer venv .venv-sb3:"
check_versions
