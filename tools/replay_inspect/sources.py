"""Where the inspector reads replay from: a live server or a checkpoint directory.

Live: `read_shard_addresses` (RUN_DIR/replay_addresses of a sharded run) and
`snapshot` (a checkpoint the server writes at the moment of the call).
Offline: `resolve_checkpoint` / `resolve_shards` (a checkpoint directory, a
checkpointer root, or one per shard: `replay_0/`, `replay_1/`, ...),
`manifest_num_shards` (what a run checkpoint says it holds), `checkpoint_time`
and `checkpoint_stats` (the table stats as of the checkpoint).

Reverb cannot list items, and sampling moves times_sampled and the rate
limiter. So item-level views read a checkpoint: of a live server, one it
writes at the moment of the call (`snapshot`: no sampling, no counter moves;
the table is locked while the checkpoint is written), or an existing
checkpoint directory offline. tools.replay_inspect.checkpoint_reader parses it.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any

from apex import checkpointing
from apex.replay import ADDRESSES_FILE, table_dict
from tools.replay_inspect import checkpoint_reader as cr

if TYPE_CHECKING:  # the type only: a checkpoint's views need no TensorFlow
    import reverb

_SHARD_DIR = re.compile(r"^replay_(\d+)$")


def read_shard_addresses(run_dir: str) -> list[tuple[str, str]] | None:
    """The shards of a live run: [(shard name, HOST:PORT)] in shard order from
    RUN_DIR/replay_addresses (one `<shard_name> <HOST:PORT>` per line), or None
    when the run has no such file (one shard: RUN_DIR/replay_address).

    Raises:
        ValueError: a line is not `<shard_name> <HOST:PORT>`.
    """
    path = os.path.join(run_dir, ADDRESSES_FILE)
    if not os.path.exists(path):
        return None
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(
                    f"{path} line {n}: expected '<shard_name> <HOST:PORT>', got {line.strip()!r}"
                )
            out.append((parts[0], parts[1]))
    return out


def snapshot(client: reverb.Client) -> str:
    """Asks a live server to write a checkpoint now; returns its directory.

    Note: Reverb's checkpointer keeps only the newest checkpoint in its root.
    """
    return client.checkpoint()


def manifest_num_shards(path: str) -> int | None:
    """replay.num_shards of the run checkpoint at `path` (its manifest.json's
    config; 1 when the config predates shards), or None without a readable manifest."""
    try:
        with open(os.path.join(path, checkpointing.MANIFEST_FILE)) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    return checkpointing.checkpoint_num_shards(manifest) if isinstance(manifest, dict) else None


def shard_dirs(path: str) -> list[str]:
    """The shard directories (`replay_0`, `replay_1`, ...) in `path`, in shard order."""
    if not os.path.isdir(path):
        return []
    found = []
    for name in os.listdir(path):
        m = _SHARD_DIR.match(name)
        if m and os.path.isdir(os.path.join(path, name)):
            found.append((int(m.group(1)), name))
    return [name for _, name in sorted(found)]


def resolve_shards(path: str) -> list[tuple[str, str]]:
    """[(shard name, complete Reverb checkpoint directory)] of `path`: the shard
    directories `replay_0/`, `replay_1/`, ... it holds (a run checkpoint of a
    sharded replay, or the run's replay_checkpoints/ root; each a checkpoint or
    a checkpointer root: its newest complete checkpoint), in shard order; else
    [("replay", resolve_checkpoint(path))], one shard, exactly as before."""
    names = shard_dirs(path)
    if not names:
        return [("replay", resolve_checkpoint(path))]
    return [(name, resolve_checkpoint(os.path.join(path, name))) for name in names]


def resolve_checkpoint(path: str) -> str:
    """A complete checkpoint directory: `path` itself, or the newest one under a checkpointer root."""
    if not os.path.isdir(path):
        raise cr.CheckpointNotFoundError(f"{path!r} is not a directory")
    if os.path.isfile(os.path.join(path, cr.DONE_FILE)):
        return path
    if os.path.isfile(os.path.join(path, cr.TABLES_FILE)):
        raise cr.IncompleteCheckpointError(
            f"{path!r} has no {cr.DONE_FILE} marker: a half-written checkpoint is never read"
        )
    latest = cr.latest_checkpoint(path)
    if latest is None:
        raise cr.CheckpointNotFoundError(f"no complete Reverb checkpoint in {path!r}")
    return latest


def checkpoint_time(path: str) -> float:
    """When the checkpoint was completed (its DONE marker's mtime, unix s)."""
    return os.path.getmtime(os.path.join(path, cr.DONE_FILE))


def checkpoint_stats(path: str) -> list[dict[str, Any]]:
    """table_stats of a checkpoint directory (same keys, and its sampler and remover)."""
    out = []
    for name, t in sorted(cr.read_tables(path).items()):
        rl = t.rate_limiter
        table = table_dict(
            name,
            t.num_items,
            t.max_size,
            rl.inserts,
            rl.samples,
            rl.deletes,
            t.num_unique_samples,
            rl.samples_per_insert,
            rl.min_size_to_sample,
            rl.min_diff,
            rl.max_diff,
            t.signature,
        )
        out.append({**table, "sampler": t.sampler, "remover": t.remover})
    return out
