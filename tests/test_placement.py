"""apex.placement: where each node of a program goes on a Ray cluster (pure)."""

from __future__ import annotations

import pytest

from apex.config import ApexConfig
from apex.errors import ConfigError
from apex.placement import ClusterNode, PlacementError, demands, describe, plan_placement
from apex.validation import validate

HEAD = ClusterNode("head0000aaaa", "10.0.0.1", 4, resources=(("apex_learner", 1.0),), is_head=True)
W1 = ClusterNode("work1111bbbb", "10.0.0.2", 2, resources=(("apex_actor", 1.0),))
W2 = ClusterNode("work2222cccc", "10.0.0.3", 2, resources=(("apex_actor", 1.0),))
GPU = ClusterNode("gpu33333dddd", "10.0.0.4", 8, gpus=1)


def _shape(actors: int, replay_node: bool = False) -> list[tuple[str, int]]:
    groups = [("learner", 1), ("coordinator", 1), ("actor", actors)]
    return [("replay", 1), *groups] if replay_node else groups


def test_servers_sit_together_and_actors_spread_over_the_other_nodes():
    wanted = demands(ApexConfig().cluster, _shape(4))
    plan = plan_placement([W1, HEAD, W2], wanted, launcher_ip="10.0.0.1")
    assert plan["learner"] == plan["coordinator"] == HEAD.node_id
    actors = [plan[f"actor_{i}"] for i in range(4)]
    assert HEAD.node_id not in actors
    assert sorted(actors) == sorted([W1.node_id, W1.node_id, W2.node_id, W2.node_id])
    assert "actor_0" in describe(plan, [W1, HEAD, W2])


def test_the_learner_goes_where_its_resource_or_gpu_is():
    cfg = ApexConfig().cluster
    cfg.learner_gpus = 1
    plan = plan_placement([HEAD, W1, GPU], demands(cfg, _shape(2)), launcher_ip="10.0.0.1")
    assert plan["learner"] == plan["coordinator"] == GPU.node_id
    cfg = ApexConfig().cluster
    cfg.learner_resource = "apex_learner"
    plan = plan_placement([W1, GPU, HEAD], demands(cfg, _shape(2)), launcher_ip="10.0.0.4")
    assert plan["learner"] == HEAD.node_id  # the resource wins over the launcher's host


def test_actors_overflow_onto_the_learners_node_only_when_the_others_are_full():
    wanted = demands(ApexConfig().cluster, _shape(6))
    plan = plan_placement([HEAD, W1, W2], wanted, launcher_ip="10.0.0.1")
    on_head = [i for i in range(6) if plan[f"actor_{i}"] == HEAD.node_id]
    assert len(on_head) == 2  # 4 CPUs - 1.5 for the servers: room for 2 of 1 CPU


def test_actor_resource_keeps_actors_off_other_nodes():
    cfg = ApexConfig().cluster
    cfg.actor_resource = "apex_actor"
    plan = plan_placement([HEAD, W1, W2], demands(cfg, _shape(4)), launcher_ip="10.0.0.1")
    assert {plan[f"actor_{i}"] for i in range(4)} == {W1.node_id, W2.node_id}
    with pytest.raises(PlacementError, match=r"4 actors x 1 CPUs need 4 CPUs; .*apex_actor"):
        plan_placement([HEAD, W1], demands(cfg, _shape(4)), launcher_ip="10.0.0.1")


def test_refusals_name_what_is_missing():
    cfg = ApexConfig().cluster
    cfg.actor_cpus = 2
    with pytest.raises(PlacementError) as err:
        plan_placement([HEAD, W1, W2], demands(cfg, _shape(8)), launcher_ip="10.0.0.1")
    assert "8 actors x 2 CPUs need 16 CPUs; the cluster has 6.5 free for actors" in str(err.value)
    cfg = ApexConfig().cluster
    cfg.learner_resource = "gpu_box"
    with pytest.raises(PlacementError, match="no node for the learner.*'gpu_box'"):
        plan_placement([HEAD, W1], demands(cfg, _shape(1)))
    cfg = ApexConfig().cluster
    cfg.actor_resource = "nowhere"
    with pytest.raises(PlacementError, match="none has the custom resource 'nowhere'"):
        plan_placement([HEAD, W1], demands(cfg, _shape(1)))
    with pytest.raises(PlacementError, match=r"needs 3.5 CPUs .*; the cluster has 2 free"):
        plan_placement([HEAD, W1], demands(ApexConfig().cluster, _shape(2)), cluster_free_cpus=2)
    with pytest.raises(PlacementError, match="no alive node"):
        plan_placement([], demands(ApexConfig().cluster, _shape(1)))


