r"""Replay inspector: `python -m tools.replay stats (--server=HOST:PORT | --run_dir=DIR) [--json]`.

Reads the server's table info only (no sampling): the learner sees exactly what
it would have seen, and the view is as fresh as the call. A running program
writes its replay address to RUN_DIR/replay_address.
Other subcommands of issue 4 (priorities, items, breakdown, watch, checkpoints)
are not built yet.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402
import sys  # noqa: E402

from absl import app, flags  # noqa: E402

_SERVER = flags.DEFINE_string("server", None, "Reverb server address, HOST:PORT.")
_RUN_DIR = flags.DEFINE_string(
    "run_dir", None, "Run directory of a live program (reads its replay_address)."
)
_JSON = flags.DEFINE_bool("json", False, "Print JSON instead of text.")
_TIMEOUT = flags.DEFINE_integer("timeout", 10, "Seconds to wait for the server.")

COMMANDS = ("stats",)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in COMMANDS:
        print(
            f"usage: python -m tools.replay {{{'|'.join(COMMANDS)}}} --server=HOST:PORT",
            file=sys.stderr,
        )
        return 2
    server = _SERVER.value
    if not server and _RUN_DIR.value:
        path = os.path.join(_RUN_DIR.value, "replay_address")
        if not os.path.exists(path):
            print(f"tools.replay: {path} does not exist (is the program running?)", file=sys.stderr)
            return 2
        with open(path) as f:
            server = f.read().strip()
    if not server:
        print("tools.replay: give --server=HOST:PORT or --run_dir=DIR", file=sys.stderr)
        return 2
    import reverb

    from apex.replay.inspect import format_stats, table_stats

    try:
        stats = table_stats(reverb.Client(server), timeout=_TIMEOUT.value)
    except Exception as err:  # noqa: BLE001 - one clear line instead of a gRPC traceback
        print(
            f"tools.replay: cannot read {_SERVER.value} within {_TIMEOUT.value} s: {err}",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(stats, indent=2) if _JSON.value else format_stats(stats))
    return 0


if __name__ == "__main__":
    app.run(main)
