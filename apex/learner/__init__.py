"""The generic learner: prioritized sampling from Reverb, importance weights,
the SGD step, target network, asynchronous priority updates, run checkpoints;
also the variable source of the actors. The agent's builder supplies the
network, the input transform and the loss (apex.agents.builder).

Its parts, one job each (the bottom ones first):

    sampling.py          the batches: one prefetching dataset per replay shard
                         (the input transform applied there), the sharded
                         sampler, the wait for min_size, the shutdown drain
    sgd.py               the networks, Adam and the SGD step: one body for one
                         server and for S shards; importance weights by
                         apex.replay.priorities.importance_weights
    priority_updates.py  new priorities back to each batch's shard; sent and
                         acked counts and the unacknowledged warning
    metrics.py           the metrics row (policy lag, sample age, bands)
    state.py             checkpoint state, best params, checkpoint requests
    learner.py           Learner: the composition and its loop

`from apex.learner import Learner` is the face; `SGDStep` (the step alone, on
batches you give it) is there for benchmarks (bench/learner.py).
"""

from apex.learner.learner import Learner
from apex.learner.sgd import SGDStep

__all__ = ["Learner", "SGDStep"]