def test_a_separate_replay_node_sits_with_the_learner():
    plan = plan_placement(
        [HEAD, W1], demands(ApexConfig().cluster, _shape(1, replay_node=True)), "10.0.0.1"
    )
    assert plan["replay"] == plan["learner"] == HEAD.node_id


@pytest.mark.parametrize(
    "field,value",
    [
        ("actor_cpus", -1),
        ("learner_gpus", "one"),
        ("learner_resource", ""),
        ("start_timeout_seconds", 0),
    ],
)
def test_cluster_fields_are_validated(field, value):
    config = ApexConfig()
    setattr(config.cluster, field, value)
    with pytest.raises(ConfigError, match=f"cluster.{field}="):
        validate(config)


def test_replay_port_pins_the_port_whatever_host_a_launch_binds():
    """replay.port is where the server listens and clients dial, under local_mp
    (localhost) and on Ray (the host's IP)."""
    import pickle

    from launchpad.address import SimpleLocalAddressBuilder

    from apex import compat
    from launch.nodes import GracefulReverbNode

    node = GracefulReverbNode(lambda: [], None, port=23456)
    address = node.reverb_address
    address.bind(SimpleLocalAddressBuilder())
    assert address.resolve() == "localhost:23456"
    compat.bind_node_addresses(node, ["10.0.0.7:40001"])
    assert address.resolve() == "10.0.0.7:23456"
    assert pickle.loads(pickle.dumps(address)).resolve() == "10.0.0.7:23456"  # as nodes get it
    free = GracefulReverbNode(lambda: [], None)
    compat.bind_node_addresses(free, ["10.0.0.7:40001"])
    assert free.reverb_address.resolve() == "10.0.0.7:40001"


def test_replay_shards_spread_over_hosts_and_actors_sit_next_to_their_shard():
    from launch.ray_plan import program_demands, program_shape

    c = ApexConfig()
    c.actor.num_actors = 4
    c.replay.num_shards = 3  # shard 0 with the learner; shards 1 and 2 are nodes
    assert program_shape(c) == [("learner", 1), ("replay", 2), ("coordinator", 1), ("actor", 4)]
    wanted = program_demands(c)
    assert [d.name for d in wanted if d.label == "replay"] == ["replay_1", "replay_2"]
    assert [d.shard for d in wanted if d.label == "actor"] == [0, 1, 2, 0]
    big1 = ClusterNode("work1111bbbb", "10.0.0.2", 4)
    big2 = ClusterNode("work2222cccc", "10.0.0.3", 4)
    plan = plan_placement([HEAD, big1, big2], wanted, launcher_ip="10.0.0.1")
    assert plan["learner"] == plan["coordinator"] == HEAD.node_id
    # One shard per worker host, and each actor of a shard on that shard's host.
    assert {plan["replay_1"], plan["replay_2"]} == {big1.node_id, big2.node_id}
    assert plan["actor_1"] == plan["replay_1"] and plan["actor_2"] == plan["replay_2"]
    # Shard 0 is on the learner's host: its actors stay off it while others have room.
    assert plan["actor_0"] != HEAD.node_id and plan["actor_3"] != HEAD.node_id
    # Every shard a node of its own (not colocated): shard 0 spreads too.
    c.replay.colocate_with_learner = False
    assert program_shape(c)[0] == ("replay", 3)
    plan = plan_placement([HEAD, big1, big2], program_demands(c), launcher_ip="10.0.0.1")
    assert {plan[f"replay_{s}"] for s in range(3)} <= {big1.node_id, big2.node_id}
    # A cluster too small for the shards says so, counting them.
    with pytest.raises(PlacementError, match="replay_1 1"):
        plan_placement([HEAD], program_demands(c), launcher_ip="10.0.0.1", cluster_free_cpus=3)


def test_the_model_store_sits_with_the_learner_and_central_inference_needs_no_node():
    from launch.ray_plan import program_demands, program_shape

    c = ApexConfig()
    c.actor.inference = "central"  # in the learner's process: no node of its own
    c.model_store.enabled = True
    c.cluster.model_store_cpus = 0.25
    assert program_shape(c) == [
        ("learner", 1),
        ("coordinator", 1),
        ("model_store", 1),
        ("actor", 2),
    ]
    wanted = program_demands(c)
    assert [d.cpus for d in wanted if d.label == "model_store"] == [0.25]
    plan = plan_placement([W1, HEAD, W2], wanted, launcher_ip="10.0.0.1")
    assert plan["model_store"] == plan["learner"] == HEAD.node_id
    assert {plan["actor_0"], plan["actor_1"]} <= {W1.node_id, W2.node_id}
