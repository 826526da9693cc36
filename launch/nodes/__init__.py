"""Node adapters: each wires one apex role to Launchpad's handles and stop event.

Nodes are classes plus plain arguments (the config, the builder, handles), so
the program pickles for local_mp. Which node may touch the run directory:

  coordinator (+ evaluator)  the control plane; owns the run directory
  learner (+ replay)         metrics, checkpoints, stack dumps, on the same host
  actor                      nothing: beats, metrics rows and failures go to the
                             coordinator over RPC, items to replay, parameters
                             come from the learner; an actor can run on a host
                             that cannot see the run directory

Every public method of a CourierNode class is an RPC.

A node that dies of an exception names it: it reports '<Type>: <message>' to
the coordinator (`report_node_failure`: over RPC, or directly to a coordinator
in its own process) and, where it may write the run directory, leaves
RUN_DIR/failures/<node>.json (apex.supervision.record_failure) for whoever
finds its process dead. The evaluator, in the coordinator's process, reports
and returns: the coordinator then stops the program in order ('node failed').

One module per node (actor, learner, replay, coordinator, evaluator, inference,
model_store) and what they share (common). This package is their face: what
launch.program, the launchers and tests use.
"""

from launch.nodes.actor import ActorNode
from launch.nodes.common import node_should_stop, report_node_failure
from launch.nodes.coordinator import CoordinatorNode
from launch.nodes.evaluator import EvaluatorNode
from launch.nodes.inference import InferenceNode
from launch.nodes.learner import LearnerNode
from launch.nodes.model_store import ModelStoreNode
from launch.nodes.replay import GracefulReverbNode, PinnedPortAddress

__all__ = [
    "ActorNode",
    "CoordinatorNode",
    "EvaluatorNode",
    "GracefulReverbNode",
    "InferenceNode",
    "LearnerNode",
    "ModelStoreNode",
    "PinnedPortAddress",
    "node_should_stop",
    "report_node_failure",
]
