"""Replay: Reverb tables and their items, the writers, the dataset, the shards.

Replay knows no agent and no registry: table names and signatures are
arguments (an agent's builder owns them, apex.agents). This module is the
face launch/, tools/, bench/ and a user's script import replay through
(`from apex.replay import X`); modules inside apex import the concrete
modules below instead.

Importing it imports no TensorFlow or Reverb. The names marked (lazy, TF)
are resolved on first use (a PEP 562 `__getattr__`) and import TensorFlow and
Reverb then.

Shards (apex/replay/shards.py): with replay.num_shards S > 1, actor i writes
to shard i mod S
    shard_rule, shard_of_actor, actors_of_shard   the rule, as text and as numbers
    shard_name, shard_index, shard_config         a shard's name and back; the config of one shard
    ADDRESSES_FILE                                RUN_DIR's file naming each shard's server
Table figures (apex/replay/stats.py): what a server holds, as the tools print it
    table_stats, table_dict, stats_from_server_info, format_stats
Writing and reading items (apex/replay/{writer,frame_streams,stalls,tables,dataset}.py)
    TransitionWriter, SequenceWriter   (lazy, TF) an actor's writers (n-step transitions,
                                       R2D2 sequences), each slot's steps to Reverb items
    pack_transitions, unpack_item      (lazy, TF) items packed for the table; a sampled
                                       item back to named fields
    make_dataset                       (lazy, TF) the learner's prioritized sample stream
    ReplayStalled                      (lazy) a writer's stream broke (a partition): write anew

Example (the figures of a live run's replay, as tools.status prints them):

    import reverb
    from apex.replay import format_stats, table_stats

    client = reverb.Client("localhost:8000")
    print(format_stats(table_stats(client)))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apex.lazy import lazy_names
from apex.replay.shards import (
    ADDRESSES_FILE,
    actors_of_shard,
    shard_config,
    shard_index,
    shard_name,
    shard_of_actor,
    shard_rule,
)
from apex.replay.stats import format_stats, stats_from_server_info, table_dict, table_stats

if TYPE_CHECKING:  # pragma: no cover - for type checkers; at run time see _LAZY
    from apex.replay.dataset import make_dataset
    from apex.replay.stalls import ReplayStalled
    from apex.replay.tables import unpack_item
    from apex.replay.writer import SequenceWriter, TransitionWriter, pack_transitions

# The lazy names (TensorFlow and Reverb): name -> the module that defines it.
_LAZY: dict[str, str] = {
    "make_dataset": "apex.replay.dataset",
    "pack_transitions": "apex.replay.writer",
    "ReplayStalled": "apex.replay.stalls",
    "unpack_item": "apex.replay.tables",
    "SequenceWriter": "apex.replay.writer",
    "TransitionWriter": "apex.replay.writer",
}


__getattr__, __dir__ = lazy_names(globals(), _LAZY)


__all__ = [
    # shards
    "ADDRESSES_FILE",
    "actors_of_shard",
    "shard_config",
    "shard_index",
    "shard_name",
    "shard_of_actor",
    "shard_rule",
    # table figures
    "format_stats",
    "stats_from_server_info",
    "table_dict",
    "table_stats",
    # writing and reading items
    "ReplayStalled",
    "SequenceWriter",
    "TransitionWriter",
    "make_dataset",
    "pack_transitions",
    "unpack_item",
]
