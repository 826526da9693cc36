"""What a program asks of a Ray cluster: its node groups as launch.program builds
them, and each node's demand (apex.placement)."""

from __future__ import annotations

from apex import ApexConfig, Demand, demands


def program_shape(config: ApexConfig) -> list[tuple[str, int]]:
    """The program's node groups as launch.program builds them: [(label, count)]."""
    groups = [("learner", 1)]
    shards = int(config.replay.num_shards)
    if not config.replay.colocate_with_learner:
        groups.insert(0, ("replay", shards))
    elif shards > 1:  # shard 0 is in the learner's process; the others are nodes
        groups.append(("replay", shards - 1))
    groups.append(("coordinator", 1))
    if config.model_store.enabled:
        groups.append(("model_store", 1))
    groups.append(("actor", config.actor.num_actors))
    return groups


def program_demands(config: ApexConfig) -> list[Demand]:
    """What each node of `config`'s program asks of the cluster (apex.placement.demands)."""
    first = 1 if config.replay.colocate_with_learner else 0
    return demands(config.cluster, program_shape(config), config.replay.num_shards, first)
