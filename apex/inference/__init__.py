"""Where actors get their Q-values when they hold no network: central inference.

`actor.inference = "local"` (the default): each actor pulls parameters from the
variable source every `actor.params_update_period` env steps and runs its own
batch-E forward pass (apex.agents.policy.LocalQ).

`actor.inference = "central"`: actors are env steppers. They send their
observations (and recurrent states) to the inference node and get back the
Q-values, the new states and the parameter version used:

    client.py   RemoteQ: the actor's side (below the agents)
    server.py   BatchingServer, InferenceService, follow_learner: the node's side
"""

from apex.inference.client import RemoteQ
from apex.inference.server import (
    BatchingServer,
    InferenceService,
    ServerStopped,
    bucket_size,
    follow_learner,
)

__all__ = [
    "BatchingServer",
    "InferenceService",
    "RemoteQ",
    "ServerStopped",
    "bucket_size",
    "follow_learner",
]
