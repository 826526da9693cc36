"""Replay shards: `replay.num_shards` Reverb servers that together are one
prioritized replay. The rules every part of apex follows:

- **Which shard an actor writes to**: actor i writes every item to shard
  `shard_of_actor(i, S) = i % S`.
- **What each shard holds**: the program's table made from `shard_config(config)`:
  capacity // S items, min_size ceil(min_size / S), the error buffer / S when one
  is set (else the auto buffer of the shard's own settings), samples_per_insert
  unchanged (the ratio holds per shard, so it holds in total).
- **Sampling** (apex.replay.sharded): every SGD batch comes whole from one shard,
  picked uniformly at random among the shards that have a batch ready (a slow or
  rate-limited shard does not stall the learner while another can serve). An
  item i of shard s is drawn with probability

      P(i) = q_s * p_i^alpha / M_s,    q_s = 1 / (shards ready at that draw),
                                       M_s = sum of p^alpha over shard s,

  and its importance weight is (N * P(i)) ** -beta, normalised by the batch's
  maximum, with N the total size over all shards. With every shard ready and
  equal priority mass (M_s = M / S) this is p_i^alpha / M: one table's
  prioritized sampling, exactly.
- **Priority updates** go to the shard each sampled key came from.

With S = 1 none of this changes anything: one server, named "replay", as always.
"""

from __future__ import annotations

import copy
import math

from apex.config import ApexConfig

# RUN_DIR file of a live sharded run: one `<shard_name> <HOST:PORT>` line per shard
# (written by the coordinator, read by the tools); RUN_DIR/replay_address keeps shard 0's.
ADDRESSES_FILE = "replay_addresses"


def shard_rule(num_shards: int) -> str:
    """The actor -> shard assignment, as launch lines and tools state it."""
    return f"actor i writes to shard i % {int(num_shards)}"


def shard_of_actor(actor_id: int, num_shards: int) -> int:
    """The shard actor `actor_id` writes to."""
    return int(actor_id) % int(num_shards)


def actors_of_shard(shard: int, num_actors: int, num_shards: int) -> list[int]:
    """The actors that write to `shard`."""
    return [i for i in range(num_actors) if shard_of_actor(i, num_shards) == shard]


def shard_config(config: ApexConfig) -> ApexConfig:
    """The config one shard's table is made from (the program's own when S = 1)."""
    s = int(config.replay.num_shards)
    if s == 1:
        return config
    out = copy.deepcopy(config)
    r = out.replay
    r.capacity = config.replay.capacity // s
    r.min_size = max(1, math.ceil(config.replay.min_size / s))
    if config.replay.error_buffer is not None:
        r.error_buffer = config.replay.error_buffer / s
    r.num_shards = 1
    return out


def shard_name(shard: int, num_shards: int) -> str:
    """The shard's name in nodes, heartbeats, metrics and tools: 'replay' when
    there is one, 'replay_<s>' otherwise."""
    return "replay" if int(num_shards) == 1 else f"replay_{int(shard)}"


def shard_index(name: str) -> int:
    """The index of the shard named `name` ('replay_1' -> 1; 'replay' -> 0)."""
    return 0 if name == "replay" else int(name.rsplit("_", 1)[1])
