"""The coordinator: the program's control plane. It counts, receives every
node's beats and decides liveness and "finished" from them, writes the run
directory's files for the nodes that cannot (metrics of remote nodes,
heartbeats, state.json, replay_address, summary.json), prints what the start
waits for and then progress, and stops the program.

With replay.num_shards S > 1 it polls every shard's server: the replay
figures (metrics rows, state.json, summary.json, the progress line) are
totals over the shards, with each shard's own next to them
(`replay/shard_<s>/...` rows, summary.json's `replay_shards`); the file
RUN_DIR/replay_address names shard 0's server and RUN_DIR/replay_addresses
every shard's, one line each: `<shard name> <HOST:PORT>` (REPLAY_ADDRESSES_FILE).
A shard server in a process of its own beats like any node, so its death stops
the program with 'node failed' naming it.

Every call a node makes to it is an RPC with a bounded timeout (courier),
so a node on another host, with no access to the run directory, takes part
in a run, a stop and a resume.

Its decisions are values (apex.verdicts): `check_stop` returns a StopVerdict
(a StopReason, and the NodeFailure behind NODE_FAILED), `check_nodes` a
NodeFailure; summary.json's `stop_reason` and `failure` are their messages.

The parts, one job each:
  counters.py     the run's counters (reports in, checkpoint state out)
  replay_poll.py  the replay servers' figures (totals and each shard's)
  summary.py      summary.json, state.json, the progress line, the metrics row
  startup.py      the start lines: replay serving, each actor inserting, the learner's first step
  health.py       the hang doctor's findings and RUN_DIR/doctor.log
  stop.py         the stop decisions, the stop lines and the waits at a stop
  coordinator.py  the Coordinator: the RPCs and the loop, composing the above
"""

from apex.coordination.coordinator import Coordinator
from apex.coordination.replay_poll import REPLAY_ADDRESS_FILE, REPLAY_ADDRESSES_FILE, SHARD_KEYS
from apex.coordination.summary import SUMMARY_KEYS
from apex.verdicts import FailureKind, NodeFailure, StopReason, StopVerdict

__all__ = [
    "REPLAY_ADDRESSES_FILE",
    "REPLAY_ADDRESS_FILE",
    "SHARD_KEYS",
    "SUMMARY_KEYS",
    "Coordinator",
    "FailureKind",
    "NodeFailure",
    "StopReason",
    "StopVerdict",
]
