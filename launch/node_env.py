"""The environment variables a launcher sets for the node processes it starts
(read by launch.nodes; set by launch.train and the Ray launcher)."""

from __future__ import annotations

# Set by launch.train: the launcher's pid. A node process whose launcher is gone
# (SIGKILLed) stops itself in order instead of running on as an orphan.
LAUNCHER_PID_ENV = "APEX_LAUNCHER_PID"
# Set by a launcher that starts a node again after its host died (the Ray
# launcher): an actor then carries on from the counts the coordinator holds.
RESTARTED_ENV = "APEX_NODE_RESTARTED"
# Set by a launcher whose actor processes are started again when they die
# (launch.node_restarts: local_mp's wrappers, the Ray launcher): the policy,
# 'MAX_RESTARTS:BACKOFF_SECONDS'. The coordinator then gives a dead actor time
# to come back before it counts as a failure.
ACTOR_RESTARTS_ENV = "APEX_ACTOR_PROCESS_RESTARTS"
# The how-manieth restart of its slot's process an actor process is (1, 2, ...).
PROCESS_RESTART_ENV = "APEX_PROCESS_RESTART"
# Set on the last start of an actor past actor.max_restarts: the actor reports
# this text to the coordinator as its failure (the program stops in order) and acts no more.
GIVE_UP_ENV = "APEX_ACTOR_GIVE_UP"
# What the Ray launcher passes on to its node processes from its own environment
# (with the kernels and BLAS pool launch.train sets before any import).
FORWARDED_ENV_PREFIXES = (
    "APEX_",
    "TF_CPP_",
    "TF_ENABLE_ONEDNN",
    "OPENBLAS_",
    "PYTHONWARNINGS",
    "PYTHONPATH",
)
