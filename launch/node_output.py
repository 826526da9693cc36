"""Runs one node command and passes its output on as whole, filtered lines.

Launchpad's local_mp (`--terminal=current_terminal`) starts every node through
this instead of its `decorate_output` (apex.compat.use_line_output; why:
apex.output). Usage, as the launcher builds it:

    python -m launch.node_output TITLE COLOUR -- COMMAND...

It ignores SIGINT/SIGTERM/SIGQUIT itself (as decorate_output does): Launchpad
signals the node, and this process passes on every line the node writes until
the node exits, then exits with the node's code. An actor's node that dies of
a signal nobody sent to stop it is started again (launch.node_restarts).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[3] != "--":
        print("usage: python -m launch.node_output TITLE COLOUR -- COMMAND...", file=sys.stderr)
        return 2
    title, colour, command = argv[1], int(argv[2]), argv[4:]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    from apex import compat, write_lines

    out = sys.stdout.fileno()
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # the node's prints reach us as they happen
    entry = compat.node_entry_args(command)
    restarts = None
    if entry is not None:  # an actor whose process dies is started again (launch.node_restarts)
        from launch.node_restarts import ProcessRestarts

        restarts = ProcessRestarts.for_node(title, entry[1], env)
    death = None  # the code of the death that made the slot give up
    while True:
        started = time.monotonic()
        pid, code = _run_once(command, env, title, colour, out)
        step = (
            None if restarts is None else restarts.after_exit(pid, code, time.monotonic() - started)
        )
        if step is None:  # after a give-up start, the wrapper ends as the death did
            return code if death is None else death
        if step.give_up:
            death = code
        write_lines(out, [f"[apex] {step.message}\n".encode()])
        if not restarts.wait(step.wait):
            return code
        env = dict(env, **step.env)


def _run_once(command: list[str], env: dict, title: str, colour: int, out: int) -> tuple[int, int]:
    """Runs the node once, passing its output on; (its pid, its exit code)."""
    from apex import LineFilter, verbose, write_lines

    lines = LineFilter(f"[{title}] ", colour, tty=os.isatty(out), keep_all=verbose())
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        # The node must react to Launchpad's signals: restore the defaults we ignore.
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (2, 15, 3)],
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    reader = True  # whoever reads the launcher's output is there
    while True:  # drain the node to its end even with no reader: it must never block
        data = os.read(fd, 65536)
        if not data:
            break
        batch = lines.feed(data)
        reader = reader and write_lines(out, batch)
    if reader:
        write_lines(out, lines.flush())
    proc.stdout.close()
    return proc.pid, proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
