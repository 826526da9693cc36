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
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from absl import flags  # noqa: E402

_SERVER = flags.DEFINE_string("server", None, "A live Reverb server, HOST:PORT.")
_RUN_DIR = flags.DEFINE_string("run_dir", None, "A live program's run directory.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A Reverb checkpoint dir or root.")
_TABLE = flags.DEFINE_string("table", None, "Table name (default: the only table).")
_JSON = flags.DEFINE_bool("json", False, "Print JSON instead of text.")
_TIMEOUT = flags.DEFINE_integer("timeout", 10, "Seconds to wait for a live server.")
_K = flags.DEFINE_integer("k", 10, "priorities: how many top and bottom items.")
_BINS = flags.DEFINE_integer("bins", 20, "priorities: histogram bins.", lower_bound=1)
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


def _probe(address: str) -> None:
    """Fails at once, in one line, on a malformed address or one nobody listens on
    (gRPC would wait out the whole --timeout and then report only a timeout)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise _Usage(f"the Reverb address {address!r} is not HOST:PORT with a port in [1, 65535]")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_TIMEOUT.value).close()
    except OSError as err:
        hint = " (is the program running?)" if isinstance(err, ConnectionRefusedError) else ""
        raise _Usage(
            f"cannot reach the Reverb server {address}: {err.strerror or err}{hint}", code=1
        ) from None


def _client(address: str):
    import reverb

    _probe(address)
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
    address = _server() if not _run_checkpoint_only() else None
    if address is None and _RUN_DIR.value:
        return _run_checkpoint(command, _no_address())
    if address is None:
        raise _Usage("give --run_dir=DIR, --server=HOST:PORT or --checkpoint=DIR")
    try:
        client = _client(address)
    except _Usage as err:
        if _RUN_DIR.value and err.code == 1:  # a stopped (or isolated) run: its checkpoint
            return _run_checkpoint(command, str(err))
        raise
    t0 = time.time()
    path = snapshot(client)
    print(
        f"[tools.replay {command}] snapshot of {address} written in {time.time() - t0:.2f} s: {path}",
        file=sys.stderr,
    )
    return path


def _no_address() -> str:
    return f"{os.path.join(_RUN_DIR.value, 'replay_address')} does not exist (the program is not running)"


def _run_checkpoint_only() -> bool:
    return bool(_RUN_DIR.value) and not os.path.exists(
        os.path.join(_RUN_DIR.value, "replay_address")
    )


def _run_checkpoint(command: str, why: str) -> str:
    """The replay of the run's newest complete whole-run checkpoint (RUN_DIR/checkpoints)."""
    from apex.checkpointing import REPLAY_DIR, latest_complete

    latest = latest_complete(_RUN_DIR.value)
    if latest is None:
        raise _Usage(
            f"{why}; and {_RUN_DIR.value} has no complete checkpoint to read instead", code=1
        )
    print(
        f"[tools.replay {command}] the live server is not reachable ({why}); reading the "
        f"run's newest checkpoint {latest} (as of that checkpoint)",
        file=sys.stderr,
    )
    return os.path.join(latest, REPLAY_DIR)


def _table(path: str) -> str:
    from apex.replay.checkpoint_reader import read_tables

    names = sorted(read_tables(path))
    if not names:
        raise _Usage(f"the checkpoint {path} holds no tables")
    if _TABLE.value:
        if _TABLE.value not in names:
            raise _Usage(f"--table={_TABLE.value!r} is not in the checkpoint; tables: {names}")
        return _TABLE.value
    if len(names) != 1:
        raise _Usage(f"the checkpoint has tables {names}: choose one with --table")
    return names[0]


def _stats(command: str = "stats") -> tuple[list, bool]:
    """(the tables' stats, whether they are live). A --run_dir whose server is
    gone (a stopped run) falls back to the run's newest checkpoint, as the
    other verbs do."""
    from apex.replay.inspect import checkpoint_stats, table_stats

    def from_checkpoint(path: str) -> tuple[list, bool]:
        stats = checkpoint_stats(path)
        if not stats:
            raise _Usage(f"the checkpoint {path} holds no tables")
        return stats, False

    if _CHECKPOINT.value:
        return from_checkpoint(_checkpoint_path(command))
    if _run_checkpoint_only():
        return from_checkpoint(_run_checkpoint(command, _no_address()))
    address = _server()
    if address is None:
        raise _Usage("give --run_dir=DIR, --server=HOST:PORT or --checkpoint=DIR")
    try:
        client = _client(address)
    except _Usage as err:
        if _RUN_DIR.value and err.code == 1:  # a stopped run: its newest checkpoint
            return from_checkpoint(_run_checkpoint(command, str(err)))
        raise
    return table_stats(client, timeout=_TIMEOUT.value), True


def run(command: str) -> int:
    from apex.replay import inspect

    if command == "stats":
        stats, _ = _stats()
        print(json.dumps(stats, indent=2) if _JSON.value else inspect.format_stats(stats))
    elif command == "watch":
        if _CHECKPOINT.value:
            raise _Usage("watch needs a live source (--run_dir or --server)")
        i = 0
        while _COUNT.value == 0 or i < _COUNT.value:
            if i:
                time.sleep(_INTERVAL.value)
            stats, live = _stats("watch")
            stamp = time.strftime("%H:%M:%S")
            print(json.dumps({"time": stamp, "tables": stats}) if _JSON.value else f"--- {stamp}")
            if not _JSON.value:
                print(inspect.format_stats(stats, signature=False), flush=True)
            if not live:  # a stopped run's checkpoint does not change: once is enough
                print("[tools.replay watch] the run has stopped: nothing to watch", file=sys.stderr)
                break
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
            try:
                bands = tuple(float(x) for x in _BANDS.value)
            except ValueError:
                raise _Usage(
                    f"--bands={','.join(_BANDS.value)} is invalid: expected numbers, e.g. --bands=0.01,0.1"
                ) from None
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
    from apex.replay.checkpoint_reader import CheckpointError

    try:
        return run(argv[1])
    except _Usage as err:
        print(f"tools.replay: {err}", file=sys.stderr)
        return err.code
    except CheckpointError as err:  # corrupt or unreadable: one line, not a traceback
        print(f"tools.replay: cannot read the checkpoint: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # e.g. --out or --png in a folder that cannot be written
        where = f"{err.filename}: " if err.filename else ""
        print(f"tools.replay: {where}{err.strerror or err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from tools import run_tool

    run_tool(main)
