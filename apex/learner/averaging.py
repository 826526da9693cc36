"""An exponential moving average of the online network's weights
(evaluation.weights='average'): what the evaluator plays and keeps as the
best, while the actors act with the online weights.

Greedy policies of a Q-network trained at a high replay ratio flip between
nearby parameters; their average changes more slowly (Polyak averaging).
The average is a second set of variables updated inside TensorFlow after
each call of the SGD step: k steps of a call count as k steps of decay,
avg <- d**k * avg + (1 - d**k) * online.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

PREFIX = "average/"
"""The checkpoint keys of the average (average/<i>, the online weights' order)."""


class WeightAverage:
    """The average of `variables` (the online network's), decay `decay` per SGD step;
    it starts equal to them."""

    def __init__(self, variables: Sequence[tf.Variable], decay: float):
        self._online = list(variables)
        self.decay = float(decay)
        self.variables = [
            tf.Variable(v.read_value(), trainable=False, name=f"average_{i}")
            for i, v in enumerate(self._online)
        ]
        self._apply = tf.function(self._blend, autograph=False)

    def _blend(self, keep: tf.Tensor) -> None:
        for avg, v in zip(self.variables, self._online):
            k = tf.cast(keep, avg.dtype)
            avg.assign(k * avg + (1.0 - k) * v)

    def update(self, steps: int = 1) -> None:
        """The average after `steps` more SGD steps of the online weights (as they are now)."""
        self._apply(tf.constant(self.decay ** int(steps), tf.float64))

    def get_weights(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.variables]

    def get_state(self) -> dict[str, np.ndarray]:
        """average/<i> for each weight (the learner's checkpoint keys)."""
        return {f"{PREFIX}{i}": v.numpy() for i, v in enumerate(self.variables)}

    def set_state(self, state: dict[str, np.ndarray]) -> bool:
        """Restores `get_state()`'s arrays; a state without them (a checkpoint of a
        run that evaluated its online weights) starts the average from the online
        weights. Returns whether the average was in `state`. ValueError names a
        misshapen array."""
        if f"{PREFIX}0" not in state:
            for avg, v in zip(self.variables, self._online):
                avg.assign(v)
            return False
        for i, avg in enumerate(self.variables):
            key = f"{PREFIX}{i}"
            if key not in state:
                raise ValueError(f"{key}: missing ({len(self.variables)} arrays expected)")
            if tuple(state[key].shape) != tuple(avg.shape):
                raise ValueError(f"{key}: saved shape {state[key].shape}, now {avg.shape}")
            avg.assign(state[key])
        return True
