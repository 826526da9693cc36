"""Adam on a list of tf.Variables, with its state as plain variables.

Keras' optimizer fails to apply gradients inside a tf.function first traced on
a non-main thread (colocated Launchpad nodes); this one is 20 lines, has no
such issue and its state is easy to checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf


class Adam(tf.Module):
    """Adam (Kingma & Ba 2015) with bias correction, and an optional linear
    step-size schedule: `learning_rate` at step 0 to `final_learning_rate` at
    `decay_steps`, constant after. The schedule reads `iterations`, so a
    restored optimizer continues it exactly."""

    def __init__(
        self,
        variables: Sequence[tf.Variable],
        learning_rate: float,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        final_learning_rate: float | None = None,
        decay_steps: int = 1,
    ):
        super().__init__(name="adam")
        self._lr, self._b1, self._b2, self._eps = learning_rate, beta1, beta2, epsilon
        self._final = final_learning_rate
        self._decay_steps = max(1, int(decay_steps))
        self.m = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]
        self.v = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False)

    def apply(self, grads: Sequence[tf.Tensor], variables: Sequence[tf.Variable]) -> None:
        self.iterations.assign_add(1)
        t = tf.cast(self.iterations, tf.float32)
        lr = self._scheduled(t) * tf.sqrt(1.0 - self._b2**t) / (1.0 - self._b1**t)
        for g, var, m, v in zip(grads, variables, self.m, self.v):
            m.assign(self._b1 * m + (1.0 - self._b1) * g)
            v.assign(self._b2 * v + (1.0 - self._b2) * tf.square(g))
            var.assign_sub(lr * m / (tf.sqrt(v) + self._eps))

    def _scheduled(self, t: tf.Tensor | float) -> tf.Tensor | float:
        if self._final is None:
            return self._lr
        frac = tf.minimum(1.0, tf.cast(t, tf.float32) / float(self._decay_steps))
        return self._lr + (self._final - self._lr) * frac

    def learning_rate(self) -> float:
        """The scheduled step size of the next step (before bias correction)."""
        # A NumPy scalar, not a Python float: TF 2.8 keeps the tensor of every
        # Python number it converts (its scalar cache), one per metrics row.
        return float(self._scheduled(np.float32(self.iterations.numpy())))
