"""make_program(config) -> lp.Program: the program graph of an apex agent.

    replay (ReverbNode) <- actors insert;  learner samples, updates priorities
    learner (CourierNode, the variable source) -> actors, evaluator pull weights
    coordinator (CourierNode: the control plane; counter, stopper, progress,
                 summary.json, the run directory's owner)
    evaluator (CourierNode: greedy episodes; in the coordinator's process)
    inference (CourierNode, actor.inference='central': batches the actors'
               forward passes; in the learner's process)
    model_store (CourierNode, model_store.enabled: holds the versions the
               learner pushes, serves actors and the evaluator, keeps the best)
    actors (CourierNodes: env steppers; need no run directory)

Replay shards (replay.num_shards = S > 1, apex.replay.shards): S Reverb
servers 'replay_0' ... 'replay_<S-1>', each with the table of
`shard_config(config)`, its own checkpointer root and, on a resume, its own
shard of the checkpoint. Shard 0 is in the learner's process when
replay.colocate_with_learner (as the one server is); every other shard is a
node of its own in the Launchpad group 'replay' (in shard order: replay/0 is
shard 1 when shard 0 is colocated, shard 0 otherwise). Actor i gets shard
i % S; the learner and the coordinator get every shard (a list). With
replay.port set, shard s listens on replay.port + s.

The nodes themselves are in launch/nodes/ (one module each), the stop window in
apex/lifecycle.py, the agent's parts in its builder (apex.agents).
"""

from __future__ import annotations

import functools
import shutil
import time

import launchpad as lp
import reverb

from apex import ApexConfig, check_port_free, checkpointing, prepare_env, validate
from apex.agents import check_torso, get_builder, make_tables
from apex.replay import shard_config, shard_name, shard_of_actor
from launch.nodes import (
    ActorNode,
    CoordinatorNode,
    EvaluatorNode,
    GracefulReverbNode,
    InferenceNode,
    LearnerNode,
    ModelStoreNode,
)


