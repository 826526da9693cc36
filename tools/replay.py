r"""Replay inspector: `python -m tools.replay COMMAND SOURCE [options]`.

COMMAND
  stats        every table: size/capacity, inserts, samples, deletes, achieved vs
               target samples per insert, rate limiter (can insert / can sample,
               diff within [min_diff, max_diff]), signature
  priorities   priority histogram (text, and a PNG with --png=FILE), top-k and
               bottom-k items with key, priority, times sampled and age
  items        decode --n items (--order=newest|oldest|top|bottom|random) to JSON
               (stdout or --out=FILE.json) or npz (--out=FILE.npz): key, priority,
               times sampled, age, payload with provenance (actor, slot, epsilon,
               parameter version, insert time)
  breakdown    count, share, mean priority, priority share, mean age and times
               sampled by actor, by epsilon band and by parameter version
  watch        stats every --interval seconds (--count=N refreshes, 0: forever)

SOURCE (one of)
  --run_dir=DIR       a live program (reads DIR/replay_address)
  --server=HOST:PORT  a live Reverb server
  --checkpoint=DIR    a Reverb checkpoint directory, or a checkpointer root
                      (its newest complete checkpoint); no server needed

How fresh, and what it costs the program: `stats` and `watch` read the live
server's table info only: no sampling, nothing the learner sees moves, as fresh
as the call. `priorities`, `items` and `breakdown` on a live source ask the
server to write a checkpoint at that moment and read that file: no sampling
either (times-sampled counts and the rate limiter do not move), but the table
is locked while the checkpoint is written (actors and learner pause: 0.2 s for
20k items, ~22 s for 1M on a 2-core machine), and Reverb's checkpointer keeps
only its newest checkpoint. Reading 1M items then takes 10-35 s here.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from absl import app, flags  # noqa: E402

_SERVER = flags.DEFINE_string("server", None, "A live Reverb server, HOST:PORT.")
_RUN_DIR = flags.DEFINE_string("run_dir", None, "A live program's run directory.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A Reverb checkpoint dir or root.")
_TABLE = flags.DEFINE_string("table", None, "Table name (default: the only table).")
_JSON = flags.DEFINE_bool("json", False, "Print JSON instead of text.")
_TIMEOUT = flags.DEFINE_integer("timeout", 10, "Seconds to wait for a live server.")
_K = flags.DEFINE_integer("k", 10, "priorities: how many top and bottom items.")
_BINS = flags.DEFINE_integer("bins", 20, "priorities: histogram bins.")
_PNG = flags.DEFINE_string("png", None, "priorities: also write the histogram to this PNG.")
_N = flags.DEFINE_integer("n", 10, "items: how many items.")
_ORDER = flags.DEFINE_enum(
    "order", "newest", ["newest", "oldest", "top", "bottom", "random"], "items: which items."
)
_OUT = flags.DEFINE_string("out", None, "items: write FILE.json or FILE.npz instead of stdout.")
_BANDS = flags.DEFINE_list("bands", ["0.01", "0.1"], "breakdown: epsilon band edges.")
_VERSION_BINS = flags.DEFINE_integer("version_bins", 5, "breakdown: parameter-version ranges.")
_INTERVAL = flags.DEFINE_float("interval", 1.0, "watch: seconds between refreshes.")
_COUNT = flags.DEFINE_integer("count", 0, "watch: refreshes (0: until Ctrl-C).")

COMMANDS = ("stats", "priorities", "items", "breakdown", "watch")


class _Usage(Exception):
    """A clear one-line error; exit code 2 (bad arguments) or 1 (source unreachable)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def _server() -> str | None:
    if _SERVER.value:
        return _SERVER.value
    if _RUN_DIR.value:
        path = os.path.join(_RUN_DIR.value, "replay_address")
        if not os.path.exists(path):
            raise _Usage(f"{path} does not exist (is the program running?)")
        with open(path) as f:
            return f.read().strip()
    return None


def _client(address: str):
    import reverb

    client = reverb.Client(address)
    try:
        client.server_info(timeout=_TIMEOUT.value)
    except Exception as err:  # noqa: BLE001 - one clear line instead of a gRPC traceback
        raise _Usage(
            f"cannot reach the Reverb server {address} within {_TIMEOUT.value} s: {err}", code=1
        ) from None
    return client


