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
               parameter version, insert time); with --png=FILE also the
               items' image frames (a row per item: obs, then next_obs)
  breakdown    count, share, mean priority, priority share, mean age and times
               sampled by actor, by epsilon band and by parameter version
  watch        stats every --interval seconds (--count=N refreshes, 0: forever)

SOURCE (one of)
  --run_dir=DIR       a live program (reads DIR/replay_addresses when the replay
                      is sharded, else DIR/replay_address)
  --server=HOST:PORT[,HOST:PORT...]
                      a live Reverb server; several: the shards, in shard order
  --checkpoint=DIR    a Reverb checkpoint directory, or a checkpointer root
                      (its newest complete checkpoint), or a directory holding
                      one per shard (replay_0/, replay_1/, ...: a run checkpoint
                      of a sharded replay); no server needed

SHARDS (replay.num_shards = S > 1, apex.replay.shards): every command covers
every shard, per shard and in total: `stats` each shard's table and rate
limiter then a total line; `priorities` the pooled histogram with each shard's
counts per bin (the PNG stacks the shards); `items` names each item's shard;
`breakdown` states the rule (actor i writes to shard i % S) and groups by shard
and by actor (with the shard each actor's items are in) besides the usual;
`watch` one line per refresh: totals and every shard's size. --shard=N reads
shard N only. With one shard the output is what it always was.

How fresh, and what it costs the program: `stats` and `watch` read the live
server's table info only: no sampling, nothing the learner sees moves, as fresh
as the call. `priorities`, `items` and `breakdown` on a live source ask the
server to write a checkpoint at that moment and read that file: no sampling
either (times-sampled counts and the rate limiter do not move), but the table
is locked while the checkpoint is written (actors and learner pause: 0.2 s for
20k items, ~22 s for 1M on a 2-core machine), and Reverb's checkpointer keeps
only its newest checkpoint. Reading 1M items then takes 10-35 s here.

What it imports: every COMMAND imports Reverb and so TensorFlow (1.5-2 s): a
live server is read through reverb.Client; a checkpoint is parsed with Reverb's
protocol-buffer modules (reverb.cc.checkpointing.checkpoint_pb2, whose package
imports TensorFlow) and its signature decoded by TensorFlow. A --run_dir whose
server is gone is found out by a plain TCP connect first (no gRPC wait), then
its newest checkpoint is read. --help imports neither.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import json  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from absl import flags  # noqa: E402

from apex import CheckpointError, checkpointing  # noqa: E402
from apex.replay import ADDRESSES_FILE, shard_name, shard_rule  # noqa: E402
from tools import replay_inspect as inspect  # noqa: E402
from tools.replay_inspect.checkpoint_reader import read_tables  # noqa: E402

_SERVER = flags.DEFINE_string(
    "server",
    None,
    "A live Reverb server, HOST:PORT; several (the shards, in order): comma-separated.",
)
_RUN_DIR = flags.DEFINE_string("run_dir", None, "A live program's run directory.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A Reverb checkpoint dir or root.")
_TABLE = flags.DEFINE_string("table", None, "Table name (default: the only table).")
_SHARD = flags.DEFINE_integer(
    "shard", None, "Only this replay shard (0..S-1) of a sharded replay.", lower_bound=0
)
_JSON = flags.DEFINE_bool("json", False, "Print JSON instead of text.")
_TIMEOUT = flags.DEFINE_integer("timeout", 10, "Seconds to wait for a live server.")
_K = flags.DEFINE_integer("k", 10, "priorities: how many top and bottom items.")
_BINS = flags.DEFINE_integer("bins", 20, "priorities: histogram bins.", lower_bound=1)
_PNG = flags.DEFINE_string(
    "png",
    None,
    "priorities: also write the histogram to this PNG; items: also write the items' "
    "frames to this PNG (a row per item: obs then next_obs).",
)
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


def _live_shards() -> list[tuple[str, str]] | None:
    """[(shard name, HOST:PORT)] of the live source in shard order (one entry:
    one server, as always), or None when no live source is given."""
    if _SERVER.value:
        addresses = [a.strip() for a in _SERVER.value.split(",") if a.strip()]
        if not addresses:
            raise _Usage(f"--server={_SERVER.value!r} names no HOST:PORT")
        return [(shard_name(i, len(addresses)), a) for i, a in enumerate(addresses)]
    if _RUN_DIR.value:
        try:
            shards = inspect.read_shard_addresses(_RUN_DIR.value)
        except ValueError as err:
            raise _Usage(str(err)) from None
        if shards:
            return shards
        path = os.path.join(_RUN_DIR.value, "replay_address")
        if not os.path.exists(path):
            raise _Usage(f"{path} does not exist (is the program running?)")
        with open(path) as f:
            return [("replay", f.read().strip())]
    return None


def _select(shards: list, what: str, num_shards: int | None = None) -> tuple[list, int]:
    """(the shards --shard keeps, how many the source has: `num_shards`, or
    len(shards)). --shard=N is the shard named replay_N (the only one when the
    replay is not sharded)."""
    total = len(shards) if num_shards is None else num_shards
    if _SHARD.value is None:
        return shards, total
    names = [name for name, _ in shards]
    wanted = "replay" if names == ["replay"] and _SHARD.value == 0 else f"replay_{_SHARD.value}"
    if wanted not in names:
        raise _Usage(
            f"--shard={_SHARD.value} is not a shard of {what}: it has "
            + (f"{', '.join(names)} of {total} shards" if total > 1 else "one shard (0)")
        )
    return [shards[names.index(wanted)]], total


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


# The live servers' clients by address: `watch` asks the same ones every refresh
# (one gRPC channel each, not one per refresh).
_CLIENTS: dict = {}


def _client(address: str):
    """A reverb.Client of the live server at `address` (the one made before, if any).

    Reverb's client (and with it TensorFlow) is imported only here, after the
    address answered a plain TCP connect: a stopped run's address (its
    RUN_DIR/replay_address stays) is refused before any heavy import."""
    client = _CLIENTS.get(address)
    if client is not None:
        return client
    _probe(address)
    import reverb  # TensorFlow: only for a live server

    client = reverb.Client(address)
    try:
        client.server_info(timeout=_TIMEOUT.value)
    except Exception as err:  # noqa: BLE001 - one clear line instead of a gRPC traceback
        raise _Usage(
            f"cannot reach the Reverb server {address} within {_TIMEOUT.value} s: {err}", code=1
        ) from None
    _CLIENTS[address] = client
    return client


def _resolve(path: str) -> tuple[list[tuple[str, str]], int]:
    """The shards of a checkpoint directory ([(name, Reverb checkpoint dir)]) and
    how many the replay had (its manifest's replay.num_shards, when it says).
    A run checkpoint's files (or the one a Reverb checkpoint lies in) are
    verified against their checksums first."""
    run_checkpoint = (
        path
        if os.path.isfile(os.path.join(path, checkpointing.CHECKSUMS_FILE))
        else checkpointing.enclosing_checkpoint(path)
    )
    if run_checkpoint is not None:
        checkpointing.verify_files(run_checkpoint)  # CorruptCheckpointError: exit 2
    try:
        shards = inspect.resolve_shards(path)
    except CheckpointError as err:
        raise _Usage(str(err)) from None
    total = len(shards)
    if shards[0][0] != "replay":  # replay_<s> directories: a sharded replay
        total = max(total, 1 + max(int(name.rpartition("_")[2]) for name, _ in shards))
    expected = inspect.manifest_num_shards(path)
    if expected is not None and expected > 1 and expected != len(shards):
        print(
            f"[tools.replay] {path}: its manifest says replay.num_shards={expected} but it "
            f"holds {len(shards)} shard director{'y' if len(shards) == 1 else 'ies'} "
            f"({', '.join(n for n, _ in shards)}): reading those",
            file=sys.stderr,
        )
        total = max(total, expected)
    return shards, total


def _checkpoint_shards(command: str) -> tuple[list[tuple[str, str]], int]:
    """(the [(shard name, Reverb checkpoint dir)] to read, the source's shard count):
    --checkpoint's, or fresh snapshots of the live servers."""
    if _CHECKPOINT.value:
        shards, total = _resolve(_CHECKPOINT.value)
        return _select(shards, _CHECKPOINT.value, total)
    live = _live_shards() if not _run_checkpoint_only() else None
    if live is None and _RUN_DIR.value:
        return _run_checkpoint(command, _no_address())
    if live is None:
        raise _Usage("give --run_dir=DIR, --server=HOST:PORT or --checkpoint=DIR")
    live, total = _select(live, "the replay")
    try:
        clients = [(name, address, _client(address)) for name, address in live]
    except _Usage as err:
        if _RUN_DIR.value and err.code == 1:  # a stopped (or isolated) run: its checkpoint
            return _run_checkpoint(command, str(err))
        raise
    out = []
    for name, address, client in clients:
        t0 = time.time()
        path = inspect.snapshot(client)
        print(
            f"[tools.replay {command}] snapshot of {address} written in {time.time() - t0:.2f} s: {path}",
            file=sys.stderr,
        )
        out.append((name, path))
    return out, total


def _no_address() -> str:
    return f"{os.path.join(_RUN_DIR.value, 'replay_address')} does not exist (the program is not running)"


def _run_checkpoint_only() -> bool:
    return bool(_RUN_DIR.value) and not any(
        os.path.exists(os.path.join(_RUN_DIR.value, name))
        for name in ("replay_address", ADDRESSES_FILE)
    )


def _run_checkpoint(command: str, why: str) -> tuple[list[tuple[str, str]], int]:
    """The replay (every shard) of the run's newest complete whole-run checkpoint
    (RUN_DIR/checkpoints)."""
    latest = checkpointing.latest_complete(_RUN_DIR.value)
    if latest is None:
        raise _Usage(
            f"{why}; and {_RUN_DIR.value} has no complete checkpoint to read instead", code=1
        )
    print(
        f"[tools.replay {command}] the live server is not reachable ({why}); reading the "
        f"run's newest checkpoint {latest} (as of that checkpoint)",
        file=sys.stderr,
    )
    if inspect.shard_dirs(latest):  # a sharded replay: replay_0/, replay_1/, ...
        shards, total = _resolve(latest)
        return _select(shards, latest, total)
    checkpointing.verify_files(latest)  # CorruptCheckpointError: exit 2
    return _select([("replay", os.path.join(latest, checkpointing.REPLAY_DIR))], latest)


def _table(shards: list[tuple[str, str]]) -> str:
    path = shards[0][1]
    names = sorted(read_tables(path))
    if not names:
        raise _Usage(f"the checkpoint {path} holds no tables")
    if _TABLE.value:
        if _TABLE.value not in names:
            raise _Usage(f"--table={_TABLE.value!r} is not in the checkpoint; tables: {names}")
        table = _TABLE.value
    elif len(names) != 1:
        raise _Usage(f"the checkpoint has tables {names}: choose one with --table")
    else:
        table = names[0]
    for name, other in shards[1:]:
        if table not in read_tables(other):
            raise _Usage(f"shard {name}'s checkpoint {other} has no table {table!r}")
    return table


def _stats(command: str = "stats") -> tuple[list[dict], bool, int]:
    """(per shard: {shard, address | checkpoint, tables: its table stats}, whether
    they are live, the source's shard count). A --run_dir whose server is gone
    (a stopped run) falls back to the run's newest checkpoint, as the other
    verbs do."""

    def from_checkpoint(found: tuple[list[tuple[str, str]], int]) -> tuple[list[dict], bool, int]:
        shards, total = found
        out = []
        for name, path in shards:
            stats = inspect.checkpoint_stats(path)
            if not stats:
                raise _Usage(f"the checkpoint {path} holds no tables")
            out.append({"shard": name, "checkpoint": path, "tables": stats})
        return out, False, total

    if _CHECKPOINT.value:
        return from_checkpoint(_checkpoint_shards(command))
    if _run_checkpoint_only():
        return from_checkpoint(_run_checkpoint(command, _no_address()))
    live = _live_shards()
    if live is None:
        raise _Usage("give --run_dir=DIR, --server=HOST:PORT or --checkpoint=DIR")
    live, total = _select(live, "the replay")
    reused = all(address in _CLIENTS for _, address in live)
    try:
        clients = [(name, address, _client(address)) for name, address in live]
    except _Usage as err:
        if _RUN_DIR.value and err.code == 1:  # a stopped run: its newest checkpoint
            return from_checkpoint(_run_checkpoint(command, str(err)))
        raise
    try:
        shards = [
            {
                "shard": name,
                "address": address,
                "tables": inspect.table_stats(c, timeout=_TIMEOUT.value),
            }
            for name, address, c in clients
        ]
    except Exception:  # noqa: BLE001 - gone since the last refresh: ask as a first call does
        if not reused:
            raise
        _CLIENTS.clear()
        return _stats(command)
    return shards, True, total


def _shard_header(table: str, shards: list[tuple[str, str]], total: int, rule: bool = True) -> str:
    """'table T, S shards' (the actor -> shard rule if `rule`) and where each
    shard's checkpoint is."""
    of = f"{len(shards)} of {total} shards" if len(shards) != total else f"{total} shards"
    of += f" ({shard_rule(total)})" if rule else ""
    return f"table {table}, {of}:\n" + "\n".join(f"  {name}: {path}" for name, path in shards)


def _print_stats() -> None:
    """stats: each shard's tables and rate limiter, then the totals (one shard: as always)."""
    shards, _, total = _stats()
    if total == 1:  # one shard: exactly as always
        stats = shards[0]["tables"]
        print(json.dumps(stats, indent=2) if _JSON.value else inspect.format_stats(stats))
    elif _JSON.value:
        totals = inspect.total_stats([sh["tables"] for sh in shards])
        print(json.dumps({"num_shards": total, "shards": shards, "total": totals}, indent=2))
    else:
        print(inspect.format_shard_stats(shards, num_shards=total))


def _watch() -> None:
    """watch: the stats every --interval seconds, --count times (0: until Ctrl-C)."""
    if _CHECKPOINT.value:
        raise _Usage("watch needs a live source (--run_dir or --server)")
    i = 0
    while _COUNT.value == 0 or i < _COUNT.value:
        if i:
            time.sleep(_INTERVAL.value)
        shards, live, total = _stats("watch")
        stamp = time.strftime("%H:%M:%S")
        if total == 1:
            stats = shards[0]["tables"]
            print(json.dumps({"time": stamp, "tables": stats}) if _JSON.value else f"--- {stamp}")
            if not _JSON.value:
                print(inspect.format_stats(stats, signature=False), flush=True)
        elif _JSON.value:
            totals = inspect.total_stats([sh["tables"] for sh in shards])
            line = {"time": stamp, "shards": shards, "total": totals}
            print(json.dumps(line, default=str), flush=True)
        else:
            print(
                f"--- {stamp} " + inspect.format_shard_sizes(shards, num_shards=total), flush=True
            )
        if not live:  # a stopped run's checkpoint does not change: once is enough
            print("[tools.replay watch] the run has stopped: nothing to watch", file=sys.stderr)
            break
        i += 1


def _priorities(table: str, shards: list[tuple[str, str]], total: int) -> None:
    """priorities: the histogram and the top/bottom items (pooled over the shards)."""
    path = shards[0][1]
    if total > 1:
        cols = inspect.pooled_item_table(shards, table, provenance=False)
        names = [name for name, _ in shards]
        summary = inspect.priority_summary(cols, _K.value, _BINS.value, shards=names)
        summary["table"], summary["checkpoints"] = table, dict(shards)
        summary["num_shards"] = total
    else:
        summary = inspect.priority_summary(
            inspect.item_table(path, table, provenance=False), _K.value, _BINS.value
        )
        summary["table"], summary["checkpoint"] = table, path
    if _PNG.value:
        summary["png"] = inspect.save_histogram_png(summary, _PNG.value, table)
    if _JSON.value:
        print(json.dumps(summary, indent=2))
    else:
        head = _shard_header(table, shards, total) if total > 1 else f"table {table} ({path})"
        print(head + "\n" + inspect.format_priorities(summary))
        if _PNG.value:
            print(f"histogram: {summary['png']}")


def _items(table: str, shards: list[tuple[str, str]], total: int) -> None:
    """items: --n decoded items as JSON (stdout or --out) or npz, frames to --png."""
    if total > 1:
        items = inspect.select_shard_items(shards, table, _N.value, _ORDER.value)
    else:
        items = inspect.select_items(shards[0][1], table, _N.value, _ORDER.value)
    if _PNG.value:
        print(f"frames: {inspect.save_items_png(items, _PNG.value)}", file=sys.stderr)
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


def _breakdown(table: str, shards: list[tuple[str, str]], total: int) -> None:
    """breakdown: the items grouped by actor, epsilon band, version (and shard)."""
    try:
        bands = tuple(float(x) for x in _BANDS.value)
    except ValueError:
        raise _Usage(
            f"--bands={','.join(_BANDS.value)} is invalid: expected numbers, e.g. --bands=0.01,0.1"
        ) from None
    path = shards[0][1]
    if total > 1:
        b = inspect.breakdown(
            inspect.pooled_item_table(shards, table), bands, _VERSION_BINS.value, total
        )
        text = _shard_header(table, shards, total, rule=False) + "\n"
        text += inspect.format_breakdown(b, total)
    else:
        b = inspect.breakdown(inspect.item_table(path, table), bands, _VERSION_BINS.value)
        text = f"table {table} ({path})\n" + inspect.format_breakdown(b)
    print(json.dumps(b, indent=2) if _JSON.value else text)


# The item-level commands: each reads (table, [(shard, checkpoint dir)], the shard count).
_ITEM_COMMANDS = {"priorities": _priorities, "items": _items, "breakdown": _breakdown}


def run(command: str) -> int:
    if command == "stats":
        _print_stats()
    elif command == "watch":
        _watch()
    else:
        shards, total = _checkpoint_shards(command)
        _ITEM_COMMANDS[command](_table(shards), shards, total)
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
