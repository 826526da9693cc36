"""The environment variables a launcher sets for the node processes it starts
(read by launch.nodes; set by launch.train and the Ray launcher)."""

from __future__ import annotations

# Set by launch.train: the launcher's pid. A node process whose launcher is gone
# (SIGKILLed) stops itself in order instead of running on as an orphan.
LAUNCHER_PID_ENV = "APEX_LAUNCHER_PID"
# Set by a launcher that starts a node again after its host died (the Ray
# launcher): an actor then carries on from the counts the coordinator holds.
RESTARTED_ENV = "APEX_NODE_RESTARTED"