def _checkpoint_path(command: str) -> str:
    from apex.replay.checkpoint_reader import CheckpointError
    from apex.replay.inspect import resolve_checkpoint, snapshot

    if _CHECKPOINT.value:
        try:
            return resolve_checkpoint(_CHECKPOINT.value)
        except CheckpointError as err:
            raise _Usage(str(err)) from None
    address = _server()
    if address is None:
        raise _Usage("give --run_dir=DIR, --server=HOST:PORT or --checkpoint=DIR")
    t0 = time.time()
    path = snapshot(_client(address))
    print(
        f"[tools.replay {command}] snapshot of {address} written in {time.time() - t0:.2f} s: {path}",
        file=sys.stderr,
    )
    return path


def _table(path: str) -> str:
    from apex.replay.checkpoint_reader import read_tables

    names = sorted(read_tables(path))
    if _TABLE.value:
        if _TABLE.value not in names:
            raise _Usage(f"--table={_TABLE.value!r} is not in the checkpoint; tables: {names}")
        return _TABLE.value
    if len(names) != 1:
        raise _Usage(f"the checkpoint has tables {names}: choose one with --table")
    return names[0]


def _stats() -> list:
    from apex.replay.inspect import checkpoint_stats, table_stats

    if _CHECKPOINT.value:
        return checkpoint_stats(_checkpoint_path("stats"))
    address = _server()
    if address is None:
        raise _Usage("give --run_dir=DIR, --server=HOST:PORT or --checkpoint=DIR")
    return table_stats(_client(address), timeout=_TIMEOUT.value)


def run(command: str) -> int:
    from apex.replay import inspect

    if command == "stats":
        stats = _stats()
        print(json.dumps(stats, indent=2) if _JSON.value else inspect.format_stats(stats))
    elif command == "watch":
        if _CHECKPOINT.value:
            raise _Usage("watch needs a live source (--run_dir or --server)")
        i = 0
        while _COUNT.value == 0 or i < _COUNT.value:
            if i:
                time.sleep(_INTERVAL.value)
            stats = _stats()
            stamp = time.strftime("%H:%M:%S")
            print(json.dumps({"time": stamp, "tables": stats}) if _JSON.value else f"--- {stamp}")
            if not _JSON.value:
                print(inspect.format_stats(stats, signature=False), flush=True)
            i += 1
    else:
        path = _checkpoint_path(command)
        table = _table(path)
        if command == "priorities":
            summary = inspect.priority_summary(
                inspect.item_table(path, table, provenance=False), _K.value, _BINS.value
            )
            summary["table"], summary["checkpoint"] = table, path
            if _PNG.value:
                summary["png"] = inspect.save_histogram_png(summary, _PNG.value, table)
            if _JSON.value:
                print(json.dumps(summary, indent=2))
            else:
                print(f"table {table} ({path})\n" + inspect.format_priorities(summary))
                if _PNG.value:
                    print(f"histogram: {summary['png']}")
        elif command == "items":
            items = inspect.select_items(path, table, _N.value, _ORDER.value)
            out = _OUT.value
            if out and out.endswith(".npz"):
                print(inspect.save_items_npz(items, out))
            else:
                text = json.dumps(inspect.items_to_json(items), indent=1)
                if out:
                    with open(out, "w") as f:
                        f.write(text + "\n")
                    print(out)
                else:
                    print(text)
        elif command == "breakdown":
            bands = tuple(float(x) for x in _BANDS.value)
            b = inspect.breakdown(inspect.item_table(path, table), bands, _VERSION_BINS.value)
            print(
                json.dumps(b, indent=2)
                if _JSON.value
                else f"table {table} ({path})\n" + inspect.format_breakdown(b)
            )
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in COMMANDS:
        print(
            f"usage: python -m tools.replay {{{'|'.join(COMMANDS)}}} "
            "(--run_dir=DIR | --server=HOST:PORT | --checkpoint=DIR) [--help]",
            file=sys.stderr,
        )
        return 2
    try:
        return run(argv[1])
    except _Usage as err:
        print(f"tools.replay: {err}", file=sys.stderr)
        return err.code


if __name__ == "__main__":
    app.run(main)
