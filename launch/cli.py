"""`apex`: one command for apex's entry points (pyproject.toml [project.scripts]).

    apex train --config=configs/apex_cartpole.py     # python -m launch.train ...
    apex experiment --grid=...                       # python -m launch.experiment ...
    apex status RUN_DIR                              # python -m tools.status ...
    apex plot RUN_DIR                                # python -m tools.plot ...
    apex replay stats --run_dir=RUN_DIR              # python -m tools.replay ...
    apex policy export RUN_DIR                       # python -m tools.policy ...

Each subcommand takes the flags of its module, unchanged, and runs it as
`python -m MODULE` would (the same process: the interpreter is executed again
with it), so exit codes, output and a program's restarts are the module's own.
Importing this module imports nothing of apex: `apex --help` is instant.
"""

from __future__ import annotations

import os
import sys

COMMANDS = {
    "train": ("launch.train", "train a program: local multi-process, or across a Ray cluster"),
    "experiment": ("launch.experiment", "run a grid of configs and seeds; report with intervals"),
    "status": ("tools.status", "a run's nodes, replay and stalls (the hang doctor)"),
    "plot": ("tools.plot", "a run's learning curves as a PNG"),
    "replay": ("tools.replay", "look into replay: stats, items, priorities, watch"),
    "policy": ("tools.policy", "export a trained policy; run or evaluate one"),
}


def usage() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = ["usage: apex COMMAND [FLAGS...]   (apex COMMAND --help: its flags)", "", "commands:"]
    lines += [f"  {c:<{width}}  {what}" for c, (_, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args:
        print(usage(), file=sys.stderr)
        return 2
    if args[0] in ("-h", "--help", "help"):
        if args[0] == "help" and len(args) > 1:
            args = [args[1], "--help"]
        else:
            print(usage())
            return 0
    command = args[0]
    if command not in COMMANDS:
        print(
            f"apex: unknown command {command!r}; one of: {', '.join(COMMANDS)} (apex --help)",
            file=sys.stderr,
        )
        return 2
    module = COMMANDS[command][0]
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", module, *args[1:]])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
