"""Adam on a list of tf.Variables, with its state as plain variables.

Keras' optimizer fails to apply gradients inside a tf.function first traced on
a non-main thread (colocated Launchpad nodes); this one is 20 lines, has no
such issue and its state is easy to checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf


class Adam(tf.Module):
    """Adam (Kingma & Ba 2015) with bias correction."""

    def __init__(
        self,
        variables: Sequence[tf.Variable],
        learning_rate: float,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
    ):
        super().__init__(name="adam")
        self._lr, self._b1, self._b2, self._eps = learning_rate, beta1, beta2, epsilon
        self.m = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]
        self.v = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False)

    def apply(self, grads: Sequence[tf.Tensor], variables: Sequence[tf.Variable]) -> None:
        self.iterations.assign_add(1)
        t = tf.cast(self.iterations, tf.float32)
        lr = self._lr * tf.sqrt(1.0 - self._b2**t) / (1.0 - self._b1**t)
        for g, var, m, v in zip(grads, variables, self.m, self.v):
            m.assign(self._b1 * m + (1.0 - self._b1) * g)
            v.assign(self._b2 * v + (1.0 - self._b2) * tf.square(g))
            var.assign_sub(lr * m / (tf.sqrt(v) + self._eps))
