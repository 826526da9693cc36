"""A program node's process under the Ray launcher (launch.ray_host starts it):
what Launchpad's process_entry.py does, ended as launch.zygote ends a local_mp
node.

    python -m launch.node_process --data_file JOB.pkl

process_entry.py returns from its node function and lets the interpreter
finalize: module teardown then runs the C++ destructors of whatever the node
left to the garbage collector (Reverb servers and clients, Courier servers,
gRPC channels to other hosts, TensorFlow's runtime) in no defined order. On a
cluster that finalization sometimes never ended: the learner's process had
finished (final checkpoint written, every Python thread gone) and sat in it
until the launcher's SIGKILL 33 s later (`[learner/0] Timeout (0:00:26)!`,
`<no Python frame>`). A local_mp node never finalizes: launch.zygote
joins its non-daemon threads, runs its atexit functions and calls os._exit.
This does the same on Ray, so a node's exit is the same under both launchers.
"""

from __future__ import annotations

import argparse
import sys
import threading
import traceback


def argv_tail() -> list[str]:
    """What follows the Python executable in the node's command; the job file's
    path comes last."""
    return ["-m", "launch.node_process", "--data_file"]


def finish(code: int) -> None:
    """Ends the process as an exit would, without the interpreter's finalization:
    joins the non-daemon threads, runs the atexit functions, flushes, os._exit."""
    import atexit
    import os

    main = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # noqa: SLF001 - os._exit follows: run them as an exit would
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def main() -> None:
    parser = argparse.ArgumentParser(prog="launch.node_process")
    parser.add_argument("--data_file", required=True)
    args = parser.parse_args()
    # Deferred: absl and apex load after the argument check (nothing else runs here).
    from absl import app

    from apex import compat

    def run(_argv) -> None:
        code = 0
        try:
            compat.run_node_entry(args.data_file, 0)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:  # noqa: BLE001 - as an uncaught exception ends a process
            traceback.print_exc()
            code = 1
        finish(code)

    # absl's flags (Launchpad's, at their defaults, as process_entry.py leaves
    # them) and logging set up as app.run sets them up for process_entry.py.
    import launchpad  # noqa: F401 - defines Launchpad's flags before they are parsed

    app.run(run, argv=[sys.argv[0]])


if __name__ == "__main__":
    main()