def make_program(
    config: ApexConfig,
    run_dir: str = "",
    start_time: float | None = None,
    resume: checkpointing.Checkpoint | None = None,
) -> lp.Program:
    """Builds the Launchpad program of `config` (validated first).

    Args:
      config: the program config.
      run_dir: where nodes write metrics, summary.json and checkpoints ('' : nothing written).
      start_time: unix time of the launch; wall_seconds count from it.
      resume: a checkpoint to continue from (checked against `config` by the caller:
        `launch.resume.resume_checkpoint`): learner state, counters and replay.
    """
    validate(config)
    num_shards = int(config.replay.num_shards)
    if config.replay.port is not None:
        for s in range(num_shards):  # shard s: replay.port + s
            check_port_free("replay.port" if s == 0 else f"replay.port+{s}", config.replay.port + s)
    builder = get_builder(config)
    # env.imports, the observation encoding, target_return='auto' resolved in `config`.
    spec = prepare_env(config).spec
    check_torso(config, spec)
    start_time = time.time() if start_time is None else start_time
    program = lp.Program("apex")

    if run_dir:
        # The server's checkpointer root holds only transient checkpoints (tools'
        # snapshots, a run checkpoint's replay until it is moved): start it empty,
        # since Reverb loads the fallback (a resumed replay) only into an empty root.
        shutil.rmtree(checkpointing.replay_root(run_dir), ignore_errors=True)
    # The replay: one server, or one per shard (each with a shard's table).
    tables_fn = functools.partial(make_tables, shard_config(config), spec)
    replay_nodes = []
    for s in range(num_shards):
        checkpoint_ctor = None
        if run_dir:
            checkpoint_ctor = functools.partial(
                reverb.checkpointers.DefaultCheckpointer,
                path=checkpointing.replay_root(run_dir, s, num_shards),
                fallback_checkpoint_path=resume.shard_path(s) if resume is not None else None,
            )
        own_process = s > 0 or not config.replay.colocate_with_learner
        replay_nodes.append(
            GracefulReverbNode(
                tables_fn,
                checkpoint_ctor,
                port=None if config.replay.port is None else config.replay.port + s,
                name=shard_name(s, num_shards),
                heartbeat_period=config.logging.heartbeat_period_seconds
                if num_shards > 1 and own_process
                else 0.0,
            )
        )
    shard_handles = [node.create_handle() for node in replay_nodes]
    # What the learner and the coordinator take: the server, or every shard.
    replay = shard_handles[0] if num_shards == 1 else shard_handles

    resume_state = resume.state if resume is not None else None
    resume_from = resume.path if resume is not None else ""
    # The coordinator is the control plane: every node reports to it over RPC.
    coordinator_node = lp.CourierNode(
        CoordinatorNode, config, run_dir, start_time, replay, resume_state, resume_from
    )
    coordinator = coordinator_node.create_handle()
    coordinator.set_client_kwargs(call_timeout=5)  # reports never hang on a stopped coordinator
    for node in replay_nodes:
        node.wait_for_learner_through(coordinator)

    # The model store (model_store.enabled): the learner pushes to it; actors and
    # the evaluator pull from it, and it keeps the best evaluated parameters.
    store_node = store = None
    if config.model_store.enabled:
        store_node = lp.CourierNode(
            ModelStoreNode,
            config,
            coordinator,
            resume_from,
            courier_kwargs={"thread_pool_size": max(16, config.actor.num_actors + 8)},
        )
        store = store_node.create_handle()
        store.set_client_kwargs(call_timeout=5)

    learner_node = lp.CourierNode(
        LearnerNode, config, builder, spec, replay, coordinator, run_dir, resume_from, store
    )
    learner = learner_node.create_handle()
    # Calls to the learner fail after 5 s instead of hanging on a dead node;
    # callers retry or stop (wait_for_ready still covers the learner's start-up).
    learner.set_client_kwargs(call_timeout=5)
    # Where actors pull parameters from (with local inference).
    variable_source = learner if store is None else store

    # Central inference (actor.inference='central'): a node in the learner's
    # process, reading the learner's parameters there (apex.inference).
    inference = None
    learner_process = [learner_node]
    if config.actor.inference == "central":
        inference_node = lp.CourierNode(
            InferenceNode,
            config,
            spec,
            coordinator,
            run_dir,
            # One courier thread per waiting request: every actor's can be in one batch.
            courier_kwargs={"thread_pool_size": max(16, 2 * config.actor.num_actors + 4)},
        )
        inference = inference_node.create_handle()
        inference.set_client_kwargs(call_timeout=config.inference.call_timeout_seconds + 5)
        learner_process.append(inference_node)

    if config.replay.colocate_with_learner:
        # One process: sampling skips gRPC (measured 2x the learner's rate here).
        program.add_node(
            lp.MultiThreadingColocation([replay_nodes[0], *learner_process]), label="learner"
        )
        if num_shards > 1:
            with program.group("replay"):
                for node in replay_nodes[1:]:
                    program.add_node(node)
    else:
        if num_shards == 1:
            program.add_node(replay_nodes[0], label="replay")
        else:
            with program.group("replay"):
                for node in replay_nodes:
                    program.add_node(node)
        if len(learner_process) == 1:
            program.add_node(learner_node, label="learner")
        else:
            program.add_node(lp.MultiThreadingColocation(learner_process), label="learner")

    evaluator_node = lp.CourierNode(EvaluatorNode, config, learner, coordinator, run_dir, store)
    # The coordinator and the evaluator are light: one process for both saves a
    # TensorFlow import (~5 s of CPU) at start-up.
    program.add_node(
        lp.MultiThreadingColocation([coordinator_node, evaluator_node]), label="coordinator"
    )
    if store_node is not None:
        program.add_node(store_node, label="model_store")

    with program.group("actor"):
        for i in range(config.actor.num_actors):
            counts = (0, 0)
            if resume_state:
                counts = (
                    int(resume_state.get("actor_steps", {}).get(str(i), 0)),
                    int(resume_state.get("actor_episodes", {}).get(str(i), 0)),
                )
            program.add_node(
                lp.CourierNode(
                    ActorNode,
                    config,
                    builder,
                    i,
                    shard_handles[shard_of_actor(i, num_shards)],
                    variable_source,
                    coordinator,
                    counts,
                    inference,
                )
            )
    return program
