"""Command-line tools: replay (inspect replay), status (a run's nodes), plot, experiment
(an experiment's report).

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
    at once, --help exits 0 after its text.

    Ctrl-C ends the process with os._exit once stdout and stderr are flushed:
    nothing of the tool is left to write, and the interpreter's finalization
    (TensorFlow's and gRPC's threads and atexit handlers, the Reverb clients'
    channels torn down) is not a place a user's Ctrl-C may wait on (once
    `tools.replay watch` did not exit within 60 s of a SIGINT under load)."""
    import signal

    from absl import app

    from launch.cli_flags import parse_absl_flags

    # Ctrl-C exits from the signal handler itself, not through a KeyboardInterrupt
    # raised into the tool's code: the suite saw `tools.replay watch` go on
    # refreshing for 60 s after a SIGINT, twice at 5be3cb0 and once at da1b2f0,
    # always with the other test worker busy; it was never reproduced alone or
    # under a CPU hog (9 runs). A KeyboardInterrupt can be swallowed by any
    # `except:`/`except BaseException` on its way up (a library's included), a
    # handler that ends the process cannot.
    signal.signal(signal.SIGINT, lambda signum, frame: _exit_now(130))

    def quiet(argv: list[str]) -> int:
        try:
            return main(argv)
        except KeyboardInterrupt:
            _exit_now(130)
            raise  # not reached

    app.run(quiet, flags_parser=parse_absl_flags)


def _exit_now(code: int) -> None:
    """Flushes what the tool wrote and ends the process with `code`, no finalization."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - the reader gone, the stream closed, or a flush re-entered from the handler
            pass
    try:
        os.write(2, b"\n")
    except OSError:
        pass
    os._exit(code)
