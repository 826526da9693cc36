"""Command-line tools: replay (inspect replay), status (a run's nodes), plot.

`run_tool(main)` is every tool's entry: absl's app.run, with Ctrl-C ending the
tool with exit code 130 and no traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

# Python's own distutils for Reverb's import (as launch/train.py): 0.35 s less
# CPU than setuptools' replacement in every tool process.
os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")


def run_tool(main: Callable[[list[str]], int]) -> None:
    """absl.app.run(main); a KeyboardInterrupt exits 130 (128 + SIGINT) quietly,
    --help exits 0 after its text."""
    from absl import app

    from launch.cli_flags import parse_absl_flags

    def quiet(argv: list[str]) -> int:
        try:
            return main(argv)
        except KeyboardInterrupt:
            print("", file=sys.stderr)
            return 130

    app.run(quiet, flags_parser=parse_absl_flags)
