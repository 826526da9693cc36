"""apex: replay-centric distributed off-policy RL (Ape-X DQN, R2D2) on Reverb + Launchpad.

The library never reads flags and never launches; `launch/` does. This module is
apex's top face. launch/, tools/, bench/ and a user's script import apex through
four faces and nothing deeper (tests/test_faces.py checks it):

    apex          this one: configs, errors, the roles a program runs, run directories
    apex.agents   the agents' registry and builders: tables, networks, policies, actors
    apex.replay   replay: shards, table figures, the writer, items, the dataset
    apex.compat   every private Reverb / Launchpad / TensorFlow symbol apex touches

Modules inside apex/ import each other's concrete modules, never a face above them.

Importing `apex` imports no TensorFlow, Reverb, Launchpad or gymnasium, so a
refusal or a tool on a run directory stays light (tests/test_light_imports.py).
The names marked (lazy) are resolved on first use (a PEP 562 `__getattr__`)
and import their module then: (lazy, TF) imports TensorFlow, (lazy, Launchpad)
Launchpad, (lazy, gymnasium) gymnasium.

Configs
    ApexConfig                       the schema (apex/config/schema.py: every field, what it means)
    load_config_file, apply_override a config file (`get_config()`), a `--config.a.b=value`
    validate, unused_fields          the checks (ConfigError names the field, the value, what
                                     is valid); the fields a config sets that its agent ignores
    rate_limit_plan                  the replay's rate limiter read as a plan
Errors
    ApexError                        the base of every error apex raises on purpose
    ConfigError, PlacementError, PolicyError
    CheckpointError, CheckpointNotFoundError, CorruptCheckpointError,
    IncompleteCheckpointError, UnknownTableError
Environments
    EnvSpec                          what the program needs to know of an env (no gymnasium)
    env_spec, make_env, prepare_env, to_observation   (lazy, gymnasium)
    make_slots, check_vectorization  an actor's envs as one vector env (env.vectorization),
                                     the mode a config runs in      (lazy, gymnasium)
    SplitSlots, check_overlap        the envs in two halves stepped in turn (actor.overlap)
Exploration
    slot_epsilons, epsilon_bands, band_labels   each actor slot's epsilon, their bands
The roles a program runs (launch/nodes/ adapts each to a node)
    Learner                          (lazy, TF) the SGD loop and the actors' variable source
    SGDStep                          (lazy, TF) the learner's SGD step alone (bench/learner.py)
    Evaluator                        (lazy, TF) greedy episodes on the latest parameters
    Coordinator, SUMMARY_KEYS        (lazy, Launchpad) the control plane; summary.json's keys
    BatchingServer, InferenceService, bucket_size, follow_learner   central inference
    ModelStore                       the parameters actors pull
    Reporter, StopRequested          a role's reports to the coordinator; the stop it raises
    MetricsWriter, RemoteMetrics, read_jsonl   (lazy, Launchpad) metrics rows
Process life and supervision
    STOP_WINDOW                      the stop's time budget (apex.lifecycle)
    NodeMonitor, decide_restart      who watches the nodes; whether a dead one restarts
    decide_program_restart, failed_node, read_program_restarts, PROGRAM_RESTARTS_FILE
                                     whole-program restarts (RUN_DIR/restarts.json)
    exception_text, record_failure, recorded_failure   a node's failure, written and read
    read_heartbeats, pid_alive       RUN_DIR's heartbeats; whether a process runs
    diagnose                         the hang doctor's findings on a run directory
    StopReason, StopVerdict, NodeFailure, FailureKind  the coordinator's verdicts
Run directories and output
    default_run_dir, prepare_run_dir, run_setting, git_commit
    write_json_atomic, check_port_free
    FilteredStdout, LineFilter, TolerantStream, VERBOSE_ENV, verbose, write_lines
Cluster placement (Ray)
    ClusterNode, Demand, SERVER_LABELS, demands, plan_placement, describe_placement
Trained policies
    export_policy, load_policy       a run's policy to a folder; a folder's policy back
Modules used whole (their names read best qualified)
    checkpointing                    run checkpoints: load, latest_complete, verify_files, ...
    RunCheckpointer                  the learner's writer of run checkpoints
    FULL_DISK, is_disk_full          writes a full disk refused (apex.full_disk)
    MetricSinks, group_overrides, end_group   metrics to W&B and MLflow (apex.tracking)
    heartbeat                        the heartbeat protocol: Heartbeat, its states, HOST
    fence                            actors' leases from the coordinator: Lease, Leases, FENCED_EXIT_CODE
    lifecycle                        stop handlers, watchdogs, NO_SHARED_FS_ENV
    netns                            the isolated network namespace of a test run
    compat                           also reachable as `apex.compat`

Example (a user's script):

    from apex import ApexConfig, ConfigError, load_policy, validate

    config = ApexConfig()
    config.actor.num_actors = 4
    validate(config)  # raises ConfigError naming the field, the value and what is valid

    policy = load_policy("policy/")  # a folder `python -m tools.policy export` wrote
    env = policy.make_env()
    obs, _ = env.reset(seed=0)
    action = policy.act(obs)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apex import checkpointing, compat, fence, heartbeat, lifecycle, netns
from apex.config import ApexConfig, apply_override, load_config_file
from apex.doctor import diagnose
from apex.errors import (
    ApexError,
    CheckpointError,
    CheckpointNotFoundError,
    ConfigError,
    CorruptCheckpointError,
    IncompleteCheckpointError,
    UnknownTableError,
)
from apex.exploration import band_labels, epsilon_bands, slot_epsilons
from apex.full_disk import FULL_DISK, is_disk_full
from apex.heartbeat import pid_alive, read_heartbeats
from apex.inference import BatchingServer, InferenceService, bucket_size, follow_learner
from apex.jsonio import write_json_atomic
from apex.lazy import lazy_names
from apex.lifecycle import STOP_WINDOW
from apex.model_store import ModelStore
from apex.output import (
    VERBOSE_ENV,
    FilteredStdout,
    LineFilter,
    TolerantStream,
    verbose,
    write_lines,
)
from apex.placement import (
    SERVER_LABELS,
    ClusterNode,
    Demand,
    PlacementError,
    demands,
    plan_placement,
)
from apex.placement import describe as describe_placement
from apex.planning import rate_limit_plan
from apex.ports import check_port_free
from apex.restart import (
    PROGRAM_RESTARTS_FILE,
    decide_program_restart,
    decide_restart,
    failed_node,
    read_program_restarts,
)
from apex.roles import Reporter
from apex.run_checkpointer import RunCheckpointer
from apex.run_dir import default_run_dir, git_commit, prepare_run_dir, run_setting
from apex.specs import EnvSpec
from apex.supervision import NodeMonitor, exception_text, record_failure, recorded_failure
from apex.tracking import MetricSinks, end_group, group_overrides
from apex.trained_policy import PolicyError
from apex.trained_policy import export as export_policy
from apex.trained_policy import load as load_policy
from apex.validation import unused_fields, validate
from apex.variables import StopRequested
from apex.verdicts import FailureKind, NodeFailure, StopReason, StopVerdict

if TYPE_CHECKING:  # pragma: no cover - for type checkers; at run time see _LAZY
    from apex.coordination import SUMMARY_KEYS, Coordinator
    from apex.envs import env_spec, make_env, prepare_env, to_observation
    from apex.evaluation import Evaluator
    from apex.learner import Learner, SGDStep
    from apex.metrics import MetricsWriter, RemoteMetrics, read_jsonl
    from apex.vector_envs import check_vectorization, make_slots
    from apex.vector_halves import SplitSlots, check_overlap

__version__ = "0.1.0"

# The lazy names: name -> the module that defines it (imported on first use).
_LAZY: dict[str, str] = {
    "Coordinator": "apex.coordination",  # Launchpad (courier)
    "SUMMARY_KEYS": "apex.coordination",
    "env_spec": "apex.envs",  # gymnasium
    "make_env": "apex.envs",
    "prepare_env": "apex.envs",
    "to_observation": "apex.envs",
    "make_slots": "apex.vector_envs",  # gymnasium
    "check_vectorization": "apex.vector_envs",
    "check_overlap": "apex.vector_halves",  # gymnasium
    "SplitSlots": "apex.vector_halves",
    "Evaluator": "apex.evaluation",  # TensorFlow
    "Learner": "apex.learner",  # TensorFlow, Reverb
    "SGDStep": "apex.learner",
    "MetricsWriter": "apex.metrics",  # Launchpad (acme's loggers)
    "RemoteMetrics": "apex.metrics",
    "read_jsonl": "apex.metrics",
}


__getattr__, __dir__ = lazy_names(globals(), _LAZY)


__all__ = [
    # configs
    "ApexConfig",
    "apply_override",
    "load_config_file",
    "rate_limit_plan",
    "unused_fields",
    "validate",
    # errors
    "ApexError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "ConfigError",
    "CorruptCheckpointError",
    "IncompleteCheckpointError",
    "PlacementError",
    "PolicyError",
    "UnknownTableError",
    # environments
    "EnvSpec",
    "env_spec",
    "make_env",
    "prepare_env",
    "to_observation",
    "make_slots",
    "check_vectorization",
    "check_overlap",
    "SplitSlots",
    # exploration
    "band_labels",
    "epsilon_bands",
    "slot_epsilons",
    # roles
    "SUMMARY_KEYS",
    "BatchingServer",
    "Coordinator",
    "Evaluator",
    "InferenceService",
    "Learner",
    "SGDStep",
    "MetricsWriter",
    "ModelStore",
    "RemoteMetrics",
    "Reporter",
    "StopRequested",
    "bucket_size",
    "follow_learner",
    "read_jsonl",
    # process life and supervision
    "STOP_WINDOW",
    "FailureKind",
    "NodeFailure",
    "NodeMonitor",
    "StopReason",
    "StopVerdict",
    "PROGRAM_RESTARTS_FILE",
    "decide_program_restart",
    "decide_restart",
    "diagnose",
    "failed_node",
    "exception_text",
    "pid_alive",
    "read_heartbeats",
    "read_program_restarts",
    "record_failure",
    "recorded_failure",
    # run directories and output
    "VERBOSE_ENV",
    "FilteredStdout",
    "LineFilter",
    "TolerantStream",
    "check_port_free",
    "default_run_dir",
    "git_commit",
    "prepare_run_dir",
    "run_setting",
    "verbose",
    "write_json_atomic",
    "write_lines",
    # cluster placement
    "SERVER_LABELS",
    "ClusterNode",
    "Demand",
    "demands",
    "describe_placement",
    "plan_placement",
    # trained policies
    "export_policy",
    "load_policy",
    # modules used whole
    "checkpointing",
    "RunCheckpointer",
    "FULL_DISK",
    "is_disk_full",
    "MetricSinks",
    "group_overrides",
    "end_group",
    "compat",
    "fence",
    "heartbeat",
    "lifecycle",
    "netns",
    "__version__",
]
