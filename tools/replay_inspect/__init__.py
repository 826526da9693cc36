"""The replay inspector's backend (tools.replay, tools.status): looking inside
replay without changing what the learner sees.

Two sources, never sampling:
* table stats (`table_stats`, from apex.replay.stats): Reverb's server_info of a
  live server (sizes, counters, the rate limiter's state): neither the rate
  limiter nor any item's times-sampled count moves; as fresh as the call.
* Item-level views (`item_table`, `priority_summary`, `breakdown`,
  `select_items`) read a Reverb checkpoint with
  tools.replay_inspect.checkpoint_reader: an existing checkpoint directory
  offline, or for a live server one it writes at the moment of the call
  (`snapshot`; the table is locked while it is written, nothing is sampled).

Sharded replay (`replay.num_shards` = S > 1, apex.replay.shards): every view
also exists over several shards, per shard and in total: `total_stats` /
`format_shard_stats` for the stats, and `pooled_item_table` (every shard's
items with a `shard` column) for `priority_summary` and `breakdown`, which then
add per-shard figures; `select_shard_items` picks items over all shards.
`read_shard_addresses` reads RUN_DIR/replay_addresses, `resolve_shards` a
checkpoint directory's shard directories (`replay_0/`, `replay_1/`, ...).

Modules, one job each:
    sources            where to read: live addresses, snapshots, checkpoint dirs
    checkpoint_reader  a Reverb checkpoint parsed offline (tfrecord, snappy below it)
    items              item columns, picking and decoding items, writing them out
    summaries          totals over shards, the priority histogram, the breakdown
    text               all of those as text
    pictures           the histogram and items' frames as PNGs

Example:
    >>> from tools import replay_inspect as inspect
    >>> stats = inspect.table_stats(reverb.Client("localhost:1234"))
    >>> print(inspect.format_stats(stats))
    >>> path = inspect.snapshot(reverb.Client("localhost:1234"))
    >>> print(inspect.format_priorities(inspect.priority_summary(inspect.item_table(path, "transitions"))))
"""

from apex.replay import format_stats, stats_from_server_info, table_stats
from tools.replay_inspect.items import (
    PROVENANCE,
    item_table,
    items_to_json,
    pooled_item_table,
    save_items_npz,
    select_items,
    select_shard_items,
)
from tools.replay_inspect.pictures import save_histogram_png, save_items_png
from tools.replay_inspect.sources import (
    checkpoint_stats,
    checkpoint_time,
    manifest_num_shards,
    read_shard_addresses,
    resolve_checkpoint,
    resolve_shards,
    shard_dirs,
    snapshot,
)
from tools.replay_inspect.summaries import breakdown, priority_summary, total_stats
from tools.replay_inspect.text import (
    format_breakdown,
    format_priorities,
    format_shard_sizes,
    format_shard_stats,
    format_total,
)

__all__ = [
    "PROVENANCE",
    "breakdown",
    "checkpoint_stats",
    "checkpoint_time",
    "format_breakdown",
    "format_priorities",
    "format_shard_sizes",
    "format_shard_stats",
    "format_stats",
    "format_total",
    "item_table",
    "items_to_json",
    "manifest_num_shards",
    "pooled_item_table",
    "priority_summary",
    "read_shard_addresses",
    "resolve_checkpoint",
    "resolve_shards",
    "save_histogram_png",
    "save_items_npz",
    "save_items_png",
    "select_items",
    "select_shard_items",
    "shard_dirs",
    "snapshot",
    "stats_from_server_info",
    "table_stats",
    "total_stats",
]
